// Daemon: one traintld process. It owns the component graph (state store, Raft node,
// worker pool and agent, job manager, the cluster parts - head link, forwarder, remote
// launcher, the threads their calls block on - HTTP server, systemd integration),
// the single "this node is the head" state, and the shutdown sequence. main.cc parses the
// options and runs it.
//
// Start-up order matters and lives here: systemd's variables are taken out of the
// environment before any worker can inherit them, the data dir is locked before anything
// in it is touched, the orphan reaper is forked before any thread exists.
//
// Shutdown (SIGTERM/SIGINT): the API stops accepting, a head hands its leadership over
// (at most 2 s), this node's workers get a stop request, SIGTERM and SIGKILL after the
// graces, and worker exits are no longer reported, so their attempts restart from their
// latest checkpoints instead of counting as failures. A second signal kills the workers
// at once.
//
// Thread-safety: Run() runs the io_context on the calling thread; every method below is
// called on it. Not copyable.
#pragma once

#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/lease_clock.h"
#include "common/result.h"
#include "daemon/daemon_config.h"
#include "daemon/node/fingerprint.h"
#include "daemon/node/worker_cgroups.h"
#include "daemon/node/worker_pool.h"
#include "daemon/state/fsm.h"
#include "daemon/state/state_store.h"

namespace traintl {

class Agent;
class BlobStore;
class BlockingCallPool;
class HeadForwarder;
class HeadLink;
class HttpRemoteNodes;
class JobManager;
class TuneController;
struct NodeStatus;
class PeerCalls;
class RaftCommandLog;
class RaftNode;
namespace http {
class Router;
class Server;
}  // namespace http
namespace systemd {
class Notifier;
class ServiceSignals;
class ServiceStatus;
class Watchdog;
}  // namespace systemd

class Daemon {
 public:
  // `argc`/`argv` are parsed again on SIGHUP (reload).
  Daemon(DaemonConfig cfg, int argc, char** argv);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Builds everything, serves until stopped, and returns the process's exit code.
  int Run();

 private:
  // Worker events go to the job manager while this node is the head, to the head over
  // HTTP otherwise, and nowhere while the daemon stops.
  class WorkerEvents;

  Status Prepare();           // data dir, token, lock, secrets, worker user, node id
  void StartProcessGuards();  // cgroups or subreaper, the orphan reaper, the lease clock
  Status Build();             // the components, the API, the routes
  // Multi-node: the head link, the remote launcher, the forwarder and what they share.
  void BuildCluster(NodeStatus self);
  // The one place where this node becomes or stops being the head.
  void OnLeadership(bool leader);
  void ReportStatus();
  void PollStatus();
  void InstallSignals();
  // `why`: what asked for it ("SIGTERM from pid 1 (systemd)").
  void BeginShutdown(const std::string& why);
  void StopWorkers();
  void WaitForWorkers(std::chrono::steady_clock::time_point deadline);
  void Finish();
  void Reload();

  // Constant after construction.
  const DaemonConfig cfg_;
  const int argc_;
  char** const argv_;

  // Set by Prepare and Build, then constant.
  std::unique_ptr<systemd::Notifier> notifier_;
  std::unique_ptr<systemd::ServiceStatus> service_status_;
  std::string token_;
  std::string cluster_secret_;
  std::string cluster_token_;  // what daemons send each other's kCluster routes
  std::string node_id_;
  std::optional<WorkerUser> worker_user_;
  int lock_fd_ = -1;
  WorkerCgroups cgroups_;
  OrphanReaper reaper_;
  LeaseClock lease_clock_;
  bool leases_ = false;
  NodeResources resources_;
  bool agent_only_ = false;  // --join without --server: no Raft node of its own
  std::string api_address_;
  std::unique_ptr<BlobStore> blobs_;
  StateStore store_;
  Fsm fsm_{&store_};
  std::unique_ptr<RaftNode> raft_;
  boost::asio::io_context io_{1};
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<TuneController> tune_;  // tuning experiments (head only)
  // Multi-node only (null on a single node): the link to the head, the launcher on other
  // nodes, the forwarder of API requests, and the calls between daemons they share. The
  // pool is declared last of them: its threads, which use the others, stop first.
  std::unique_ptr<PeerCalls> peers_;
  std::unique_ptr<HeadLink> head_link_;
  std::unique_ptr<HttpRemoteNodes> remote_nodes_;
  std::unique_ptr<HeadForwarder> forwarder_;
  std::unique_ptr<BlockingCallPool> calls_;
  // On every daemon: library uploads' hashing and writing, and blob reads
  // (ApiContext::blob_work). Stopped once the io loop ends, before what it uses goes.
  std::unique_ptr<BlockingCallPool> blob_work_;
  std::unique_ptr<WorkerEvents> events_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<Agent> agent_;
  std::unique_ptr<RaftCommandLog> command_log_;
  std::shared_ptr<http::Router> router_;
  std::unique_ptr<http::Server> server_;
  std::unique_ptr<systemd::Watchdog> watchdog_;
  std::unique_ptr<systemd::ServiceSignals> signals_;
  std::unique_ptr<boost::asio::steady_timer> status_timer_;
  std::unique_ptr<boost::asio::steady_timer> stop_timer_;

  // io thread.
  int exit_code_ = 0;  // what Run returns once the loop ends
  bool shutting_down_ = false;
  bool is_head_ = false;
  bool api_listening_ = false;
};

}  // namespace traintl
