// Over 600 lines on purpose: this file is one security protocol, the handshake of
// auth_transport.h, written as a libuv callback state machine. The acceptor's steps, the
// connector's steps and the MAC inputs they compute must agree byte for byte, and the
// slot accounting (eviction, per-source bounds, timeouts) must be checked against every
// path that ends a handshake; an audit reads them together. Split into files, the shared
// Handshake and Transport structs and the two dozen internal-linkage callbacks would move
// into a header visible to every part, and the protocol would be spread over several
// files, which makes it harder to review, not easier.
#include "daemon/consensus/auth_transport.h"

#include <netdb.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>

#include "common/logging.h"

namespace traintl {
namespace {

constexpr char kMagic[8] = {'T', 'R', 'A', 'U', 'T', 'H', '1', '\0'};
constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;
constexpr size_t kMaxAddressBytes = 1024;
// acceptor -> connector: magic | nonce_a
constexpr size_t kHelloBytes = sizeof kMagic + kNonceBytes;
// connector -> acceptor, before the address: nonce_c | id | address_len
constexpr size_t kClaimHeadBytes = kNonceBytes + 8 + 8;
// acceptor -> connector: acceptor id | mac
constexpr size_t kProofBytes = 8 + kMacBytes;
constexpr char kConnectorLabel[] = "traintl raft auth v1 connector";
constexpr char kAcceptorLabel[] = "traintl raft auth v1 acceptor";
constexpr auto kLogInterval = std::chrono::seconds(10);
// Connections the kernel queues until we accept them. Large: under a connection flood a
// full queue drops a member's SYN, and TCP retries it only after a second, which is more
// than a failover may take. Linux caps it at net.core.somaxconn.
constexpr int kListenBacklog = 1024;

void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; i++) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

struct Transport;

struct Handshake {
  Transport* t = nullptr;
  bool incoming = false;
  uv_tcp_t* tcp = nullptr;  // raft_malloc'd: C-Raft frees it with raft_free once it owns it
  uv_timer_t timer{};
  uv_connect_t connect_req{};
  uv_write_t write_req{};
  int open_handles = 0;  // of tcp and timer, while closing
  bool failed = false;   // closing after a failure or cancellation
  bool handed_over = false;
  bool writing = false;
  bool handover_after_write = false;
  bool claim_sent = false;  // outgoing: our claim is out, the proof is awaited
  int status = 0;           // for the connect callback of a failed outgoing handshake

  // Incoming.
  uint32_t source = 0;         // the peer's IPv4 address (network order): per-source bound
  uint64_t ticket = 0;         // accept order: the oldest waiting handshake is evicted first
  bool waiting_claim = false;  // in Transport::waiting: no verified claim yet, evictable
  bool live = false;           // counted in Transport::incoming_live

  // Outgoing.
  struct raft_uv_connect* req = nullptr;
  raft_uv_connect_cb cb = nullptr;
  raft_id peer_id = 0;

  std::string peer;  // for logs: the address connected to, or the remote ip:port
  std::string rbuf;
  size_t rgot = 0;
  void (*on_read)(Handshake*) = nullptr;
  std::string wbuf;

  unsigned char nonce_a[kNonceBytes] = {};
  unsigned char nonce_c[kNonceBytes] = {};
  raft_id claimed_id = 0;
  std::string claimed_address;
};

struct Transport {
  struct raft_uv_transport* outer = nullptr;
  uv_loop_t* loop = nullptr;
  AuthTransportOptions options;
  raft_id id = 0;
  std::string address;
  uv_tcp_t listener{};
  bool listener_open = false;
  raft_uv_accept_cb accept_cb = nullptr;
  std::set<Handshake*> handshakes;
  // Incoming handshakes neither failed nor handed over (max_pending_handshakes).
  size_t incoming_live = 0;
  // Incoming handshakes waiting for their claim, by accept order, and their number per
  // source address (max_pending_per_source): the candidates for eviction.
  std::map<uint64_t, Handshake*> waiting;
  std::unordered_map<uint32_t, size_t> waiting_by_source;
  uint64_t next_ticket = 1;
  bool closing = false;
  bool close_fired = false;
  raft_uv_transport_close_cb close_cb = nullptr;
  AuthTransportStats stats;
  std::chrono::steady_clock::time_point last_log{};
  uint64_t unlogged = 0;
};

Transport* Get(struct raft_uv_transport* t) { return static_cast<Transport*>(t->impl); }

void SetError(struct raft_uv_transport* t, const std::string& msg) {
  std::snprintf(t->errmsg, sizeof t->errmsg, "%s", msg.c_str());
}

bool Mac(const std::string& key, const char* label, const std::string& data,
         unsigned char out[kMacBytes]) {
  std::string msg(label);
  msg.push_back('\0');
  msg += data;
  unsigned int len = 0;
  return HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
              reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out,
              &len) != nullptr &&
         len == kMacBytes;
}

std::string Bytes(const unsigned char* p, size_t n) {
  return std::string(reinterpret_cast<const char*>(p), n);
}

// Resolves "host:port" (IPv4) for connect and listen.
bool ParseAddress(const std::string& address, struct sockaddr_in* out) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return false;
  const std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) return false;
  int p = std::stoi(port);
  if (p > 65535) return false;
  if (uv_ip4_addr(host.c_str(), p, out) == 0) return true;
  struct addrinfo hints {};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return false;
  std::memcpy(out, res->ai_addr, sizeof *out);
  out->sin_port = htons(static_cast<uint16_t>(p));
  freeaddrinfo(res);
  return true;
}

std::string RemoteOf(uv_tcp_t* tcp) {
  struct sockaddr_storage ss {};
  int len = sizeof ss;
  if (uv_tcp_getpeername(tcp, reinterpret_cast<struct sockaddr*>(&ss), &len) != 0 ||
      ss.ss_family != AF_INET) {
    return "?";
  }
  char ip[64] = {};
  auto* sin = reinterpret_cast<struct sockaddr_in*>(&ss);
  uv_ip4_name(sin, ip, sizeof ip);
  return std::string(ip) + ":" + std::to_string(ntohs(sin->sin_port));
}

// The peer's IPv4 address in network order (0 when unknown): the key of the per-source
// bound.
uint32_t SourceOf(uv_tcp_t* tcp) {
  struct sockaddr_storage ss {};
  int len = sizeof ss;
  if (uv_tcp_getpeername(tcp, reinterpret_cast<struct sockaddr*>(&ss), &len) != 0 ||
      ss.ss_family != AF_INET) {
    return 0;
  }
  return reinterpret_cast<struct sockaddr_in*>(&ss)->sin_addr.s_addr;
}

void LogFailure(Transport* t, const std::string& message) {
  auto now = std::chrono::steady_clock::now();
  if (t->last_log != std::chrono::steady_clock::time_point{} && now - t->last_log < kLogInterval) {
    ++t->unlogged;
    return;
  }
  LOG_WARN << "raft auth: " << message
           << (t->unlogged > 0 ? " (and " + std::to_string(t->unlogged) +
                                     " more failures since the last report)"
                               : std::string());
  t->last_log = now;
  t->unlogged = 0;
}

void MaybeFireClose(Transport* t) {
  if (!t->closing || t->close_fired || t->listener_open || !t->handshakes.empty()) return;
  t->close_fired = true;
  if (t->close_cb != nullptr) t->close_cb(t->outer);
}

void Finish(Handshake* h) {
  Transport* t = h->t;
  if (!h->incoming && !h->handed_over) {
    // The handle is closed; C-Raft never saw it.
    h->req->cb(h->req, nullptr, h->status != 0 ? h->status : RAFT_NOCONNECTION);
  }
  if (!h->handed_over) raft_free(h->tcp);
  t->handshakes.erase(h);
  delete h;
  MaybeFireClose(t);
}

void OnHandleClosed(uv_handle_t* handle) {
  auto* h = static_cast<Handshake*>(handle->data);
  if (--h->open_handles == 0) Finish(h);
}

// An incoming handshake stops being a candidate for eviction (its claim verified, or it
// ends).
void StopWaiting(Handshake* h) {
  if (!h->waiting_claim) return;
  Transport* t = h->t;
  h->waiting_claim = false;
  t->waiting.erase(h->ticket);
  auto it = t->waiting_by_source.find(h->source);
  if (it != t->waiting_by_source.end() && --it->second == 0) t->waiting_by_source.erase(it);
}

// An incoming handshake stops counting against max_pending_handshakes (it ends, or its
// stream goes to C-Raft).
void Release(Handshake* h) {
  StopWaiting(h);
  if (h->live) {
    h->live = false;
    --h->t->incoming_live;
  }
}

// Closes the socket and timer of a handshake that will not complete; the connect callback
// (outgoing) runs once both are closed.
void CloseHandshake(Handshake* h, int status) {
  if (h->failed || h->handed_over) return;
  Release(h);
  h->failed = true;
  h->status = status;
  h->open_handles = 2;
  uv_close(reinterpret_cast<uv_handle_t*>(h->tcp), OnHandleClosed);
  uv_close(reinterpret_cast<uv_handle_t*>(&h->timer), OnHandleClosed);
}

// Ends a handshake that failed (counted and logged unless cancelled).
void Fail(Handshake* h, int status, const std::string& why) {
  if (h->failed || h->handed_over) return;
  if (status != RAFT_CANCELED) {
    ++h->t->stats.rejected;
    LogFailure(h->t, std::string(h->incoming ? "refused incoming connection from "
                                             : "could not authenticate to ") +
                         h->peer + ": " + why);
  }
  CloseHandshake(h, status);
}

// Closes an incoming handshake still waiting for its claim to make room for a newer
// connection (see max_pending_handshakes).
void Evict(Handshake* h, const char* bound) {
  Transport* t = h->t;
  ++t->stats.evicted;
  LogFailure(t, std::string("closed ") + h->peer +
                    ", which had not sent its claim, for a newer "
                    "connection (" +
                    bound + " reached)");
  CloseHandshake(h, RAFT_NOCONNECTION);
}

void OnTimeout(uv_timer_t* timer) {
  auto* h = static_cast<Handshake*>(timer->data);
  if (h->waiting_claim) {
    ++h->t->stats.claim_timeouts;
    Fail(h, RAFT_NOCONNECTION, "no claim within the claim timeout");
    return;
  }
  Fail(h, RAFT_NOCONNECTION, "handshake timed out");
}

void OnTimerClosedAfterHandover(uv_handle_t* handle) {
  auto* h = static_cast<Handshake*>(handle->data);
  Transport* t = h->t;
  t->handshakes.erase(h);
  delete h;
  MaybeFireClose(t);
}

// Gives the authenticated stream to C-Raft. The Handshake lives on until its timer is
// closed, but never touches the stream again.
void HandOver(Handshake* h) {
  Transport* t = h->t;
  if (t->closing) {
    Fail(h, RAFT_CANCELED, "transport closing");
    return;
  }
  Release(h);
  uv_read_stop(reinterpret_cast<uv_stream_t*>(h->tcp));
  uv_timer_stop(&h->timer);
  h->handed_over = true;
  h->tcp->data = nullptr;
  uv_close(reinterpret_cast<uv_handle_t*>(&h->timer), OnTimerClosedAfterHandover);
  auto* stream = reinterpret_cast<struct uv_stream_s*>(h->tcp);
  if (h->incoming) {
    ++t->stats.accepted;
    t->accept_cb(t->outer, h->claimed_id, h->claimed_address.c_str(), stream);
  } else {
    ++t->stats.connected;
    h->req->cb(h->req, stream, 0);
  }
}

void OnWritten(uv_write_t* req, int status) {
  auto* h = static_cast<Handshake*>(req->data);
  h->writing = false;
  if (h->failed) return;
  if (status != 0) {
    Fail(h, RAFT_NOCONNECTION, std::string("write failed: ") + uv_strerror(status));
    return;
  }
  if (h->handover_after_write) HandOver(h);
}

void Write(Handshake* h, std::string data) {
  h->wbuf = std::move(data);
  uv_buf_t buf = uv_buf_init(h->wbuf.data(), static_cast<unsigned>(h->wbuf.size()));
  h->write_req.data = h;
  int rv = uv_write(&h->write_req, reinterpret_cast<uv_stream_t*>(h->tcp), &buf, 1, OnWritten);
  if (rv != 0) {
    Fail(h, RAFT_NOCONNECTION, std::string("write failed: ") + uv_strerror(rv));
    return;
  }
  h->writing = true;
}

void OnAlloc(uv_handle_t* handle, size_t, uv_buf_t* buf) {
  auto* h = static_cast<Handshake*>(handle->data);
  // Exactly what the current step still needs: never a byte of what follows, which
  // belongs to C-Raft.
  *buf = uv_buf_init(h->rbuf.data() + h->rgot, static_cast<unsigned>(h->rbuf.size() - h->rgot));
}

void OnRead(uv_stream_t* stream, ssize_t nread, const uv_buf_t*) {
  auto* h = static_cast<Handshake*>(stream->data);
  if (h->failed) return;
  if (nread == 0) return;
  if (nread < 0) {
    std::string why =
        nread == UV_EOF ? "peer closed the connection" : uv_strerror(static_cast<int>(nread));
    // The acceptor closes without a word when our MAC does not verify.
    if (h->claim_sent) why += " after our claim (does it have another cluster secret?)";
    Fail(h, RAFT_NOCONNECTION, why);
    return;
  }
  h->rgot += static_cast<size_t>(nread);
  if (h->rgot < h->rbuf.size()) return;
  uv_read_stop(stream);
  auto next = h->on_read;
  h->on_read = nullptr;
  next(h);
}

void ReadExactly(Handshake* h, size_t n, void (*next)(Handshake*)) {
  h->rbuf.assign(n, '\0');
  h->rgot = 0;
  h->on_read = next;
  int rv = uv_read_start(reinterpret_cast<uv_stream_t*>(h->tcp), OnAlloc, OnRead);
  if (rv != 0) Fail(h, RAFT_NOCONNECTION, std::string("read failed: ") + uv_strerror(rv));
}

std::string ClaimMacInput(const Handshake& h) {
  std::string d = Bytes(h.nonce_a, kNonceBytes) + Bytes(h.nonce_c, kNonceBytes);
  PutU64(&d, h.claimed_id);
  PutU64(&d, h.claimed_address.size());
  d += h.claimed_address;
  return d;
}

std::string ProofMacInput(const Handshake& h, raft_id acceptor_id) {
  std::string d = Bytes(h.nonce_a, kNonceBytes) + Bytes(h.nonce_c, kNonceBytes);
  PutU64(&d, h.claimed_id);
  PutU64(&d, acceptor_id);
  return d;
}

// `tcp`: an accepted connection (incoming), or nullptr to create a handle (outgoing).
Handshake* NewHandshake(Transport* t, bool incoming, uv_tcp_t* tcp) {
  auto* h = new Handshake();
  h->t = t;
  h->incoming = incoming;
  h->tcp = tcp;
  if (h->tcp == nullptr) {
    h->tcp = static_cast<uv_tcp_t*>(raft_malloc(sizeof(uv_tcp_t)));
    if (h->tcp == nullptr) {
      delete h;
      return nullptr;
    }
    uv_tcp_init(t->loop, h->tcp);
  }
  h->tcp->data = h;
  uv_timer_init(t->loop, &h->timer);
  h->timer.data = h;
  h->connect_req.data = h;
  t->handshakes.insert(h);
  if (incoming) {
    h->live = true;
    ++t->incoming_live;
  }
  return h;
}

// (Re)starts the handshake's deadline `d` from now.
void StartTimer(Handshake* h, std::chrono::milliseconds d) {
  uv_timer_start(&h->timer, OnTimeout, static_cast<uint64_t>(std::max<int64_t>(1, d.count())), 0);
}

// ---- acceptor ----

void OnClaimRest(Handshake* h) {
  Transport* t = h->t;
  const size_t address_len = h->rbuf.size() - kMacBytes;
  h->claimed_address = h->rbuf.substr(0, address_len);
  const std::string mac = h->rbuf.substr(address_len);
  unsigned char expected[kMacBytes];
  if (!Mac(t->options.secret, kConnectorLabel, ClaimMacInput(*h), expected)) {
    Fail(h, RAFT_NOCONNECTION, "HMAC failed");
    return;
  }
  if (CRYPTO_memcmp(expected, mac.data(), kMacBytes) != 0) {
    Fail(h, RAFT_NOCONNECTION, "wrong cluster secret (MAC mismatch)");
    return;
  }
  if (h->claimed_address.find('\0') != std::string::npos || h->claimed_id == 0) {
    Fail(h, RAFT_NOCONNECTION, "malformed identity");
    return;
  }
  // A member: no longer a candidate for eviction; what is left is our proof's write.
  StopWaiting(h);
  StartTimer(h, t->options.handshake_timeout);
  unsigned char proof[kMacBytes];
  if (!Mac(t->options.secret, kAcceptorLabel, ProofMacInput(*h, t->id), proof)) {
    Fail(h, RAFT_NOCONNECTION, "HMAC failed");
    return;
  }
  std::string out;
  PutU64(&out, t->id);
  out += Bytes(proof, kMacBytes);
  h->handover_after_write = true;
  Write(h, std::move(out));
}

void OnClaimHead(Handshake* h) {
  std::memcpy(h->nonce_c, h->rbuf.data(), kNonceBytes);
  h->claimed_id = GetU64(h->rbuf.data() + kNonceBytes);
  const uint64_t address_len = GetU64(h->rbuf.data() + kNonceBytes + 8);
  if (address_len == 0 || address_len > kMaxAddressBytes) {
    Fail(h, RAFT_NOCONNECTION,
         "malformed handshake (address length " + std::to_string(address_len) + ")");
    return;
  }
  ReadExactly(h, static_cast<size_t>(address_len) + kMacBytes, OnClaimRest);
}

void OnConnection(uv_stream_t* server, int status) {
  Transport* t = static_cast<Transport*>(server->data);
  if (status != 0 || t->closing) return;
  auto* tcp = static_cast<uv_tcp_t*>(raft_malloc(sizeof(uv_tcp_t)));
  if (tcp == nullptr) return;
  uv_tcp_init(t->loop, tcp);
  if (uv_accept(server, reinterpret_cast<uv_stream_t*>(tcp)) != 0) {
    uv_close(reinterpret_cast<uv_handle_t*>(tcp), [](uv_handle_t* hd) { raft_free(hd); });
    return;
  }
  const uint32_t source = SourceOf(tcp);
  // Make room by closing the oldest connection that has not sent its claim rather than
  // refusing this one: strangers that hold their connections open cannot keep a member
  // out (see the file comment).
  if (t->options.max_pending_per_source > 0) {
    auto count = t->waiting_by_source.find(source);
    if (count != t->waiting_by_source.end() && count->second >= t->options.max_pending_per_source) {
      for (const auto& [ticket, w] : t->waiting) {
        if (w->source == source) {
          Evict(w, "max_pending_per_source");
          break;
        }
      }
    }
  }
  if (t->incoming_live >= t->options.max_pending_handshakes) {
    if (t->waiting.empty()) {
      ++t->stats.refused_busy;
      LogFailure(t, "too many connections handshaking (" +
                        std::to_string(t->options.max_pending_handshakes) +
                        ", all past their claim); refused " + RemoteOf(tcp));
      uv_close(reinterpret_cast<uv_handle_t*>(tcp), [](uv_handle_t* hd) { raft_free(hd); });
      return;
    }
    Evict(t->waiting.begin()->second, "max_pending_handshakes");
  }
  Handshake* h = NewHandshake(t, /*incoming=*/true, tcp);
  h->peer = RemoteOf(tcp);
  h->source = source;
  h->ticket = t->next_ticket++;
  h->waiting_claim = true;
  t->waiting.emplace(h->ticket, h);
  ++t->waiting_by_source[source];
  StartTimer(h, std::min(t->options.claim_timeout, t->options.handshake_timeout));
  if (RAND_bytes(h->nonce_a, kNonceBytes) != 1) {
    Fail(h, RAFT_NOCONNECTION, "no randomness for a nonce");
    return;
  }
  std::string hello(kMagic, sizeof kMagic);
  hello += Bytes(h->nonce_a, kNonceBytes);
  Write(h, std::move(hello));
  if (!h->failed) ReadExactly(h, kClaimHeadBytes, OnClaimHead);
}

// ---- connector ----

void OnProof(Handshake* h) {
  Transport* t = h->t;
  const raft_id acceptor_id = GetU64(h->rbuf.data());
  if (h->peer_id != 0 && acceptor_id != h->peer_id) {
    Fail(h, RAFT_NOCONNECTION,
         "server there is node " + std::to_string(acceptor_id) + ", expected node " +
             std::to_string(h->peer_id));
    return;
  }
  unsigned char expected[kMacBytes];
  if (!Mac(t->options.secret, kAcceptorLabel, ProofMacInput(*h, acceptor_id), expected) ||
      CRYPTO_memcmp(expected, h->rbuf.data() + 8, kMacBytes) != 0) {
    Fail(h, RAFT_NOCONNECTION, "wrong cluster secret (MAC mismatch)");
    return;
  }
  if (h->writing) {
    h->handover_after_write = true;
  } else {
    HandOver(h);
  }
}

void OnHello(Handshake* h) {
  Transport* t = h->t;
  if (std::memcmp(h->rbuf.data(), kMagic, sizeof kMagic) != 0) {
    Fail(h, RAFT_NOCONNECTION, "not an authenticating traintl raft transport");
    return;
  }
  std::memcpy(h->nonce_a, h->rbuf.data() + sizeof kMagic, kNonceBytes);
  if (RAND_bytes(h->nonce_c, kNonceBytes) != 1) {
    Fail(h, RAFT_NOCONNECTION, "no randomness for a nonce");
    return;
  }
  h->claimed_id = t->id;
  h->claimed_address = t->address;
  unsigned char mac[kMacBytes];
  if (!Mac(t->options.secret, kConnectorLabel, ClaimMacInput(*h), mac)) {
    Fail(h, RAFT_NOCONNECTION, "HMAC failed");
    return;
  }
  std::string out = Bytes(h->nonce_c, kNonceBytes);
  PutU64(&out, t->id);
  PutU64(&out, t->address.size());
  out += t->address;
  out += Bytes(mac, kMacBytes);
  Write(h, std::move(out));
  h->claim_sent = true;
  if (!h->failed) ReadExactly(h, kProofBytes, OnProof);
}

void OnConnected(uv_connect_t* req, int status) {
  auto* h = static_cast<Handshake*>(req->data);
  if (h->failed) return;
  if (status != 0) {
    // An unreachable peer is routine (it is down or starting): not an auth failure.
    h->failed = true;
    h->status = RAFT_NOCONNECTION;
    h->open_handles = 2;
    uv_close(reinterpret_cast<uv_handle_t*>(h->tcp), OnHandleClosed);
    uv_close(reinterpret_cast<uv_handle_t*>(&h->timer), OnHandleClosed);
    return;
  }
  ReadExactly(h, kHelloBytes, OnHello);
}

// ---- raft_uv_transport interface ----

int TransportInit(struct raft_uv_transport* transport, raft_id id, const char* address) {
  Transport* t = Get(transport);
  t->id = id;
  t->address = address;
  if (t->address.empty() || t->address.size() > kMaxAddressBytes) {
    SetError(transport, "invalid address");
    return RAFT_INVALID;
  }
  return 0;
}

int TransportListen(struct raft_uv_transport* transport, raft_uv_accept_cb cb) {
  Transport* t = Get(transport);
  t->accept_cb = cb;
  struct sockaddr_in addr {};
  if (!ParseAddress(t->address, &addr)) {
    SetError(transport, "cannot resolve " + t->address);
    return RAFT_IOERR;
  }
  uv_tcp_init(t->loop, &t->listener);
  t->listener.data = t;
  t->listener_open = true;
  int rv = uv_tcp_bind(&t->listener, reinterpret_cast<const struct sockaddr*>(&addr), 0);
  if (rv == 0)
    rv = uv_listen(reinterpret_cast<uv_stream_t*>(&t->listener), kListenBacklog, OnConnection);
  if (rv != 0) {
    SetError(transport, "listen on " + t->address + ": " + uv_strerror(rv));
    return RAFT_IOERR;  // the listener is closed by TransportClose
  }
  return 0;
}

int TransportConnect(struct raft_uv_transport* transport, struct raft_uv_connect* req, raft_id id,
                     const char* address, raft_uv_connect_cb cb) {
  Transport* t = Get(transport);
  if (t->closing) return RAFT_CANCELED;
  struct sockaddr_in addr {};
  if (!ParseAddress(address, &addr)) return RAFT_NOCONNECTION;
  Handshake* h = NewHandshake(t, /*incoming=*/false, nullptr);
  if (h == nullptr) return RAFT_NOMEM;
  h->req = req;
  h->cb = cb;
  req->cb = cb;
  h->peer_id = id;
  h->peer = address;
  int rv = uv_tcp_connect(&h->connect_req, h->tcp, reinterpret_cast<const struct sockaddr*>(&addr),
                          OnConnected);
  if (rv != 0) {
    // No callback may run for a request that returned an error: close quietly.
    h->handed_over = true;  // keeps Finish from calling req->cb; the handle is ours
    t->handshakes.erase(h);
    uv_close(reinterpret_cast<uv_handle_t*>(h->tcp), [](uv_handle_t* hd) { raft_free(hd); });
    uv_close(reinterpret_cast<uv_handle_t*>(&h->timer),
             [](uv_handle_t* hd) { delete static_cast<Handshake*>(hd->data); });
    return RAFT_NOCONNECTION;
  }
  StartTimer(h, t->options.handshake_timeout);
  return 0;
}

void TransportClose(struct raft_uv_transport* transport, raft_uv_transport_close_cb cb) {
  Transport* t = Get(transport);
  t->closing = true;
  t->close_cb = cb;
  // Copy: Fail may finish (and erase) synchronously in a future version of this code.
  std::set<Handshake*> pending = t->handshakes;
  for (Handshake* h : pending) Fail(h, RAFT_CANCELED, "transport closing");
  if (t->listener_open) {
    uv_close(reinterpret_cast<uv_handle_t*>(&t->listener), [](uv_handle_t* hd) {
      Transport* tr = static_cast<Transport*>(hd->data);
      tr->listener_open = false;
      MaybeFireClose(tr);
    });
  } else {
    MaybeFireClose(t);
  }
}

}  // namespace

int AuthTransportInit(struct raft_uv_transport* t, uv_loop_t* loop,
                      const AuthTransportOptions& options) {
  std::memset(t->errmsg, 0, sizeof t->errmsg);
  if (options.secret.size() < kMinClusterSecretBytes) {
    SetError(t, "cluster secret shorter than " + std::to_string(kMinClusterSecretBytes) + " bytes");
    return RAFT_INVALID;
  }
  auto* impl = new (std::nothrow) Transport();
  if (impl == nullptr) return RAFT_NOMEM;
  impl->outer = t;
  impl->loop = loop;
  impl->options = options;
  t->impl = impl;
  t->init = TransportInit;
  t->listen = TransportListen;
  t->connect = TransportConnect;
  t->close = TransportClose;
  return 0;
}

void AuthTransportFree(struct raft_uv_transport* t) {
  delete Get(t);
  t->impl = nullptr;
}

AuthTransportStats GetAuthTransportStats(const struct raft_uv_transport* t) {
  return static_cast<const Transport*>(t->impl)->stats;
}

}  // namespace traintl
