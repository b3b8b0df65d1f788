// traintld: wiring only. Parses options, builds the components, runs the io_context.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "common/crypto.h"
#include "common/file_util.h"
#include "common/fs_identity.h"
#include "common/lease_clock.h"
#include "common/logging.h"
#include "daemon/api/api_routes.h"
#include "daemon/cluster/cluster_runtime.h"
#include "daemon/consensus/raft_node.h"
#include "daemon/daemon_config.h"
#include "daemon/head/command_log.h"
#include "daemon/head/job_manager.h"
#include "daemon/http/server.h"
#include "daemon/node/agent.h"
#include "daemon/node/blob_store.h"
#include "daemon/node/fingerprint.h"
#include "daemon/node/worker_cgroups.h"
#include "daemon/node/worker_pool.h"
#include "daemon/state/fsm.h"
#include "daemon/state/state_store.h"
#include "daemon/systemd/sd_notify.h"
#include "daemon/systemd/service_signals.h"
#include "daemon/systemd/service_status.h"

namespace asio = boost::asio;
using namespace traintl;

namespace {

const char* LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

int Run(const DaemonConfig& cfg, int argc, char** argv) {
  // First of all: takes NOTIFY_SOCKET and WATCHDOG_* out of the environment, so that no
  // worker inherits them.
  systemd::Notifier notifier = systemd::Notifier::FromEnvironment();
  SetLogLevel(cfg.log_level);
  if (!notifier.setup_error().ok()) {
    LOG_WARN << "systemd notifications: " << notifier.setup_error().message();
  }
  systemd::ServiceStatus service_status(&notifier);
  service_status.Update(systemd::NodeState{});  // STATUS=starting
  // 0711 when workers run as another user: they must reach blobs/ and jobs/ below it, but
  // never list it (token, cluster secret).
  const mode_t data_dir_mode = cfg.worker_user.empty() ? 0700 : 0711;
  if (Status st = MakeDirs(cfg.data_dir, data_dir_mode); !st.ok()) {
    LOG_ERROR << "data dir: " << st.message();
    return 1;
  }
  auto token =
      LoadOrCreateSecret(cfg.token_file.empty() ? cfg.data_dir + "/token" : cfg.token_file);
  if (!token.ok()) {
    LOG_ERROR << token.status().message();
    return 1;
  }
  ::chmod(cfg.data_dir.c_str(), data_dir_mode);  // MakeDirs keeps an existing dir's mode
  // One daemon per data dir, before it touches anything there: a second one would kill
  // the first one's workers (their cgroups are keyed by the data dir). Held until exit.
  const std::string lock_path = cfg.data_dir + "/traintld.lock";
  const int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    LOG_ERROR << (err == EWOULDBLOCK ? "another traintld uses the data dir " + cfg.data_dir
                                     : "cannot lock " + lock_path + ": " + std::strerror(err));
    return 1;
  }
  // Raft connections are authenticated with the cluster secret: --cluster-secret-file, or
  // by default a key derived from the cluster's token (every daemon of a cluster has the
  // same one), so that a cluster is authenticated without another file to distribute.
  std::string cluster_secret;
  if (!cfg.cluster_secret_file.empty()) {
    auto secret = LoadOrCreateSecret(cfg.cluster_secret_file);
    if (!secret.ok()) {
      LOG_ERROR << secret.status().message();
      return 1;
    }
    cluster_secret = *secret;
  } else {
    cluster_secret = Sha256Hex("traintl raft cluster secret v1\n" + *token);
  }
  std::optional<WorkerUser> worker_user;
  if (!cfg.worker_user.empty()) {
    if (::geteuid() != 0) {
      LOG_ERROR << "--worker-user needs traintld to run as root";
      return 1;
    }
    auto user = LookupWorkerUser(cfg.worker_user);
    if (!user.ok()) {
      LOG_ERROR << user.status().message();
      return 1;
    }
    worker_user = *user;
    std::string why;
    if (!ScopedFsIdentity::Supported(FsIdentity{user->uid, user->gid, user->groups}, &why)) {
      LOG_ERROR << "--worker-user " << cfg.worker_user << ": cannot act as that user: " << why;
      return 1;
    }
  } else if (::geteuid() == 0) {
    LOG_WARN << "running as root without --worker-user: training code runs as root";
  }
  auto node_id = LoadOrCreateNodeId(cfg.data_dir + "/node_id");
  if (!node_id.ok()) {
    LOG_ERROR << node_id.status().message();
    return 1;
  }
  SetLogTag(*node_id);

  // Before any thread exists: the reaper is a fork of this process.
  WorkerCgroups cgroups;
  if (Status st = cgroups.Init(Sha256Hex(AbsolutePath(cfg.data_dir)).substr(0, 12)); st.ok()) {
    LOG_INFO << "workers run in cgroups under " << cgroups.root();
  } else {
    // Orphans (a worker's children whose parent died) become this process's children.
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    LOG_WARN << "cgroups: " << st.message()
             << "; falling back to process groups (and this daemon as child subreaper): a "
                "process a training library starts in a session of its own (setsid) can "
                "outlive a kill -9 of the daemon";
  }
  OrphanReaper reaper;
  reaper.Start(cgroups.root());
  LeaseClock lease_clock;
  const bool leases = lease_clock.Start().ok();
  if (!leases) {
    LOG_WARN << "worker lease clock unavailable (memfd or /proc): workers of a frozen daemon "
                "are not fenced";
  }

  NodeResources resources = FingerprintNode(cfg.overrides);
  LOG_INFO << "node " << *node_id << ": " << resources.cpus << " CPUs, "
           << resources.memory_bytes / (1 << 20) << " MiB memory, " << resources.gpus.size()
           << " GPUs";

  BlobStore blobs(cfg.data_dir + "/blobs");
  if (Status st = blobs.Init(); !st.ok()) {
    LOG_ERROR << st.message();
    return 1;
  }

  StateStore store;
  Fsm fsm(&store);
  RaftOptions ropts;
  ropts.node_id = 1;
  ropts.data_dir = cfg.data_dir + "/raft";
  ropts.raft_address = cfg.raft_address;
  ropts.cluster_secret = cluster_secret;
  ropts.min_free_bytes = cfg.min_free_disk_mb << 20;
  // The first voter bootstraps as id 1; voters that join get an id of their own.
  const bool joining_voter = cfg.server && !cfg.join.empty();
  const bool agent_only = !cfg.server && !cfg.join.empty();
  if (joining_voter) {
    ropts.node_id = RaftIdForNode(*node_id);
    ropts.join = true;
  }
  RaftNode raft(ropts, &fsm);

  asio::io_context io(1);
  WorkerPoolOptions wopts;
  wopts.worker_binary = cfg.worker_binary;
  wopts.stop_grace = cfg.worker_stop_grace;
  wopts.term_grace = cfg.worker_stop_grace;
  wopts.worker_user = worker_user;
  wopts.cgroups = &cgroups;
  wopts.reaper = &reaper;
  wopts.lease_fd = leases ? lease_clock.read_only_fd() : -1;
  wopts.lease_ms = leases ? static_cast<int>(cfg.worker_lease.count()) : 0;
  std::unique_ptr<JobManager> jobs;
  std::unique_ptr<ClusterRuntime> cluster;
  // The pool reports worker events to the job manager, which is built after it.
  // While the daemon stops, worker exits are not reported: the attempts stay open in the
  // log and restart from their latest checkpoints (on another node, or here after a
  // restart) instead of counting as failures of the job.
  struct Forwarder : WorkerPoolListener {
    JobManager* target = nullptr;
    bool stopping = false;
    // Multi-node: while another node is the head, events go to it over HTTP.
    ClusterRuntime* cluster = nullptr;
    Agent* agent = nullptr;
    bool Remote() const { return cluster != nullptr && !target->leader(); }
    void OnWorkerHello(const std::string& j, int a, int r) override {
      if (Remote()) return cluster->EnqueueHello(j, a, r);
      target->OnWorkerHello(j, a, r);
    }
    void OnWorkerReport(const std::string& j, int a, int r, int s, const nlohmann::json& m,
                        const std::string& c) override {
      if (Remote()) return cluster->EnqueueReport(j, a, r, s, m, c);
      target->OnWorkerReport(j, a, r, s, m, c);
    }
    void OnWorkerExit(const WorkerExit& e) override {
      if (stopping) return;
      if (Remote())
        return cluster->EnqueueExit(e, TailFile(agent->LogPath(e.job_id, e.attempt, e.rank), 4096));
      target->OnWorkerExit(e);
    }
  } forwarder;
  WorkerPool pool(io, wopts, &forwarder);
  AgentOptions aopts;
  aopts.data_dir = cfg.data_dir;
  Agent agent(aopts, &pool);
  RaftCommandLog command_log(io, &raft);

  JobManagerOptions jopts;
  jopts.node_id = *node_id;
  jopts.node_address = "127.0.0.1";
  jopts.default_storage_path = cfg.data_dir + "/storage";
  jopts.node_resources = resources.AsResourceMap();
  jopts.num_gpus = static_cast<int>(resources.gpus.size());
  jopts.collective_timeout_s = cfg.collective_timeout_s;
  jopts.role = agent_only ? "agent" : "voter";
  jopts.raft_id = agent_only ? 0 : ropts.node_id;
  jopts.node_loss_timeout = cfg.node_loss_timeout;
  if (worker_user)
    jopts.worker_fs_identity = FsIdentity{worker_user->uid, worker_user->gid, worker_user->groups};
  if (cfg.clustered()) jopts.settle = cfg.node_loss_timeout;
  nlohmann::json gpu_view = nlohmann::json::array();
  for (const auto& g : resources.gpus)
    gpu_view.push_back(
        {{"index", g.index}, {"name", g.name}, {"uuid", g.uuid}, {"memory", g.memory_bytes}});
  jopts.gpus = gpu_view;

  auto router = std::make_shared<http::Router>();
  http::ServerOptions sopts;
  sopts.address = cfg.api_host;
  sopts.port = cfg.api_port;
  sopts.token = *token;
  sopts.tls_cert_file = cfg.tls_cert_file;
  sopts.tls_key_file = cfg.tls_key_file;
  sopts.allow_insecure_remote = cfg.insecure_allow_remote_without_tls;
  http::Server server(io, sopts, router);
  if (Status st = server.Start(); !st.ok()) {
    LOG_ERROR << "cannot serve the API on " << cfg.api_host << ":" << cfg.api_port << ": "
              << st.message();
    return 1;
  }
  const auto ep = server.local_endpoint();
  const std::string api_address = ep.address().to_string() + ":" + std::to_string(ep.port());
  jopts.api_address = api_address;
  jopts.node_address = ep.address().to_string();

  jobs = std::make_unique<JobManager>(io, jopts, &store, &command_log, &agent);
  forwarder.target = jobs.get();
  JobManager* jm = jobs.get();
  if (cfg.clustered()) {
    ClusterOptions copts;
    copts.server = cfg.server;
    copts.join = cfg.join;
    copts.token = *token;
    copts.self.node_id = *node_id;
    copts.self.api_address = api_address;
    copts.self.host = jopts.node_address;
    copts.self.role = jopts.role;
    copts.self.raft_id = cfg.server ? ropts.node_id : 0;
    copts.self.total = jopts.node_resources;
    copts.self.gpus = gpu_view;
    copts.self.num_gpus = jopts.num_gpus;
    copts.heartbeat_interval = cfg.heartbeat_interval;
    copts.loss_timeout = cfg.node_loss_timeout;
    copts.peers_file = cfg.data_dir + "/peers.json";
    // A cluster serves TLS on every daemon or on none: peers are called as this node serves.
    copts.tls = !cfg.tls_cert_file.empty();
    copts.client_tls.ca_file = cfg.tls_ca_file;
    cluster = std::make_unique<ClusterRuntime>(io, copts, jm, &agent, &blobs, &store,
                                               agent_only ? nullptr : &raft);
    jm->SetCluster(cluster.get(), &blobs);
    forwarder.cluster = cluster.get();
    forwarder.agent = &agent;
  }
  ClusterRuntime* cl = cluster.get();
  std::function<void()> report_status;  // set once the API listens
  raft.SetLeadershipCallback([&io, jm, cl, &report_status](bool leader) {
    asio::post(io, [jm, cl, leader, &report_status] {
      if (cl != nullptr) cl->SetHead(leader);
      jm->SetLeader(leader);
      if (report_status) report_status();
    });
  });
  if (!agent_only) {
    if (Status st = raft.Start(); !st.ok()) {
      LOG_ERROR << "cannot start the replicated log: " << st.message();
      return 1;
    }
  }

  ApiContext actx;
  actx.io = &io;
  actx.store = &store;
  actx.jobs = jm;
  actx.blobs = &blobs;
  actx.agent = &agent;
  actx.node = resources;
  actx.node_id = *node_id;
  actx.api_address = api_address;
  actx.version = TRAINTL_VERSION;
  actx.max_upload_bytes = cfg.max_upload_bytes;
  actx.max_log_streams = cfg.max_log_streams;
  if (!agent_only) actx.disk_space = [&raft] { return raft.disk_space(); };
  if (cl != nullptr) {
    actx.role_when_not_head = jopts.role;
    actx.head_address = [cl] { return cl->head_address(); };
    actx.forward = [cl](const http::Request& req, const std::shared_ptr<http::Responder>& res,
                        const http::Handler& local) { return cl->Forward(req, res, local); };
    cl->RegisterRoutes(*router);
  }
  RegisterApiRoutes(*router, actx);

  // The CLI on this machine reads this file; "https://" tells it to speak TLS.
  const std::string scheme = cfg.tls_cert_file.empty() ? "http://" : "https://";
  if (Status st =
          WriteFileAtomic(cfg.data_dir + "/api_address",
                          (cfg.tls_cert_file.empty() ? "" : scheme) + api_address + "\n", 0644);
      !st.ok()) {
    LOG_ERROR << st.message();
  }
  LOG_INFO << "traintld " << TRAINTL_VERSION << " serving on " << scheme << api_address
           << " (data dir " << cfg.data_dir << ")";
  jm->Start();
  if (cl != nullptr) cl->Start();

  // WATCHDOG=1 from this loop: a wedged loop stops the pings and systemd restarts us.
  systemd::Watchdog watchdog(io, &notifier);
  watchdog.Start();
  if (watchdog.enabled()) {
    LOG_INFO
        << "systemd watchdog: a ping every "
        << std::chrono::duration_cast<std::chrono::milliseconds>(watchdog.ping_interval()).count()
        << " ms";
  }

  // READY=1 once the API listens and the node is in a cluster with a known head; STATUS=
  // on role and head changes.
  report_status = [&] {
    systemd::NodeState s;
    s.api_listening = true;
    s.api_address = api_address;
    s.is_head = jm->leader();
    if (cl != nullptr) {
      s.head = s.is_head ? api_address : cl->head_address();
      s.member = s.is_head || !s.head.empty();
    } else {
      s.member = true;  // a single node bootstraps its own one-voter cluster
      const LeaderInfo leader = raft.Leader();
      if (!s.is_head && leader.id != 0 && leader.id != raft.id())
        s.head = "raft id " + std::to_string(leader.id) + " at " + leader.address;
    }
    if (!service_status.Update(s).empty()) LOG_INFO << "systemd: " << service_status.last_status();
  };
  asio::steady_timer status_timer(io);
  std::function<void()> poll_status = [&] {
    report_status();
    status_timer.expires_after(std::chrono::milliseconds(500));
    status_timer.async_wait([&](const boost::system::error_code& ec) {
      if (!ec) poll_status();
    });
  };
  poll_status();

  // SIGTERM: stop accepting work, hand leadership over, stop this node's workers (stop
  // request, SIGTERM, SIGKILL), exit 0. A second SIGTERM/SIGINT kills the workers now.
  asio::steady_timer stop_timer(io);
  auto finish = [&] {
    status_timer.cancel();
    stop_timer.cancel();
    watchdog.Stop();
    pool.KillAll();  // what is left after the graces; reaps
    io.stop();
  };
  std::function<void(std::chrono::steady_clock::time_point)> wait_for_workers =
      [&](std::chrono::steady_clock::time_point deadline) {
        if (pool.LivePids().empty() || std::chrono::steady_clock::now() >= deadline) {
          if (!pool.LivePids().empty())
            LOG_WARN << "workers still running at the deadline; killing them";
          finish();
          return;
        }
        stop_timer.expires_after(std::chrono::milliseconds(50));
        stop_timer.async_wait([&, deadline](const boost::system::error_code& ec) {
          if (!ec) wait_for_workers(deadline);
        });
      };
  auto stop_workers = [&] {
    forwarder.stopping = true;
    for (const auto& [job_id, attempt] : pool.LiveAttempts()) agent.Stop(job_id, attempt);
    // stop request -> grace -> SIGTERM -> grace -> SIGKILL, plus time to reap.
    wait_for_workers(std::chrono::steady_clock::now() + 2 * cfg.worker_stop_grace +
                     std::chrono::seconds(2));
  };
  systemd::ServiceSignalHandlers handlers;
  handlers.stop = [&](int sig) {
    LOG_INFO << "received " << (sig == SIGTERM ? "SIGTERM" : "SIGINT") << "; shutting down";
    notifier.Stopping("stopping: handing over, stopping this node's workers");
    jm->Shutdown();  // schedules nothing more
    server.Stop();   // accepts no more requests
    int voters = 0;
    if (!agent_only) {
      auto members = raft.Configuration();
      if (members.ok())
        for (const RaftMember& m : *members) voters += m.role == RaftMember::Role::kVoter;
    }
    if (!jm->leader() || voters <= 1) {
      stop_workers();
      return;
    }
    // A head hands leadership over before it goes (raft_transfer), so that the cluster
    // does not wait for an election timeout; at most 2 s, then it goes anyway.
    auto once = std::make_shared<bool>(false);
    auto fallback = std::make_shared<asio::steady_timer>(io, std::chrono::seconds(2));
    auto proceed = [once, fallback, &stop_workers] {
      if (*once) return;
      *once = true;
      fallback->cancel();
      stop_workers();
    };
    fallback->async_wait([proceed](const boost::system::error_code& e) {
      if (!e) proceed();
    });
    raft.TransferLeadership(0, [&io, proceed](Status st) {
      if (st.ok()) {
        LOG_INFO << "handed leadership over";
      } else {
        LOG_WARN << "leadership transfer failed: " << st.message();
      }
      asio::post(io, proceed);
    });
  };
  handlers.hurry = [&](int) {
    LOG_WARN << "second stop signal: killing the workers now";
    finish();
  };
  handlers.reload = [&] {
    // Re-parses the same command line and config file (the command line still wins);
    // what can change at run time is applied: the log level.
    notifier.Reloading("reloading the configuration");
    DaemonConfig fresh;
    int exit_code = 0;
    if (ParseDaemonConfig(argc, argv, &fresh, &exit_code)) {
      SetLogLevel(fresh.log_level);
      LOG_INFO << "reloaded the configuration: log level " << LogLevelName(fresh.log_level);
    } else {
      LOG_WARN << "reload: the configuration is invalid; keeping the running settings";
    }
    notifier.Ready(service_status.last_status());
  };
  systemd::ServiceSignals signals(io, handlers);
  signals.Start();

  io.run();
  signals.Cancel();
  if (cl != nullptr) cl->Stop();
  raft.Stop();
  ::unlink((cfg.data_dir + "/api_address").c_str());
  LOG_INFO << "traintld stopped";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  DaemonConfig cfg;
  int exit_code = 0;
  if (!ParseDaemonConfig(argc, argv, &cfg, &exit_code)) return exit_code;
  return Run(cfg, argc, argv);
}
