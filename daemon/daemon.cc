#include "daemon/daemon.h"

#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "common/crypto.h"
#include "common/file_util.h"
#include "common/fs_identity.h"
#include "common/logging.h"
#include "daemon/api/api_routes.h"
#include "daemon/api/dashboard_routes.h"
#include "daemon/api/head_forwarder.h"
#include "daemon/api/internal_routes.h"
#include "daemon/consensus/raft_node.h"
#include "daemon/head/command_log.h"
#include "daemon/head/http_remote_nodes.h"
#include "daemon/head/job_manager.h"
#include "daemon/head/tune_controller.h"
#include "daemon/http/peer_calls.h"
#include "daemon/http/server.h"
#include "daemon/node/agent.h"
#include "daemon/node/blob_store.h"
#include "daemon/node/head_link.h"
#include "daemon/systemd/sd_notify.h"
#include "daemon/systemd/service_signals.h"
#include "daemon/systemd/service_status.h"

namespace traintl {

namespace asio = boost::asio;

namespace {

// Threads for blocking daemon-to-daemon calls (launches, stops, forwarded requests).
constexpr size_t kPeerCallThreads = 8;
// The exit status after the replicated log or state could not be written (a full disk).
constexpr int kExitStateFailure = 3;
// Threads hashing and writing library uploads: two uploads at once go on while a third
// waits, and no upload takes a thread the peer calls need.
constexpr size_t kBlobWorkThreads = 2;

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

}  // namespace

class Daemon::WorkerEvents : public WorkerPoolListener {
 public:
  explicit WorkerEvents(Daemon* d) : d_(d) {}
  bool stopping = false;

  void OnWorkerHello(const std::string& j, int a, int r) override {
    if (Remote()) return d_->head_link_->EnqueueHello(j, a, r);
    d_->jobs_->OnWorkerHello(j, a, r);
  }
  void OnWorkerReport(const std::string& j, int a, int r, const events::Report& rep) override {
    if (Remote()) return d_->head_link_->EnqueueReport(j, a, r, rep);
    d_->jobs_->OnWorkerReport(j, a, r, rep);
  }
  void OnWorkerProgress(const std::string& j, int a, int r, const events::Progress& p) override {
    if (Remote()) {
      return d_->head_link_->EnqueueProgress(j, a, r, p);
    }
    d_->jobs_->OnWorkerProgress(j, a, r, p);
  }
  void OnWorkerExit(const WorkerExit& e) override {
    if (stopping) return;
    if (Remote()) {
      return d_->head_link_->EnqueueExit(
          e, TailFile(d_->agent_->LogPath(e.job_id, e.attempt, e.rank), 4096));
    }
    d_->jobs_->OnWorkerExit(e);
  }

 private:
  bool Remote() const { return d_->head_link_ != nullptr && !d_->is_head_; }
  Daemon* const d_;
};

Daemon::Daemon(DaemonConfig cfg, int argc, char** argv)
    : cfg_(std::move(cfg)), argc_(argc), argv_(argv) {}

Daemon::~Daemon() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

namespace {

// A daemon runs for months: its heap must give back what bursts take. glibc's defaults
// do not: each thread gets an arena that keeps its freed memory, and freeing one large
// block (a snapshot of the store, tens of MiB) raises the mmap and trim thresholds to its
// size, so the next ones come from the heap and stay there. Fixed thresholds keep large
// blocks on mmap (returned when freed) and trim the heap's top; two arenas are enough
// for the daemon's few threads.
void BoundHeap() {
  ::mallopt(M_ARENA_MAX, 2);
  ::mallopt(M_MMAP_THRESHOLD, 256 << 10);
  ::mallopt(M_TRIM_THRESHOLD, 1 << 20);
}

}  // namespace

Status Daemon::Prepare() {
  BoundHeap();
  // 0711 when workers run as another user: they must reach blobs/ and jobs/ below it, but
  // never list it (token, cluster secret).
  const mode_t data_dir_mode = cfg_.worker_user.empty() ? 0700 : 0711;
  if (Status st = MakeDirs(cfg_.data_dir, data_dir_mode); !st.ok())
    return Status::Internal("data dir: " + st.message());
  auto token =
      LoadOrCreateSecret(cfg_.token_file.empty() ? cfg_.data_dir + "/token" : cfg_.token_file);
  if (!token.ok()) return token.status();
  token_ = *token;
  ::chmod(cfg_.data_dir.c_str(), data_dir_mode);  // MakeDirs keeps an existing dir's mode
  // One daemon per data dir, before it touches anything there: a second one would kill
  // the first one's workers (their cgroups are keyed by the data dir). Held until exit.
  const std::string lock_path = cfg_.data_dir + "/traintld.lock";
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (lock_fd_ < 0 || ::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    return Status::FailedPrecondition(err == EWOULDBLOCK
                                          ? "another traintld uses the data dir " + cfg_.data_dir
                                          : "cannot lock " + lock_path + ": " + std::strerror(err));
  }
  // Raft connections are authenticated with the cluster secret: --cluster-secret-file, or
  // by default a key derived from the cluster's token (every daemon of a cluster has the
  // same one), so that a cluster is authenticated without another file to distribute.
  if (!cfg_.cluster_secret_file.empty()) {
    auto secret = LoadOrCreateSecret(cfg_.cluster_secret_file);
    if (!secret.ok()) return secret.status();
    cluster_secret_ = *secret;
  } else {
    cluster_secret_ = Sha256Hex("traintl raft cluster secret v1\n" + token_);
  }
  // The bearer credential daemons send each other's /v1/internal routes. With
  // --cluster-secret-file, one derived from it, so that the API token does not open them;
  // without, the token itself: a credential derived from it would keep out nobody who
  // holds it, and daemons of an older release (which send the token) keep working.
  cluster_token_ = cfg_.cluster_secret_file.empty()
                       ? token_
                       : Sha256Hex("traintl cluster api v1\n" + cluster_secret_);
  if (!cfg_.worker_user.empty()) {
    if (::geteuid() != 0)
      return Status::FailedPrecondition("--worker-user needs traintld to run as root");
    auto user = LookupWorkerUser(cfg_.worker_user);
    if (!user.ok()) return user.status();
    worker_user_ = *user;
    std::string why;
    if (!ScopedFsIdentity::Supported(FsIdentity{user->uid, user->gid, user->groups}, &why)) {
      return Status::FailedPrecondition("--worker-user " + cfg_.worker_user +
                                        ": cannot act as that user: " + why);
    }
  } else if (::geteuid() == 0) {
    LOG_WARN << "running as root without --worker-user: training code runs as root";
  }
  auto node_id = LoadOrCreateNodeId(cfg_.data_dir + "/node_id");
  if (!node_id.ok()) return node_id.status();
  node_id_ = *node_id;
  SetLogTag(node_id_);
  return Status::Ok();
}

void Daemon::StartProcessGuards() {
  // Before any thread exists: the reaper is a fork of this process.
  if (Status st = cgroups_.Init(Sha256Hex(AbsolutePath(cfg_.data_dir)).substr(0, 12)); st.ok()) {
    LOG_INFO << "workers run in cgroups under " << cgroups_.root();
  } else {
    // Orphans (a worker's children whose parent died) become this process's children.
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    LOG_WARN << "cgroups: " << st.message()
             << "; falling back to process groups (and this daemon as child subreaper): a "
                "process a training library starts in a session of its own (setsid) can "
                "outlive a kill -9 of the daemon";
  }
  reaper_.Start(cgroups_.root());
  leases_ = lease_clock_.Start().ok();
  if (!leases_) {
    LOG_WARN << "worker lease clock unavailable (memfd or /proc): workers of a frozen daemon "
                "are not fenced";
  }
}

Status Daemon::Build() {
  resources_ = FingerprintNode(cfg_.overrides);
  LOG_INFO << "node " << node_id_ << ": " << resources_.cpus << " CPUs, "
           << resources_.memory_bytes / (1 << 20) << " MiB memory, " << resources_.gpus.size()
           << " GPUs";
  blobs_ = std::make_unique<BlobStore>(cfg_.data_dir + "/blobs");
  TRAINTL_RETURN_IF_ERROR(blobs_->Init());

  // The records live in a scratch file that Raft rebuilds at start, so that the daemon's
  // memory does not grow with the jobs stored (state_store.h).
  StateStore::FileOptions store_opts;
  store_opts.path = cfg_.data_dir + "/state.sqlite3";
  TRAINTL_RETURN_IF_ERROR(store_.UseFile(store_opts));

  RaftOptions ropts;
  ropts.node_id = 1;
  ropts.data_dir = cfg_.data_dir + "/raft";
  ropts.raft_address = cfg_.raft_address;
  ropts.cluster_secret = cluster_secret_;
  ropts.min_free_bytes = cfg_.min_free_disk_mb << 20;
  // The first voter bootstraps as id 1; voters that join get an id of their own.
  agent_only_ = !cfg_.server && !cfg_.join.empty();
  if (cfg_.server && !cfg_.join.empty()) {
    ropts.node_id = RaftIdForNode(node_id_);
    ropts.join = true;
  }
  raft_ = std::make_unique<RaftNode>(ropts, &fsm_);

  WorkerPoolOptions wopts;
  wopts.worker_binary = cfg_.worker_binary;
  wopts.stop_grace = cfg_.worker_stop_grace;
  wopts.term_grace = cfg_.worker_stop_grace;
  wopts.warm_workers = cfg_.warm_workers;
  wopts.max_log_bytes = cfg_.max_rank_log_mb << 20;
  wopts.worker_user = worker_user_;
  wopts.cgroups = &cgroups_;
  wopts.reaper = &reaper_;
  wopts.lease_fd = leases_ ? lease_clock_.read_only_fd() : -1;
  wopts.lease_ms = leases_ ? static_cast<int>(cfg_.worker_lease.count()) : 0;
  events_ = std::make_unique<WorkerEvents>(this);
  pool_ = std::make_unique<WorkerPool>(io_, wopts, events_.get());
  AgentOptions aopts;
  aopts.data_dir = cfg_.data_dir;
  agent_ = std::make_unique<Agent>(aopts, pool_.get());
  command_log_ = std::make_unique<RaftCommandLog>(io_, raft_.get());

  router_ = std::make_shared<http::Router>();
  http::ServerOptions sopts;
  sopts.address = cfg_.api_host;
  sopts.port = cfg_.api_port;
  sopts.token = token_;
  sopts.cluster_token = cluster_token_;
  sopts.browser_sessions = true;  // the dashboard's API calls
  sopts.tls_cert_file = cfg_.tls_cert_file;
  sopts.tls_key_file = cfg_.tls_key_file;
  sopts.allow_insecure_remote = cfg_.insecure_allow_remote_without_tls;
  server_ = std::make_unique<http::Server>(io_, sopts, router_);
  if (Status st = server_->Start(); !st.ok()) {
    return Status::Unavailable("cannot serve the API on " + cfg_.api_host + ":" +
                               std::to_string(cfg_.api_port) + ": " + st.message());
  }
  const auto ep = server_->local_endpoint();
  api_address_ = ep.address().to_string() + ":" + std::to_string(ep.port());

  JobManagerOptions jopts;
  jopts.node_id = node_id_;
  jopts.host = ep.address().to_string();
  jopts.api_address = api_address_;
  jopts.default_storage_path = cfg_.data_dir + "/storage";
  jopts.node_resources = resources_.AsResourceMap();
  jopts.num_gpus = static_cast<int>(resources_.gpus.size());
  jopts.collective_timeout_s = cfg_.collective_timeout_s;
  jopts.retain_jobs = cfg_.retain_jobs;
  jopts.metrics_per_rank = static_cast<size_t>(cfg_.metrics_per_rank);
  jopts.retain_for = std::chrono::milliseconds(static_cast<int64_t>(cfg_.retain_days * 86400e3));
  jopts.role = agent_only_ ? "agent" : "voter";
  jopts.raft_id = agent_only_ ? 0 : ropts.node_id;
  jopts.node_loss_timeout = cfg_.node_loss_timeout;
  if (worker_user_)
    jopts.worker_fs_identity =
        FsIdentity{worker_user_->uid, worker_user_->gid, worker_user_->groups};
  if (cfg_.clustered()) jopts.settle = cfg_.node_loss_timeout;
  nlohmann::json gpu_view = nlohmann::json::array();
  for (const auto& g : resources_.gpus)
    gpu_view.push_back(
        {{"index", g.index}, {"name", g.name}, {"uuid", g.uuid}, {"memory", g.memory_bytes}});
  jopts.gpus = gpu_view;
  jobs_ = std::make_unique<JobManager>(io_, jopts, &store_, command_log_.get(), agent_.get());
  TuneControllerOptions topts;
  topts.default_storage_path = jopts.default_storage_path;
  topts.worker_fs_identity = jopts.worker_fs_identity;
  tune_ = std::make_unique<TuneController>(io_, topts, &store_, command_log_.get(), jobs_.get());
  jobs_->SetJobEventListener(tune_.get());

  if (cfg_.clustered()) {
    NodeStatus self;
    self.node_id = node_id_;
    self.api_address = api_address_;
    self.host = jopts.host;
    self.role = jopts.role;
    self.raft_id = cfg_.server ? ropts.node_id : 0;
    self.total = jopts.node_resources;
    self.gpus = gpu_view;
    self.num_gpus = jopts.num_gpus;
    BuildCluster(std::move(self));
  }
  raft_->SetLeadershipCallback(
      [this](bool leader) { asio::post(io_, [this, leader] { OnLeadership(leader); }); });
  // The node cannot write its log or state (a full disk): it stops, and exits non-zero so
  // that systemd (Restart=on-failure) starts it again, reloading what the disk holds.
  raft_->SetFatalCallback([this](Status why) {
    asio::post(io_, [this, why] {
      LOG_ERROR << "stopping: " << why.message()
                << " (free space on the data dir's file system, then restart traintld)";
      exit_code_ = kExitStateFailure;
      BeginShutdown("a fatal error of the replicated log");
    });
  });
  if (!agent_only_) {
    if (Status st = raft_->Start(); !st.ok())
      return Status::Unavailable("cannot start the replicated log: " + st.message());
  }

  ApiContext actx;
  actx.io = &io_;
  actx.store = &store_;
  actx.jobs = jobs_.get();
  actx.tune = tune_.get();
  actx.raft = agent_only_ ? nullptr : raft_.get();
  actx.blobs = blobs_.get();
  actx.agent = agent_.get();
  actx.node = resources_;
  actx.node_id = node_id_;
  actx.api_address = api_address_;
  actx.version = TRAINTL_VERSION;
  actx.max_upload_bytes = cfg_.max_upload_bytes;
  blob_work_ = std::make_unique<BlockingCallPool>(kBlobWorkThreads);
  actx.blob_work = blob_work_.get();
  actx.worker_fs_identity = jopts.worker_fs_identity;
  actx.max_log_streams = cfg_.max_log_streams;
  if (!agent_only_) {
    actx.disk_space = [this] { return raft_->disk_space(); };
    actx.check_space = [this](uint64_t bytes, const std::string& what) {
      return raft_->CheckSpaceFor(bytes, what);
    };
  }
  if (head_link_ != nullptr) {
    actx.role_when_not_head = jopts.role;
    actx.head_address = [link = head_link_.get()] { return link->head_address(); };
    actx.peers = peers_.get();
    actx.calls = calls_.get();
    actx.forward = [fw = forwarder_.get()](
                       const http::Request& req, const std::shared_ptr<http::Responder>& res,
                       const http::Handler& local) { return fw->Forward(req, res, local); };
    InternalRoutesContext ictx;
    ictx.io = &io_;
    ictx.jobs = jobs_.get();
    ictx.agent = agent_.get();
    ictx.blobs = blobs_.get();
    ictx.raft = agent_only_ ? nullptr : raft_.get();
    ictx.peers = peers_.get();
    ictx.calls = calls_.get();
    ictx.blob_work = blob_work_.get();
    RegisterInternalRoutes(*router_, ictx);
  }
  RegisterApiRoutes(*router_, actx);
  DashboardOptions dopts;
  dopts.token = token_;
  dopts.tls = !cfg_.tls_cert_file.empty();
  dopts.files_dir = cfg_.ui_files_dir;
  RegisterDashboardRoutes(*router_, dopts);
  return Status::Ok();
}

void Daemon::BuildCluster(NodeStatus self) {
  PeerCallOptions popts;
  popts.token = cluster_token_;
  // A cluster serves TLS on every daemon or on none: peers are called as this node serves.
  popts.tls = !cfg_.tls_cert_file.empty();
  popts.client_tls.ca_file = cfg_.tls_ca_file;
  peers_ = std::make_unique<PeerCalls>(popts);
  calls_ = std::make_unique<BlockingCallPool>(kPeerCallThreads);
  HeadLinkOptions hopts;
  hopts.server = cfg_.server;
  hopts.join = cfg_.join;
  hopts.self = std::move(self);
  hopts.lease.heartbeat_interval = cfg_.heartbeat_interval;
  hopts.lease.loss_timeout = cfg_.node_loss_timeout;
  hopts.peers_file = cfg_.data_dir + "/peers.json";
  JobManager* jobs = jobs_.get();
  head_link_ = std::make_unique<HeadLink>(io_, hopts, agent_.get(), blobs_.get(), &store_,
                                          agent_only_ ? nullptr : raft_.get(), peers_.get(),
                                          [jobs] { return jobs->registry().VoterAddresses(); });
  remote_nodes_ = std::make_unique<HttpRemoteNodes>(io_, api_address_, peers_.get(), calls_.get());
  forwarder_ = std::make_unique<HeadForwarder>(io_, cfg_.server, head_link_.get(), peers_.get(),
                                               calls_.get());
  jobs_->SetCluster(remote_nodes_.get(), blobs_.get());
}

void Daemon::OnLeadership(bool leader) {
  is_head_ = leader;
  if (head_link_ != nullptr) head_link_->SetHead(leader);
  jobs_->SetHead(leader);
  tune_->SetHead(leader);
  if (api_listening_) ReportStatus();
}

void Daemon::ReportStatus() {
  // READY=1 once the API listens and the node is in a cluster with a known head; STATUS=
  // on role and head changes.
  systemd::NodeState s;
  s.api_listening = true;
  s.api_address = api_address_;
  s.is_head = is_head_;
  if (head_link_ != nullptr) {
    s.head = s.is_head ? api_address_ : head_link_->head_address();
    s.member = s.is_head || !s.head.empty();
  } else {
    s.member = true;  // a single node bootstraps its own one-voter cluster
    const LeaderInfo leader = raft_->Leader();
    if (!s.is_head && leader.id != 0 && leader.id != raft_->id())
      s.head = "raft id " + std::to_string(leader.id) + " at " + leader.address;
  }
  if (!service_status_->Update(s).empty())
    LOG_INFO << "systemd: " << service_status_->last_status();
}

void Daemon::PollStatus() {
  ReportStatus();
  status_timer_->expires_after(std::chrono::milliseconds(500));
  status_timer_->async_wait([this](const boost::system::error_code& ec) {
    if (!ec) PollStatus();
  });
}

void Daemon::Finish() {
  status_timer_->cancel();
  stop_timer_->cancel();
  watchdog_->Stop();
  pool_->KillAll();  // what is left after the graces; reaps
  io_.stop();
}

void Daemon::WaitForWorkers(std::chrono::steady_clock::time_point deadline) {
  if (pool_->LivePids().empty() || std::chrono::steady_clock::now() >= deadline) {
    if (!pool_->LivePids().empty())
      LOG_WARN << "workers still running at the deadline; killing them";
    Finish();
    return;
  }
  stop_timer_->expires_after(std::chrono::milliseconds(50));
  stop_timer_->async_wait([this, deadline](const boost::system::error_code& ec) {
    if (!ec) WaitForWorkers(deadline);
  });
}

void Daemon::StopWorkers() {
  events_->stopping = true;
  pool_->DrainWarmPool();
  for (const auto& [job_id, attempt] : pool_->LiveAttempts()) agent_->Stop(job_id, attempt);
  // stop request -> grace -> SIGTERM -> grace -> SIGKILL, plus time to reap.
  WaitForWorkers(std::chrono::steady_clock::now() + 2 * cfg_.worker_stop_grace +
                 std::chrono::seconds(2));
}

void Daemon::BeginShutdown(const std::string& why) {
  if (shutting_down_) return;  // a fatal error and a signal, say
  shutting_down_ = true;
  LOG_INFO << "received " << why << "; shutting down";
  // Notifications are best effort: systemd may not be listening, and nothing here depends
  // on it having heard.
  notifier_->Stopping("stopping: handing over, stopping this node's workers").IgnoreError();
  tune_->Shutdown();
  jobs_->Shutdown();  // schedules nothing more
  server_->Stop();    // accepts no more requests
  int voters = 0;
  if (!agent_only_) {
    auto members = raft_->Configuration();
    if (members.ok())
      for (const RaftMember& m : *members) voters += m.role == RaftMember::Role::kVoter;
  }
  if (!is_head_ || voters <= 1) {
    StopWorkers();
    return;
  }
  // A head hands leadership over before it goes (raft_transfer), so that the cluster does
  // not wait for an election timeout; at most 2 s, then it goes anyway.
  auto once = std::make_shared<bool>(false);
  auto fallback = std::make_shared<asio::steady_timer>(io_, std::chrono::seconds(2));
  auto proceed = [this, once, fallback] {
    if (*once) return;
    *once = true;
    fallback->cancel();
    StopWorkers();
  };
  fallback->async_wait([proceed](const boost::system::error_code& e) {
    if (!e) proceed();
  });
  raft_->TransferLeadership(0, [this, proceed](Status st) {
    if (st.ok()) {
      LOG_INFO << "handed leadership over";
    } else {
      LOG_WARN << "leadership transfer failed: " << st.message();
    }
    asio::post(io_, proceed);
  });
}

void Daemon::Reload() {
  // Re-parses the same command line and config file (the command line still wins); what
  // can change at run time is applied: the log level.
  notifier_->Reloading("reloading the configuration").IgnoreError();  // best effort
  DaemonConfig fresh;
  int exit_code = 0;
  if (ParseDaemonConfig(argc_, argv_, &fresh, &exit_code)) {
    SetLogLevel(fresh.log_level);
    LOG_INFO << "reloaded the configuration: log level " << LogLevelName(fresh.log_level);
  } else {
    LOG_WARN << "reload: the configuration is invalid; keeping the running settings";
  }
  notifier_->Ready(service_status_->last_status()).IgnoreError();  // best effort
}

void Daemon::InstallSignals() {
  // SIGTERM: stop accepting work, hand leadership over, stop this node's workers (stop
  // request, SIGTERM, SIGKILL), exit 0. A second SIGTERM/SIGINT kills the workers now.
  systemd::ServiceSignalHandlers handlers;
  handlers.stop = [this](const systemd::ReceivedSignal& sig) { BeginShutdown(sig.Describe()); };
  handlers.hurry = [this](const systemd::ReceivedSignal& sig) {
    LOG_WARN << "second stop signal (" << sig.Describe() << "): killing the workers now";
    Finish();
  };
  handlers.reload = [this](const systemd::ReceivedSignal& sig) {
    LOG_INFO << "received " << sig.Describe() << "; reloading";
    Reload();
  };
  signals_ = std::make_unique<systemd::ServiceSignals>(io_, handlers);
  if (Status st = signals_->Start(); !st.ok()) LOG_WARN << "signals: " << st.message();
}

int Daemon::Run() {
  // First of all: takes NOTIFY_SOCKET and WATCHDOG_* out of the environment, so that no
  // worker inherits them.
  notifier_ = std::make_unique<systemd::Notifier>(systemd::Notifier::FromEnvironment());
  SetLogLevel(cfg_.log_level);
  if (!notifier_->setup_error().ok())
    LOG_WARN << "systemd notifications: " << notifier_->setup_error().message();
  service_status_ = std::make_unique<systemd::ServiceStatus>(notifier_.get());
  service_status_->Update(systemd::NodeState{});  // STATUS=starting
  if (Status st = Prepare(); !st.ok()) {
    LOG_ERROR << st.message();
    return 1;
  }
  StartProcessGuards();
  if (Status st = Build(); !st.ok()) {
    LOG_ERROR << st.message();
    return 1;
  }

  // The CLI on this machine reads this file; "https://" tells it to speak TLS.
  const bool tls = !cfg_.tls_cert_file.empty();
  if (Status st = WriteFileAtomic(cfg_.data_dir + "/api_address",
                                  (tls ? "https://" : "") + api_address_ + "\n", 0644);
      !st.ok()) {
    LOG_ERROR << st.message();
  }
  LOG_INFO << "traintld " << TRAINTL_VERSION << " serving on " << (tls ? "https://" : "http://")
           << api_address_ << " (data dir " << cfg_.data_dir << ")";
  blob_work_->Start();
  jobs_->Start();
  tune_->Start();
  // After the API is up: the first jobs need not wait for them.
  if (cfg_.warm_workers > 0) asio::post(io_, [this] { pool_->FillWarmPool(); });
  if (head_link_ != nullptr) {
    calls_->Start();
    forwarder_->Start();
    head_link_->Start();
  }

  // WATCHDOG=1 from this loop: a wedged loop stops the pings and systemd restarts us.
  watchdog_ = std::make_unique<systemd::Watchdog>(io_, notifier_.get());
  watchdog_->Start();
  if (watchdog_->enabled()) {
    LOG_INFO
        << "systemd watchdog: a ping every "
        << std::chrono::duration_cast<std::chrono::milliseconds>(watchdog_->ping_interval()).count()
        << " ms";
  }
  api_listening_ = true;
  status_timer_ = std::make_unique<asio::steady_timer>(io_);
  stop_timer_ = std::make_unique<asio::steady_timer>(io_);
  PollStatus();
  InstallSignals();

  io_.run();
  signals_->Cancel();
  blob_work_->Stop();
  if (head_link_ != nullptr) {
    forwarder_->Stop();
    calls_->Stop();
    head_link_->Stop();
  }
  raft_->Stop();
  ::unlink((cfg_.data_dir + "/api_address").c_str());
  LOG_INFO << "traintld stopped";
  return exit_code_;
}

}  // namespace traintl
