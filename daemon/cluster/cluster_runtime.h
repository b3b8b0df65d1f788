// ClusterRuntime: what makes a daemon part of a multi-node cluster (DESIGN §5).
//
// On every node it runs the agent's side: it finds the head (probing /healthz of the
// --join addresses and of the voters the head lists), asks it to add this node as a Raft
// voter (--server --join), heartbeats the node's resources and running attempts, sends its
// workers' events to the head (acking reports once the head took them), stops the workers
// the head says it does not run, and - when no head answers for most of the loss bound -
// stops every worker here, so that a partitioned node never runs an attempt the head
// already restarted elsewhere. Voters also copy every active job's library from the head,
// so that it survives a head failover.
//
// On the head it serves the internal endpoints (heartbeat, join, events) and launches and
// stops ranks on other nodes (RemoteNodes over HTTP). On every daemon it serves the
// internal launch/stop endpoints and GET /v1/blobs/{sha}, and forwards API requests that
// it must not answer itself to the head.
//
// Every daemon-to-daemon request but the /healthz probes carries the cluster's bearer
// token, so the peer's HTTP server treats it as authenticated traffic that anonymous
// connections cannot crowd out (http::ServerOptions); one the peer refuses unread because
// all its connections are busy is sent again within the call's timeout.
//
// Thread-safety: Start/Stop and the io-side methods run on the io_context thread; the
// heartbeat, event-sender and HTTP worker threads only touch the io-side objects (Agent,
// JobManager, Responders) by posting to the io_context. Forward and EnqueueEvent are
// thread-safe.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/head/job_manager.h"
#include "daemon/head/node_registry.h"
#include "daemon/head/remote_nodes.h"
#include "daemon/http/client.h"
#include "daemon/http/request.h"
#include "daemon/http/responder.h"
#include "daemon/http/router.h"
#include "daemon/node/agent.h"
#include "daemon/node/blob_store.h"
#include "daemon/node/worker_pool.h"
#include "daemon/state/state_store.h"

namespace traintl {

class RaftNode;

struct ClusterOptions {
  bool server = false;            // --server: a Raft voter
  std::vector<std::string> join;  // --join: API addresses of existing daemons
  std::string token;              // the cluster's bearer token (shared by all daemons)
  NodeStatus self;                // this node as heartbeats describe it (no "running")
  // Heartbeat period. Default 500 ms.
  std::chrono::milliseconds heartbeat_interval{500};
  // The head marks a node LOST after this much silence; the node stops its own workers
  // after `fence_fraction` of it without a head. Default 4 s and 0.6.
  std::chrono::milliseconds loss_timeout{4000};
  double fence_fraction = 0.6;
  size_t http_threads = 8;  // threads for blocking daemon-to-daemon calls
  // Where the voters' API addresses are remembered across restarts (a restarted first
  // voter has no --join to find the head with). "" = not kept.
  std::string peers_file;
  // Daemon-to-daemon calls use HTTPS, verified with `client_tls`. Default false.
  bool tls = false;
  http::ClientTls client_tls;
};

class ClusterRuntime : public RemoteNodes {
 public:
  ClusterRuntime(boost::asio::io_context& io, ClusterOptions options, JobManager* jobs,
                 Agent* agent, BlobStore* blobs, StateStore* store, RaftNode* raft);
  ~ClusterRuntime() override;

  void Start();  // starts the threads
  void Stop();   // joins them; idempotent

  // io thread: this node became (true) or stopped being (false) the head.
  void SetHead(bool head);
  bool is_head() const { return is_head_.load(); }
  std::string head_address() const;

  // io thread: the internal endpoints and GET /v1/blobs/{sha}.
  void RegisterRoutes(http::Router& router);

  // io thread: forwards a request this node must not answer itself to the head and
  // returns true; false when the caller should serve it locally (this node is the head,
  // or it is a voter and the request is a read with no head in reach).
  bool Forward(const http::Request& req, const std::shared_ptr<http::Responder>& res,
               const http::Handler& local);

  // io thread: worker events of this node while another node is the head.
  void EnqueueHello(const std::string& job_id, int attempt, int rank);
  void EnqueueReport(const std::string& job_id, int attempt, int rank, int seq,
                     const nlohmann::json& metrics, const std::string& checkpoint);
  void EnqueueExit(const WorkerExit& e, const std::string& log_tail);

  // RemoteNodes (head side).
  void Launch(const std::string& api_address, nlohmann::json plan,
              std::function<void(Result<int>)> done) override;
  void Stop(const std::string& api_address, const std::string& job_id, int attempt) override;

 private:
  void RunOnHttpThread(std::function<void()> fn);
  void HttpThreadMain();
  void HeartbeatMain();
  void SenderMain();
  std::vector<std::string> Candidates() const;
  std::string Discover(const std::vector<std::string>& candidates);
  bool HeartbeatOnce(const std::string& head);
  void SyncBlobs(const std::string& head);
  std::vector<std::pair<std::string, int>> LiveAttemptsFromIo();
  void SetHeadAddress(const std::string& address);
  void SetKnown(std::vector<std::string> voters);
  std::map<std::string, std::string> AuthHeaders() const;
  // The TLS settings of daemon-to-daemon calls; null for plain HTTP. Lives as long as this.
  const http::ClientTls* Tls() const { return options_.tls ? &options_.client_tls : nullptr; }

  boost::asio::io_context& io_;
  const ClusterOptions options_;
  JobManager* const jobs_;
  Agent* const agent_;
  BlobStore* const blobs_;
  StateStore* const store_;
  RaftNode* const raft_;

  std::atomic<bool> is_head_{false};
  std::atomic<bool> stopping_{false};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string head_address_;                     // guarded by mu_
  std::vector<std::string> known_;               // voter API addresses, guarded by mu_
  std::deque<nlohmann::json> events_;            // guarded by mu_
  std::deque<std::function<void()>> http_work_;  // guarded by mu_
  bool fenced_ = false;                          // guarded by mu_

  std::vector<std::thread> threads_;
};

// Raft id of a joining voter, derived from its node id (never 1, the bootstrap voter's).
uint64_t RaftIdForNode(const std::string& node_id);

}  // namespace traintl
