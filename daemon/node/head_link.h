// HeadLink: the agent's side of a node's connection to the head of its cluster
// (DESIGN §5); every daemon of a multi-node cluster runs one.
//
// It finds the head (probing /healthz of the --join addresses, of the voters the head
// lists - remembered across restarts in the peers file - and, on a voter, of the Raft
// leader), asks it to add this node as a Raft voter (--server --join), heartbeats the
// node's resources and running attempts, sends its workers' events to the head (acking
// reports once the head took them), stops the workers the head says it does not run, and
// - when no head answers for most of the loss bound (HeadLease) - stops every worker here,
// so that a partitioned node never runs an attempt the head already restarted elsewhere.
// Voters also copy every active job's library from the head, so that it survives a head
// failover.
//
// Thread-safety: Start/Stop, SetHead and the Enqueue* methods run on the io_context
// thread; the heartbeat and event-sender threads only touch the io-side objects (Agent,
// the voter-addresses callback) by posting to the io_context. is_head, head_address,
// FindHead and ForgetHead are thread-safe (HeadForwarder calls them from its call
// threads).
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/thread_annotations.h"
#include "daemon/http/peer_calls.h"
#include "daemon/node/agent.h"
#include "daemon/node/blob_store.h"
#include "daemon/node/event_outbox.h"
#include "daemon/node/head_lease.h"
#include "daemon/node/worker_pool.h"
#include "daemon/state/state_store.h"
#include "proto/node_status.h"
#include "proto/worker_events.h"

namespace traintl {

class RaftNode;

struct HeadLinkOptions {
  // --server: this node is a Raft voter (it joins as one when `join` is set, finds the
  // head through its Raft leader, copies the active libraries). Default false.
  bool server = false;
  // --join: API addresses of existing daemons. Default none (the first voter).
  std::vector<std::string> join;
  // This node as heartbeats describe it ("running" is filled in by each heartbeat).
  // Default empty.
  NodeStatus self;
  // Heartbeat period, loss bound and fence fraction. Defaults: see HeadLeaseOptions.
  HeadLeaseOptions lease;
  // Where the voters' API addresses are remembered across restarts (a restarted first
  // voter has no --join to find the head with). Default "": not kept.
  std::string peers_file;
};

class HeadLink {
 public:
  // The voters' API addresses as the head's node registry knows them; called on the
  // io_context thread while this node is the head.
  using VoterAddresses = std::function<std::vector<std::string>()>;

  // `raft` is null on an agent-only node. Every pointer must outlive this.
  HeadLink(boost::asio::io_context& io, HeadLinkOptions options, Agent* agent, BlobStore* blobs,
           StateStore* store, RaftNode* raft, const PeerCalls* peers,
           VoterAddresses voter_addresses, const Clock* clock = SystemClock::Get());
  ~HeadLink();
  HeadLink(const HeadLink&) = delete;
  HeadLink& operator=(const HeadLink&) = delete;

  void Start();  // reads the peers file, starts the heartbeat and sender threads
  void Stop();   // joins them; idempotent

  // io thread: this node became (true) or stopped being (false) the head.
  void SetHead(bool head);
  bool is_head() const { return is_head_.load(); }
  // The head's API address as far as this node knows; "" when unknown.
  std::string head_address() const;

  // Blocking: the known head, or else the one discovery finds now (then remembered);
  // "" when none answers.
  std::string FindHead();
  // Forgets `head` unless another one was found meanwhile (it did not answer).
  void ForgetHead(const std::string& head);

  // io thread: worker events of this node while another node is the head.
  void EnqueueHello(const std::string& job_id, int attempt, int rank);
  // A report is acked to its worker once the head has taken it, unless it is held: then
  // the head acks it (AckHeld, from POST /v1/internal/ack) after deciding on it.
  void EnqueueReport(const std::string& job_id, int attempt, int rank,
                     const events::Report& report);
  void EnqueueExit(const WorkerExit& e, const std::string& log_tail);
  void EnqueueProgress(const std::string& job_id, int attempt, int rank,
                       const events::Progress& progress);

 private:
  void Enqueue(nlohmann::json event);
  void HeartbeatMain();
  void SenderMain();
  // Hands the acks of delivered reports to the agent, on io_.
  void PostAcks(const std::vector<EventOutbox::Ack>& acks);
  // One heartbeat round of a node that is not the head; `joined` as in HeartbeatMain.
  void HeartbeatAsAgent(bool* joined);
  void RememberVotersAsHead();
  std::vector<std::string> Candidates() const;
  std::string Discover(const std::vector<std::string>& candidates);
  bool Join(const std::string& head);
  bool HeartbeatOnce(const std::string& head);
  void SyncBlobs(const std::string& head);
  // The attempts with live workers here, asked of the io thread. A busy io thread
  // (launching workers) gets kLiveAttemptsWait; then the last known list goes out, so that
  // the heartbeat is not late: a late one made the head call a busy node LOST.
  std::vector<std::pair<std::string, int>> LiveAttemptsFromIo();
  static constexpr std::chrono::milliseconds kLiveAttemptsWait{200};
  void SetHeadAddress(const std::string& address);
  void SetKnown(std::vector<std::string> voters);

  // Constant after construction.
  boost::asio::io_context& io_;
  const HeadLinkOptions options_;
  Agent* const agent_;
  BlobStore* const blobs_;
  StateStore* const store_;
  RaftNode* const raft_;
  const PeerCalls* const peers_;
  const VoterAddresses voter_addresses_;
  const Clock* const clock_;

  std::atomic<bool> is_head_{false};
  std::atomic<bool> stopping_{false};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string head_address_ TRAINTL_GUARDED_BY(mu_);
  std::vector<std::string> known_ TRAINTL_GUARDED_BY(mu_);  // voter API addresses
  EventOutbox events_ TRAINTL_GUARDED_BY(mu_);
  HeadLease lease_ TRAINTL_GUARDED_BY(mu_);

  // The last list LiveAttemptsFromIo got; touched by the heartbeat thread only.
  std::vector<std::pair<std::string, int>> last_running_;

  std::vector<std::thread> threads_;  // touched by Start and Stop only
};

}  // namespace traintl
