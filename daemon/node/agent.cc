#include "daemon/node/agent.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>

#include "common/code_archive.h"
#include "common/file_util.h"
#include "common/fs_identity.h"
#include "common/logging.h"
#include "common/safe_fs.h"
#include "proto/rank_context.h"

namespace traintl {

std::string Agent::JobDir(const std::string& job_id) const {
  return options_.data_dir + "/jobs/" + job_id;
}

std::string Agent::AttemptDir(const std::string& job_id, int attempt) const {
  return JobDir(job_id) + "/attempt_" + std::to_string(attempt);
}

std::string Agent::LogPath(const std::string& job_id, int attempt, int rank) const {
  return AttemptDir(job_id, attempt) + "/rank_" + std::to_string(rank) + ".log";
}

std::string Agent::StagingDir(const std::string& trial_dir, int attempt) {
  return trial_dir + "/.staging/attempt_" + std::to_string(attempt);
}

Status Agent::RemoveStaleStaging(const SafeDir& staging_root, int attempt) {
  TRAINTL_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(staging_root));
  Status first_error;
  for (const auto& name : names) {
    // attempt_<K> with K < attempt, digits only: anything else is not ours to judge.
    static const std::string kPrefix = "attempt_";
    if (name.rfind(kPrefix, 0) != 0 || name.size() == kPrefix.size() ||
        name.size() > kPrefix.size() + 9 ||
        name.find_first_not_of("0123456789", kPrefix.size()) != std::string::npos)
      continue;
    if (std::stoi(name.substr(kPrefix.size())) >= attempt) continue;
    // With the daemon's access (the worker may have left modes that lock itself out):
    // RemoveAllAt neither follows a symlink nor leaves the tree, whatever the worker did
    // to it (a hard link it planted loses a name, its file is untouched).
    Status st = RemoveAllAt(staging_root, name);
    if (!st.ok() && first_error.ok()) first_error = st;
  }
  return first_error;
}

std::string Agent::DataIndexDir() const { return options_.data_dir + "/data_index"; }

Result<SafeDir> Agent::MakeTrialDir(const NodeAttemptPlan& plan) const {
  const auto& user = pool_->worker_user();
  if (!user.has_value() || !plan.trial_dir_as_worker)
    return MakeJobDir(plan.trial_dir, 0755, JobOwners());
  // A storage path the submitter chose: only where the worker could make it itself (not
  // in /etc, say, with root's access).
  const FsIdentity id{user->uid, user->gid, user->groups};
  ScopedFsIdentity as_worker(&id);
  auto made = MakeJobDir(plan.trial_dir, 0755, JobOwners());
  if (!made.ok()) {
    return Status(made.status().code(),
                  "making the trial dir as " + user->name +
                      " (run_config.storage_path must be where that user can write): " +
                      made.status().message());
  }
  return made;
}

Result<SafeDir> Agent::MakeWorkerDirBelow(const SafeDir& parent, const std::string& name) const {
  const OwnerPolicy owners = JobOwners();
  TRAINTL_ASSIGN_OR_RETURN(SafeDir dir, MakeDirsBelow(parent, name, 0755, owners));
  Status given = GiveToWorker(dir);
  if (given.ok()) return dir;
  // An empty one of root's: what a launch that died between making it and giving it away
  // left. Made again, it is this launch's own.
  auto names = ListDir(dir);
  if (dir.created || !names.ok() || !names->empty() ||
      ::unlinkat(parent.fd.get(), name.c_str(), AT_REMOVEDIR) != 0)
    return given;
  TRAINTL_ASSIGN_OR_RETURN(dir, MakeDirsBelow(parent, name, 0755, owners));
  TRAINTL_RETURN_IF_ERROR(GiveToWorker(dir));
  return dir;
}

Status Agent::GiveToWorker(const SafeDir& dir) const {
  const auto& user = pool_->worker_user();
  if (!user.has_value()) return Status::Ok();
  struct stat st;
  if (::fstat(dir.fd.get(), &st) != 0)
    return Status::Internal("stat " + dir.path + ": " + std::strerror(errno));
  if (st.st_uid == user->uid) return Status::Ok();
  if (!dir.created) {
    return Status::PermissionDenied("refusing to give " + dir.path + " to " + user->name +
                                    ": it was not made for this job (owned by uid " +
                                    std::to_string(st.st_uid) + ")");
  }
  TRAINTL_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(dir));
  if (!names.empty()) {
    return Status::PermissionDenied("refusing to give " + dir.path + " to " + user->name +
                                    ": it changed while it was made");
  }
  return ChownDirNoFollow(dir, user->uid, user->gid, JobOwners());
}

OwnerPolicy Agent::JobOwners() const {
  OwnerPolicy owners;
  if (const auto& user = pool_->worker_user(); user.has_value())
    owners.also_allowed.push_back(user->uid);
  return owners;
}

namespace {

// `port` (0: any) bound on `address` and let go; the port bound, or 0.
int TryBind(const std::string& address, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, address.c_str(), &sa.sin_addr) != 1)
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int bound = 0;
  socklen_t len = sizeof sa;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0) {
    bound = ntohs(sa.sin_port);
  }
  ::close(fd);
  return bound;
}

}  // namespace

int Agent::PickFreePort(const std::string& address) {
  // Below the kernel's ephemeral range (ip_local_port_range, 32768.. by default): a port
  // from bind(0) is one that every outgoing connection may take before rank 0 binds it
  // (a TCPStore's "Address already in use", seen in CI); one below the range only another
  // listener can.
  int ephemeral_low = 32768;
  if (auto range = ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); range.ok()) {
    const int low = std::atoi(range->c_str());
    if (low > 0) ephemeral_low = low;
  }
  constexpr int kLowest = 10000;
  if (ephemeral_low - kLowest >= 1000) {
    thread_local std::mt19937 rng(std::random_device{}());
    std::uniform_int_distribution<int> pick(kLowest, ephemeral_low - 1);
    for (int tries = 0; tries < 32; ++tries) {
      if (int port = TryBind(address, pick(rng)); port != 0) return port;
    }
  }
  return TryBind(address, 0);
}

nlohmann::json Agent::TfConfig(const NodeAttemptPlan& plan, int rank) {
  nlohmann::json workers = nlohmann::json::array();
  for (int r = 0; r < plan.world_size; ++r) {
    workers.push_back(plan.rank_hosts[r] + ":" + std::to_string(plan.worker_port_base + r));
  }
  return {{"cluster", {{"worker", std::move(workers)}}},
          {"task", {{"type", "worker"}, {"index", rank}}},
          {"environment", "cloud"}};
}

Status Agent::CheckWorkerPorts(const NodeAttemptPlan& plan) {
  for (int rank : plan.world_ranks) {
    const std::string& host = plan.rank_hosts[rank];
    const int port = plan.worker_port_base + rank;
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Status::Unavailable("cannot check the ports of TF_CONFIG: no socket");
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port));
    if (::inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1)
      sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
    ::close(fd);
    if (!free) {
      return Status::Unavailable("port " + std::to_string(port) + " on " + host + " (rank " +
                                 std::to_string(rank) + "'s TF_CONFIG address) is in use");
    }
  }
  return Status::Ok();
}

Result<std::unique_ptr<RabitTracker>> Agent::StartTracker(const NodeAttemptPlan& plan) {
  RabitTrackerOptions o;
  o.host = plan.master_addr;
  o.num_workers = plan.world_size;
  // XGBoost's evaluation lines reach the tracker only: they go to rank 0's log (this node
  // runs rank 0), where `traintl logs` shows them, not to the daemon's; so do the
  // tracker's protocol errors. The log's own bound applies only while rank 0's worker
  // lives, and anyone on the node can send prints: at most kMaxPrintedBytes in all.
  constexpr uint64_t kMaxPrintedBytes = 64ull << 20;
  auto append = std::make_shared<std::function<void(const std::string&)>>(
      [log = LogPath(plan.job_id, plan.attempt, 0),
       printed = uint64_t{0}](const std::string& text) mutable {  // on the tracker's thread only
        if (printed >= kMaxPrintedBytes) return;
        const std::string line = text + "\n";
        printed += line.size();
        if (printed >= kMaxPrintedBytes) {
          LOG_WARN << "rabit tracker: " << (kMaxPrintedBytes >> 20) << " MiB of prints written to "
                   << log << "; no more";
        }
        // A plain file of root's or the daemon's only: no link followed, no FIFO to block on.
        Result<UniqueFd> fd = OpenAppendNoFollow(log, 0640);
        if (!fd.ok()) {
          LOG_DEBUG << "rabit print for " << log << " (" << fd.status().message() << "): " << text;
          return;
        }
        const ssize_t ignored = ::write(fd->get(), line.data(), line.size());
        (void)ignored;
      });
  o.on_print = [append](const std::string& message) { (*append)(message); };  // cut at 4 KiB
  // Cut as prints are (a task id in it may be 1 MiB).
  o.on_error = [append](const std::string& why) { (*append)("traintl: " + why.substr(0, 4096)); };
  auto tracker = RabitTracker::Start(std::move(o));
  if (!tracker.ok()) {
    return Status(tracker.status().code(),
                  "cannot start the xgboost tracker: " + tracker.status().message());
  }
  return std::move(*tracker);
}

void Agent::KeepTracker(const std::string& job_id, int attempt,
                        std::unique_ptr<RabitTracker> tracker) {
  Tracker& t = trackers_[job_id];
  t.attempt = attempt;
  t.tracker = std::move(tracker);
  t.idle_since = std::chrono::steady_clock::time_point::max();
  SweepTrackers();
}

void Agent::SweepTrackers(std::chrono::milliseconds linger) {
  const auto now = std::chrono::steady_clock::now();
  for (auto it = trackers_.begin(); it != trackers_.end();) {
    Tracker& t = it->second;
    if (pool_->LiveWorkers(it->first, t.attempt) > 0) {
      t.idle_since = std::chrono::steady_clock::time_point::max();
    } else if (t.idle_since == std::chrono::steady_clock::time_point::max()) {
      t.idle_since = now;
    }
    const bool idle = t.idle_since != std::chrono::steady_clock::time_point::max() &&
                      now - t.idle_since >= linger;
    it = t.tracker->finished() || idle ? trackers_.erase(it) : std::next(it);
  }
}

void Agent::Stop(const std::string& job_id, int attempt, bool urgent, bool final) {
  if (final) {
    // Enough that no launch can still be on its way for a forgotten one.
    constexpr size_t kMaxStoppedJobs = 4096;
    auto [it, inserted] = stopped_.emplace(job_id, attempt);
    if (!inserted) {
      it->second = std::max(it->second, attempt);
    } else {
      stopped_order_.push_back(job_id);
      if (stopped_order_.size() > kMaxStoppedJobs) {
        stopped_.erase(stopped_order_.front());
        stopped_order_.pop_front();
      }
    }
  }
  pool_->StopAttempt(job_id, attempt, urgent);
  auto it = trackers_.find(job_id);
  if (it != trackers_.end() && it->second.attempt <= attempt) trackers_.erase(it);
}

Result<int> Agent::Launch(const NodeAttemptPlan& planned) {
  if (auto stopped = stopped_.find(planned.job_id);
      stopped != stopped_.end() && stopped->second >= planned.attempt) {
    return Status::FailedPrecondition("attempt " + std::to_string(planned.attempt) + " of job " +
                                      planned.job_id +
                                      " was stopped on this node before its launch arrived");
  }
  NodeAttemptPlan plan = planned;
  std::unique_ptr<RabitTracker> tracker;
  if (plan.master_port == 0) {
    // Rank 0 serves the rendezvous store on its own node's address: only this node can
    // tell which port is free there.
    if (std::find(plan.world_ranks.begin(), plan.world_ranks.end(), 0) == plan.world_ranks.end())
      return Status::InvalidArgument("no rendezvous port in a plan without rank 0");
    if (plan.framework == "xgboost") {
      TRAINTL_ASSIGN_OR_RETURN(tracker, StartTracker(plan));
      plan.master_port = tracker->port();
    } else {
      plan.master_port = PickFreePort(plan.master_addr);
      if (plan.master_port == 0)
        return Status::Unavailable("no free port for the rendezvous on " + plan.master_addr);
    }
  }
  // Every directory is created or entered by common/safe_fs.h, never through a symlink a
  // worker (or anybody but root and the daemon's user) planted: the data dir and the
  // storage path are configuration (trusted prefix); what lies below them for this job is
  // the daemon's or the worker's own.
  TRAINTL_ASSIGN_OR_RETURN(SafeDir data_dir, MakeTrustedDirs(options_.data_dir, 0711));
  // 0711: a worker running as another user (--worker-user) must reach its context file
  // here, but neither list nor change anything (the daemon writes the logs here). Only
  // root and the daemon's user may own these.
  TRAINTL_ASSIGN_OR_RETURN(
      SafeDir dir,
      MakeDirsBelow(data_dir, "jobs/" + plan.job_id + "/attempt_" + std::to_string(plan.attempt),
                    0711, OwnerPolicy{}));
  // The trial dir, .staging and the attempt's staging dir are the worker's: given to it as
  // soon as they are made (GiveToWorker), never by path later. .staging too: the head
  // removes an ended attempt's staging dir with the worker's file access.
  const OwnerPolicy owners = JobOwners();
  TRAINTL_ASSIGN_OR_RETURN(SafeDir trial_dir, MakeTrialDir(plan));
  TRAINTL_RETURN_IF_ERROR(GiveToWorker(trial_dir));
  TRAINTL_ASSIGN_OR_RETURN(SafeDir staging_root, MakeWorkerDirBelow(trial_dir, ".staging"));
  // Earlier attempts' staging areas are normally removed by the head when they end; after
  // a daemon was killed nobody did, and they would pile up (a node may also not share the
  // head's file system).
  if (Status st = RemoveStaleStaging(staging_root, plan.attempt); !st.ok()) {
    LOG_WARN << "job " << plan.job_id
             << ": cannot remove staging of earlier attempts: " << st.message();
  }
  // The row index of the node's CSV and JSON Lines files, shared by its jobs (index_cache.h):
  // the workers' own, as their trial dirs are. Only a cache: one that another account owns
  // (left by an earlier --worker-user) is removed and made again; where none can be had,
  // each job keeps its index in its trial dir.
  std::string index_dir = DataIndexDir();
  auto make_index = [&]() -> Result<SafeDir> {
    TRAINTL_ASSIGN_OR_RETURN(SafeDir d, MakeDirsBelow(data_dir, "data_index", 0700, owners));
    TRAINTL_RETURN_IF_ERROR(GiveToWorker(d));
    return d;
  };
  auto made = make_index();
  if (!made.ok() && RemoveAllAt(data_dir, "data_index").ok()) {
    LOG_INFO << "job " << plan.job_id << ": removed " << index_dir << " ("
             << made.status().message() << "); making it again";
    made = make_index();
  }
  if (!made.ok()) {
    LOG_WARN << "job " << plan.job_id << ": no shared row index: " << made.status().message();
    index_dir.clear();
  }
  const std::string staging = StagingDir(plan.trial_dir, plan.attempt);
  TRAINTL_RETURN_IF_ERROR(
      MakeWorkerDirBelow(staging_root, "attempt_" + std::to_string(plan.attempt)).status());

  // A python or command job's working_dir, unpacked once per content for every job and
  // attempt that ships it (read-only by convention: jobs write to their trial dir).
  std::string working_dir;
  if (plan.entry_kind != "library" && !plan.library_sha256.empty()) {
    auto unpacked =
        EnsureUnpacked(options_.data_dir + "/workdirs", plan.library_sha256, plan.library_path);
    if (!unpacked.ok()) {
      return Status(unpacked.status().code(),
                    "cannot unpack the working_dir: " + unpacked.status().message());
    }
    working_dir = *unpacked;
  }
  if (plan.framework == "tensorflow") TRAINTL_RETURN_IF_ERROR(CheckWorkerPorts(plan));

  const int launched = static_cast<int>(plan.world_ranks.size());
  // A replacement rank keeps the place on the node of the rank it replaces.
  const bool placed = !plan.local_ranks.empty();
  const int local_world = placed ? plan.local_world_size : launched;
  for (int i = 0; i < launched; ++i) {
    const int rank = plan.world_ranks[i];
    const int local = placed ? plan.local_ranks[i] : i;
    RankContext ctx;
    ctx.job_id = plan.job_id;
    ctx.job_name = plan.job_name;
    ctx.attempt = plan.attempt;
    ctx.world_rank = rank;
    ctx.world_size = plan.world_size;
    ctx.local_rank = local;
    ctx.local_world_size = local_world;
    ctx.node_rank = plan.node_rank;
    ctx.entry_kind = plan.entry_kind;
    if (plan.entry_kind == "library") ctx.library = plan.library_path;
    ctx.library_name = plan.library_name;
    ctx.function = plan.function;
    ctx.python = plan.python;
    ctx.command = plan.command;
    ctx.working_dir = working_dir;
    ctx.framework = plan.framework;
    if (plan.framework == "tensorflow") ctx.tf_config = TfConfig(plan, rank);
    ctx.config = plan.config;
    if (!plan.restored_from.empty()) ctx.checkpoint_dir = plan.restored_from;
    ctx.trial_dir = plan.trial_dir;
    ctx.data_index_dir = index_dir;
    ctx.staging_dir = staging;
    ctx.master_addr = plan.master_addr;
    ctx.master_port = plan.master_port;
    ctx.collective_timeout_s = plan.collective_timeout_s;
    ctx.use_gpu = plan.use_gpu;
    ctx.hold_reports = plan.hold_reports;
    ctx.peer_recovery = plan.peer_recovery;
    ctx.regroup_generation = plan.regroup_generation;
    ctx.group_ranks = plan.group_ranks;
    ctx.datasets = plan.datasets;
    const nlohmann::json lease = pool_->LeaseContext(plan.job_id, plan.attempt, rank);
    if (lease.is_object()) {
      ctx.lease_fd = lease.value("fd", -1);
      ctx.lease_ms = lease.value("ms", 0);
      if (lease.contains("cgroup_kill") && lease["cgroup_kill"].is_string())
        ctx.cgroup_kill = lease["cgroup_kill"].get<std::string>();
    }
    const std::string ctx_name = "rank_" + std::to_string(rank) + ".context.json";
    const std::string ctx_path = AttemptDir(plan.job_id, plan.attempt) + "/" + ctx_name;
    TRAINTL_RETURN_IF_ERROR(WriteFileAtomicAt(dir, ctx_name, RankContextToJson(ctx).dump(2), 0600));

    WorkerLaunch l;
    l.job_id = plan.job_id;
    l.attempt = plan.attempt;
    l.rank = rank;
    l.context_path = ctx_path;
    l.log_path = LogPath(plan.job_id, plan.attempt, rank);
    l.workdir = plan.trial_dir;
    // A command's program is a new process anyway: what a warm worker preloaded would only
    // sit unused, and taking one starts a replacement loading beside the program.
    l.warm_ok = plan.entry_kind != "command";
    l.generation = plan.regroup_generation;
    // The environment is exactly what the runtime and the spec set.
    l.env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    l.env["LANG"] = "C.UTF-8";
    for (const auto& name : options_.passthrough_env) {
      if (const char* v = std::getenv(name.c_str())) l.env[name] = v;
    }
    l.env["OMP_NUM_THREADS"] =
        std::to_string(std::max(1, static_cast<int>(std::floor(plan.cpus_per_worker))));
    for (const auto& [k, v] : plan.user_env) l.env[k] = v;
    if (plan.entry_kind != "library") {
      for (auto& [k, v] : LauncherEnvironment(ctx)) l.env[k] = std::move(v);
    }
    for (auto& [k, v] : FrameworkEnvironment(ctx)) l.env[k] = std::move(v);
    for (auto& [k, v] : RankEnvironment(ctx)) l.env[k] = std::move(v);
    // Each worker sees only its devices (cuda:0 is then its first one).
    std::string devices;
    if (plan.use_gpu && local < static_cast<int>(plan.rank_gpus.size())) {
      for (int d : plan.rank_gpus[local])
        devices += (devices.empty() ? "" : ",") + std::to_string(d);
    }
    l.env["CUDA_VISIBLE_DEVICES"] = devices;

    Status st = pool_->Launch(l);
    if (!st.ok()) {
      pool_->StopAttempt(plan.job_id, plan.attempt);
      return Status(st.code(),
                    "rank " + std::to_string(rank) + " could not start: " + st.message());
    }
  }
  if (tracker != nullptr) KeepTracker(plan.job_id, plan.attempt, std::move(tracker));
  return plan.master_port;
}

}  // namespace traintl
