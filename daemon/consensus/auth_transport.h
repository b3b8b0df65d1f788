// An authenticated TCP transport for C-Raft 0.15 (a struct raft_uv_transport). C-Raft's
// own TCP transport accepts anyone who can reach the port: any process could join, vote
// or append entries. This one runs a mutual HMAC-SHA256 challenge-response keyed with the
// cluster secret on every connection before C-Raft sees the stream, so a peer without the
// secret never gets a single byte to Raft, and a node never sends Raft traffic (log
// entries, snapshots) to a listener that does not hold the secret either.
//
// Handshake (all integers little-endian), on a fresh TCP connection:
//   acceptor  -> connector: "TRAUTH1\0" | nonce_a[32]
//   connector -> acceptor : nonce_c[32] | u64 connector_id | u64 address_len |
//                           connector_address[address_len] (<= 1024 bytes) |
//                           HMAC(secret, "traintl raft auth v1 connector" | nonce_a |
//                                nonce_c | connector_id | address_len | address)
//   acceptor  -> connector: u64 acceptor_id |
//                           HMAC(secret, "traintl raft auth v1 acceptor" | nonce_a |
//                                nonce_c | connector_id | acceptor_id)
// Both nonces are fresh random bytes per connection, so a recorded handshake cannot be
// replayed; MACs are compared in constant time. The connector also checks that the
// acceptor is the server id it meant to reach. Then the stream is handed to C-Raft (the
// acceptor's accept callback, the connector's connect callback), which speaks its usual
// protocol on it; the handshake replaces C-Raft's own unauthenticated preamble.
//
// Against unauthenticated peers the transport bounds what they can cost, and keeps them
// from crowding out the cluster's own connections (an election needs new connections
// between followers, so a port whose handshake slots are held by strangers delays
// failover):
//   - each incoming connection must deliver its whole claim within claim_timeout (1 s) of
//     being accepted: the connector speaks right after our hello, so a member answers
//     within a round trip, while a silent or trickling stranger is dropped early;
//   - at most max_pending_handshakes (128) incoming handshakes run at once, and at most
//     max_pending_per_source (64) from one IP address. A new connection beyond either
//     bound closes the oldest incoming handshake still waiting for its claim (of that
//     address, for the per-source bound) instead of being refused: a member's handshake
//     takes a round trip, so it completes unless that many newer connections arrive
//     within that round trip, and a stranger reconnecting in a loop only ever displaces
//     its own older connections. Only when every slot holds a verified claim (never
//     strangers) is the new connection refused;
//   - every handshake reads a fixed, small amount and ends at handshake_timeout (5 s).
// Failures are logged at most once per 10 s.
//
// What this does not give: confidentiality. Raft traffic after the handshake is not
// encrypted, so it must not cross an untrusted network where eavesdropping matters.
//
// Thread-safety: like every raft_uv_transport, used only on its libuv loop's thread.
#pragma once

#include <uv.h>

extern "C" {
#include <raft.h>
#include <raft/uv.h>
}

#include <chrono>
#include <cstddef>
#include <string>

namespace traintl {

struct AuthTransportOptions {
  // The shared cluster secret (any bytes; at least 16 are required). Required.
  std::string secret;
  // Time a connection may take to complete the handshake, in either direction. Default 5 s.
  std::chrono::milliseconds handshake_timeout{5000};
  // Time an incoming connection may take, from accept, to send its whole claim (at most
  // 1104 bytes, sent by a member in one write right after our hello). Capped by
  // handshake_timeout. Default 1 s.
  std::chrono::milliseconds claim_timeout{1000};
  // Incoming connections handshaking at once. A connection beyond it closes the oldest
  // one still waiting for its claim; it is refused only when none is. Default 128.
  size_t max_pending_handshakes = 128;
  // Incoming connections handshaking at once from one IP address. A connection beyond it
  // closes that address's oldest one still waiting for its claim (refused when none is).
  // 0: no per-address bound. Default 64.
  size_t max_pending_per_source = 64;
};

// Smallest accepted secret, in bytes.
inline constexpr size_t kMinClusterSecretBytes = 16;

// Sets up `t` (zeroed or fresh) as an authenticated transport on `loop`, to be passed to
// raft_uv_init. Returns 0, or RAFT_INVALID (a secret shorter than kMinClusterSecretBytes)
// or RAFT_NOMEM, with t->errmsg set.
int AuthTransportInit(struct raft_uv_transport* t, uv_loop_t* loop,
                      const AuthTransportOptions& options);

// Releases what AuthTransportInit allocated. Call after the transport's close callback
// fired (raft_uv_close and the loop running dry), as with raft_uv_tcp_close.
void AuthTransportFree(struct raft_uv_transport* t);

// Counters for tests and diagnostics (loop thread only).
struct AuthTransportStats {
  uint64_t accepted = 0;        // incoming connections handed to Raft
  uint64_t connected = 0;       // outgoing connections handed to Raft
  uint64_t rejected = 0;        // handshakes that failed (bad MAC, malformed, timeout...)
  uint64_t refused_busy = 0;    // incoming connections refused: every slot held a verified claim
  uint64_t evicted = 0;         // waiting handshakes closed to make room for newer connections
  uint64_t claim_timeouts = 0;  // incoming connections closed at claim_timeout
};
AuthTransportStats GetAuthTransportStats(const struct raft_uv_transport* t);

}  // namespace traintl
