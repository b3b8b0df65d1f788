// RaftNode: one server of a Raft cluster (Debian's C-Raft 0.15 over its libuv TCP
// transport) that keeps a durable replicated log in a data directory and drives a
// StateMachine with it. A single daemon is a one-voter cluster; the same code runs a
// 3- or 5-voter cluster.
//
// Thread-safety: RaftNode owns one "loop thread" that makes every libraft and libuv call
// and runs every StateMachine method and every callback given to RaftNode (done
// callbacks, the leadership callback, functions passed to Post/Call). Public methods are
// thread-safe unless they say otherwise (SetLeadershipCallback belongs before Start; the
// destructor must not run on the loop thread). Callbacks must not block (they stall
// heartbeats and replication) and must not throw; they may call any public method
// (Call and Configuration then run inline), but must not destroy the RaftNode, and
// Stop() from a callback only requests the shutdown (see Stop).
//
// With a cluster secret (RaftOptions::cluster_secret) every Raft connection is mutually
// authenticated before C-Raft sees it (auth_transport.h): a process without the secret
// cannot join, vote or append entries. Raft traffic is not encrypted.
//
// Not provided by C-Raft, and so not here: forwarding of proposals from followers to the
// leader (callers get the leader's address and forward themselves), read leases.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "common/result.h"
#include "common/status.h"
#include "daemon/consensus/disk_guard.h"
#include "daemon/consensus/state_machine.h"

namespace traintl {

// A server of the initial configuration (RaftOptions::bootstrap_peers).
struct RaftPeer {
  uint64_t id = 0;
  std::string address;  // "host:port" the server listens on for Raft traffic
};

// A server of the current Raft configuration.
struct RaftMember {
  enum class Role {
    kVoter,    // replicates the log and votes
    kStandby,  // replicates the log, does not vote
    kSpare,    // neither (just added, or demoted)
  };
  uint64_t id = 0;
  std::string address;
  Role role = Role::kVoter;
};
const char* RaftRoleName(RaftMember::Role role);

// Who leads the cluster as far as this node knows. id 0: no known leader.
struct LeaderInfo {
  uint64_t id = 0;
  std::string address;
};

struct RaftOptions {
  // This server's Raft id: unique in the cluster, never 0. Default 1.
  uint64_t node_id = 1;

  // Directory of the Raft log, metadata and snapshots; created (with parents) if missing.
  // RaftNode also keeps LOCK (an flock(2) held while the node runs, so that two daemons
  // cannot share the directory) and, for port 0, raft_address in it. Required.
  std::string data_dir;

  // "ipv4:port" this server listens on and advertises in the Raft configuration. With
  // port 0 a free port of that host is chosen on the first start and persisted in
  // <data_dir>/raft_address, so that restarts reuse it (the address is part of the
  // replicated configuration); then the host must be an IPv4 literal. Default
  // "127.0.0.1:7451".
  std::string raft_address = "127.0.0.1:7451";

  // Voters of the initial configuration, used only when data_dir has no Raft state yet
  // and join is false. Empty (the default): a one-voter cluster of just this node.
  // Otherwise it must list this node (node_id); this node's entry may have an empty
  // address or the same string as raft_address, and is then given this node's resolved
  // address. Every voter of a new cluster must be started with the same list.
  std::vector<RaftPeer> bootstrap_peers;

  // true: never bootstrap; start with no configuration and wait until the leader adds
  // this node (AddVoter). bootstrap_peers is ignored. Default false.
  bool join = false;

  // Election timeout (a follower that hears no leader for a random time between this and
  // twice this starts an election). Default 300 ms (C-Raft's own default is 1000).
  unsigned election_timeout_ms = 300;

  // Interval of the leader's heartbeats; must be below election_timeout_ms. Default 50 ms.
  unsigned heartbeat_timeout_ms = 50;

  // Pre-vote (Raft thesis 9.6): a candidate first checks that it could win, so that a
  // node returning from a partition does not depose a healthy leader. Default true.
  bool pre_vote = true;

  // Take a snapshot (StateMachine::Snapshot) once this many entries were applied since
  // the last one. Default 1024 (C-Raft's default).
  unsigned snapshot_threshold = 1024;

  // Entries kept in the log behind a snapshot, so that a slightly lagging follower gets
  // entries rather than the whole snapshot. Default 128 (C-Raft's default).
  unsigned snapshot_trailing = 128;

  // How long the leader waits for a follower to take a snapshot it sent before sending it
  // again. A follower that was down when a send began is not sent one before this has
  // passed. Default 30000 ms (C-Raft's default: large snapshots on slow links).
  unsigned install_snapshot_timeout_ms = 30000;

  // Delay before reconnecting to an unreachable peer. Default 50 ms (C-Raft's default is
  // 1000 ms, which slows fail-over).
  unsigned connect_retry_delay_ms = 50;

  // Shared secret of the cluster (at least 16 bytes; every node must have the same one).
  // Every Raft connection, in and out, runs an HMAC challenge-response keyed with it before
  // any Raft message flows, so a node without it cannot join, vote or inject entries.
  // Empty: C-Raft's own TCP transport, which authenticates nothing (a warning is logged);
  // allowed only on a loopback raft_address (Start refuses others). Default "".
  std::string cluster_secret;

  // Time a Raft connection may take to authenticate; an unauthenticated peer cannot hold a
  // connection longer. Default 5000 ms.
  unsigned auth_handshake_timeout_ms = 5000;

  // Proposals are refused (ResourceExhausted "disk full: ...", see DiskGuard) while the
  // file system of data_dir has less than this free plus the entry's size: libraft 0.15
  // crashes on a failed append. 0 disables the check. Default 128 MiB.
  uint64_t min_free_bytes = uint64_t{128} << 20;
};

// Counters of the authenticated transport (all zero without a cluster secret).
struct RaftTransportStats {
  uint64_t accepted = 0;      // incoming connections authenticated and handed to Raft
  uint64_t connected = 0;     // outgoing connections authenticated and handed to Raft
  uint64_t rejected = 0;      // failed handshakes: wrong secret, malformed, timed out
  uint64_t refused_busy = 0;  // incoming connections refused: too many handshaking at once
};

class RaftNode {
 public:
  // Largest command Propose accepts. Big payloads belong in blobs, not in the log.
  static constexpr size_t kMaxCommandBytes = 16u << 20;

  using ProposeCallback = std::function<void(Result<std::string>)>;
  using StatusCallback = std::function<void(Status)>;
  using LeadershipCallback = std::function<void(bool is_leader)>;

  // `state_machine` is not owned and must outlive the node's Stop().
  RaftNode(RaftOptions options, StateMachine* state_machine);
  // Stop()s. Must not run on the loop thread.
  ~RaftNode();

  RaftNode(const RaftNode&) = delete;
  RaftNode& operator=(const RaftNode&) = delete;

  // Validates the options, locks data_dir, resolves the address, starts the loop thread
  // and returns once raft_start() succeeded (the state machine has been restored from the
  // latest snapshot, if any; later entries are applied as they are known to be
  // committed), or with the reason it failed (the thread is then gone and the lock
  // released). A RaftNode starts at most once; a restart uses a new RaftNode.
  Status Start();

  // Shuts down: refuses new work, reports leadership lost (callback), waits up to 5 s for
  // in-flight disk writes (C-Raft 0.15 crashes when closed under them; pending proposals
  // usually commit meanwhile), fails what is still pending (see Propose), closes Raft, its
  // I/O and transport, and the loop, and releases the lock. Idempotent; blocks until the
  // loop thread has exited. Called on the loop thread (from a callback), it only requests
  // the shutdown; a later Stop() or the destructor on another thread waits for it.
  void Stop();

  // Appends `command` to the replicated log. `done` is called exactly once: with the
  // StateMachine::Apply result after the entry is committed and applied on this node; or
  // with Unavailable "not leader; leader is <id> at <address>" ("... leader is unknown")
  // on a follower (C-Raft does not forward); Unavailable "leadership lost; outcome
  // unknown" when leadership was lost before the outcome was known (the command may still
  // be applied later, so retries must be idempotent); Unavailable "shutting down..." when
  // the node stops first. It runs on the loop thread, except when the node is not running
  // when Propose is called or the command is larger than kMaxCommandBytes: then it runs
  // inline, on the caller's thread. Any bytes may be proposed; Apply gets back exactly
  // the same string.
  void Propose(std::string command, ProposeCallback done);

  // Runs `fn` on the loop thread, after the work posted before it. Returns true when fn
  // was accepted (it then runs exactly once, even if the node stops meanwhile: Raft calls
  // made by fn then fail); false when the node is not running (never started, or Stop
  // begun), and fn is discarded without running.
  bool Post(std::function<void()> fn);

  // Runs `fn` on the loop thread and returns its value through a future: Unavailable when
  // the node is not running, Internal when fn throws. Called on the loop thread, fn runs
  // inline (a ready future), so that waiting on it cannot deadlock. fn must return a value
  // (use Post for void) other than a bare Status.
  template <class F>
  auto Call(F fn) -> std::future<Result<std::decay_t<std::invoke_result_t<F&>>>>;

  // True while this node is the leader and a barrier of its current term has been applied,
  // i.e. its state machine reflects every entry committed before this term. Updated by a
  // 5 ms poll of raft_state (C-Raft 0.15 has no state callback), so it can lag a lost
  // leadership by that much plus the election timeout; it is not a read lease.
  bool IsLeader() const;

  // The leader this node knows of (itself when it leads, even before the barrier).
  LeaderInfo Leader() const;

  // Progress of this node's log as of its last poll (every few ms), for /metrics.
  struct LogProgress {
    uint64_t term = 0;
    uint64_t commit_index = 0;   // highest entry known to be committed
    uint64_t applied_index = 0;  // highest entry applied to the state machine here
    uint64_t last_index = 0;     // highest entry in this node's log
  };
  LogProgress Progress() const;

  // Set before Start (ignored afterwards). Called on the loop thread with true when this
  // node becomes a ready leader (IsLeader() turned true) and with false when it stops
  // being one (including at Stop).
  void SetLeadershipCallback(LeadershipCallback callback);

  // Set before Start (ignored afterwards). Called once, on the loop thread, when this node
  // cannot go on and must stop so that a restart reloads its log from disk: a write of the
  // replicated log failed (C-Raft 0.15's uv backend writes nothing after one failure, yet
  // the node would keep running, even win elections, with entries only in memory), or
  // the state machine could not store a committed entry (StateMachine::Apply threw
  // StoreWriteError or bad_alloc: a full disk, an I/O error). From then on committed
  // entries are not applied, so this replica's state never skips one.
  void SetFatalCallback(StatusCallback callback);

  // Membership changes, leader only; done(Status) runs once on the loop thread (inline
  // when the node is not running or the arguments are invalid). Changes are serialized:
  // each starts when the previous one finished. AddVoter adds the server as a spare, then
  // promotes it to voter once it has caught up with the log (the server must be running
  // with join=true and the given address); OK if it already is a voter at that address.
  // A server that does not catch up (C-Raft gives up on an unresponsive one after its
  // catch-up round duration, 5 s) fails the call with Unavailable, and the spare this
  // call added is removed again.
  void AddVoter(uint64_t id, std::string address, StatusCallback done);
  // Removes a server from the configuration (NotFound when it is not a member). Removing
  // the leader itself makes it step down once the change is committed.
  void Remove(uint64_t id, StatusCallback done);
  // Hands leadership to voter `id` (0: the most up-to-date voter). OK once that server
  // leads; Unavailable when it did not take over within an election timeout.
  void TransferLeadership(uint64_t id, StatusCallback done);

  // The current configuration (including uncommitted changes), read on the loop thread.
  // Blocks; Unavailable when the node is not running.
  Result<std::vector<RaftMember>> Configuration();

  // The transport's counters, read on the loop thread. Blocks; Unavailable when the node
  // is not running.
  Result<RaftTransportStats> TransportStats();

  uint64_t id() const;
  // Free space of data_dir's file system, checked now, and whether it is below the
  // reserve (RaftOptions::min_free_bytes). Any thread.
  DiskSpace disk_space();
  // DiskGuard::CheckOther on data_dir's file system: for writes beside the log (blobs).
  Status CheckSpaceFor(uint64_t bytes, const std::string& what);
  // The address this node listens on; with port 0, the chosen one once Start() returned.
  std::string address() const;
  // True on the loop thread.
  bool InLoopThread() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

template <class F>
auto RaftNode::Call(F fn) -> std::future<Result<std::decay_t<std::invoke_result_t<F&>>>> {
  using R = std::decay_t<std::invoke_result_t<F&>>;
  static_assert(!std::is_void_v<R>, "RaftNode::Call needs a value; use Post for void functions");
  static_assert(!std::is_same_v<R, Status>, "RaftNode::Call cannot carry a bare Status");
  auto promise = std::make_shared<std::promise<Result<R>>>();
  auto future = promise->get_future();
  auto holder = std::make_shared<F>(std::move(fn));
  auto run = [promise, holder] {
    try {
      promise->set_value(Result<R>((*holder)()));
    } catch (const std::exception& e) {
      promise->set_value(Result<R>(Status::Internal(std::string("Call: ") + e.what())));
    } catch (...) {
      promise->set_value(Result<R>(Status::Internal("Call: unknown exception")));
    }
  };
  if (InLoopThread()) {
    run();
  } else if (!Post(run)) {
    promise->set_value(Result<R>(Status::Unavailable("raft node is not running")));
  }
  return future;
}

}  // namespace traintl
