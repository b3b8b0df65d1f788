#include "daemon/head/job_manager.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "common/crypto.h"
#include "common/file_util.h"
#include "common/logging.h"
#include "daemon/head/checkpoint_merge.h"

namespace traintl {

namespace asio = boost::asio;
using nlohmann::json;

namespace {

// A free TCP port on `address` for rank 0's TCPStore. The port is released before the
// worker binds it; the window is small and a clash fails the attempt, which restarts.
int PickFreePort(const std::string& address) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = 0;
  if (::inet_pton(AF_INET, address.c_str(), &sa.sin_addr) != 1)
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int port = 0;
  socklen_t len = sizeof sa;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0) {
    port = ntohs(sa.sin_port);
  }
  ::close(fd);
  return port;
}

std::string SignalName(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string LastLine(const std::string& text) {
  size_t end = text.find_last_not_of("\n ");
  if (end == std::string::npos) return "";
  size_t start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1, end + 1 - (start == std::string::npos ? 0 : start + 1));
}

}  // namespace

JobManager::JobManager(asio::io_context& io, JobManagerOptions options, StateStore* store,
                       CommandLog* log, Agent* agent)
    : io_(io),
      options_(std::move(options)),
      store_(store),
      log_(log),
      agent_(agent),
      timer_(io) {}

void JobManager::Start() {
  timer_.expires_after(options_.tick);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || shutting_down_) return;
    Tick();
    Start();
  });
}

void JobManager::Shutdown() {
  shutting_down_ = true;
  timer_.cancel();
}

void JobManager::SetLeader(bool leader) {
  if (leader == leader_) return;
  leader_ = leader;
  LOG_INFO << (leader ? "this node is now the head" : "this node is no longer the head");
  if (!leader) {
    // Another head may start these jobs again: never let two attempts run at once.
    for (auto& [id, a] : active_) {
      a.ending = true;
      agent_->Stop(a.job_id, a.attempt);
    }
  }
  ScheduleTick();
}

void JobManager::ScheduleTick() {
  if (tick_queued_) return;
  tick_queued_ = true;
  asio::post(io_, [this] {
    tick_queued_ = false;
    Tick();
  });
}

PendingJob JobManager::ToPending(const JobRecord& job, const JobSpec& spec) {
  PendingJob p;
  p.job_id = job.id;
  p.num_workers = spec.num_workers;
  p.per_worker = spec.resources_per_worker;
  p.strategy = spec.placement_strategy;
  return p;
}

Status JobManager::CheckFeasible(const JobSpec& spec) const {
  NodeSnapshot node;
  node.node_id = options_.node_id;
  node.total = options_.node_resources;
  node.available = node.total;
  node.gpu_free.assign(static_cast<size_t>(options_.num_gpus), 1.0);
  JobRecord fake;
  return traintl::CheckFeasible({node}, ToPending(fake, spec));
}

ResourceMap JobManager::UsedResources() const {
  ResourceMap used;
  for (const auto& [id, a] : active_)
    for (const auto& [k, v] : a.per_worker) used[k] += v * a.world_size;
  return used;
}

void JobManager::Submit(Submission sub, std::function<void(Result<std::string>)> done) {
  JobRecord job;
  job.id = RandomHex(6);
  job.name = sub.spec.name;
  job.spec = JobSpecToJson(sub.spec).dump();
  job.priority = sub.spec.priority;
  job.library_sha256 = sub.library_sha256;
  job.library_path = sub.library_path;
  const std::string storage =
      sub.spec.storage_path.empty() ? options_.default_storage_path : sub.spec.storage_path;
  job.trial_dir = storage + "/" + job.name + "-" + job.id;
  job.submitted_at = commands::NowMs();
  log_->Propose(commands::SubmitJob(job, sub.submission_id),
                [this, done](Result<json> r) {
                  if (!r.ok()) {
                    done(r.status());
                    return;
                  }
                  done(r->value("job_id", std::string()));
                  ScheduleTick();
                });
}

void JobManager::Stop(const std::string& job_id, std::function<void(Result<std::string>)> done) {
  log_->Propose(commands::StopJob(job_id), [this, job_id, done](Result<json> r) {
    if (!r.ok()) {
      done(r.status());
      return;
    }
    if (r->value("active", false)) {
      auto it = active_.find(job_id);
      if (it != active_.end() && !it->second.stop_requested) {
        it->second.stop_requested = true;
        if (it->second.launched) BeginEnding(it->second);
      }
    }
    done(r->value("state", std::string()));
  });
}

void JobManager::Tick() {
  if (!leader_ || shutting_down_) return;
  std::vector<PendingJob> queue;
  std::map<std::string, std::pair<JobRecord, JobSpec>> pending;
  for (const JobRecord& job : store_->ListActiveJobs()) {
    auto it = active_.find(job.id);
    if (job.state == kJobPending) {
      if (it != active_.end()) continue;  // its start is being committed
      auto spec = ParseJobSpecText(job.spec);
      if (!spec.ok()) {
        LOG_ERROR << "job " << job.id << " has an unreadable spec: " << spec.status().message();
        continue;
      }
      queue.push_back(ToPending(job, *spec));
      pending.emplace(job.id, std::make_pair(job, std::move(*spec)));
      continue;
    }
    if (it == active_.end()) {
      // The store says an attempt runs, but no process of ours runs it: it was lost with
      // a previous daemon. End it so the job restarts from its latest checkpoint.
      if (reconciling_.count(job.id)) continue;
      reconciling_.insert(job.id);
      commands::AttemptOutcome o;
      o.state = kJobFailed;
      o.reason = "attempt " + std::to_string(job.attempt) +
                 " lost: its workers are gone (the daemon restarted)";
      LOG_WARN << "job " << job.id << ": " << o.reason;
      const std::string id = job.id;
      log_->Propose(commands::EndAttempt(job.id, job.attempt, o), [this, id](Result<json> r) {
        reconciling_.erase(id);
        if (!r.ok()) LOG_WARN << "could not end lost attempt of " << id << ": " << r.status().message();
        ScheduleTick();
      });
      continue;
    }
    if (job.stop_requested && !it->second.stop_requested) {
      it->second.stop_requested = true;
      if (it->second.launched) BeginEnding(it->second);
    }
  }
  if (queue.empty()) return;

  NodeSnapshot node;
  node.node_id = options_.node_id;
  node.address = options_.node_address;
  node.total = options_.node_resources;
  node.available = node.total;
  for (const auto& [k, v] : UsedResources()) node.available[k] -= v;
  node.gpu_free.assign(static_cast<size_t>(options_.num_gpus), 1.0);
  for (const auto& [id, a] : active_) {
    const double per = a.per_worker.count("GPU") ? a.per_worker.at("GPU") : 0;
    for (const auto& devices : a.rank_gpus)
      for (int d : devices)
        if (d >= 0 && d < options_.num_gpus)
          node.gpu_free[d] -= per < 1 ? per : 1.0;
  }
  ScheduleResult result = Schedule({node}, queue);
  for (const auto& p : result.placements) {
    auto& [job, spec] = pending.at(p.job_id);
    StartAttempt(job, spec, p);
  }
  for (const auto& [id, reason] : result.waiting) {
    const JobRecord& job = pending.at(id).first;
    if (job.pending_reason == reason || proposed_reason_[id] == reason) continue;
    proposed_reason_[id] = reason;
    log_->Propose(commands::SetPendingReason(id, reason), [](Result<json>) {});
  }
}

std::string JobManager::ResolveRestore(const JobRecord& job, const JobSpec& spec) const {
  if (auto latest = store_->LatestCheckpoint(job.id)) return latest->path;
  const std::string& from = spec.resume_from_checkpoint;
  if (from.empty()) return "";
  if (from.rfind("job:", 0) == 0) {
    auto other = store_->ResolveJobId(from.substr(4));
    if (!other.ok()) {
      LOG_WARN << "job " << job.id << ": resume_from_checkpoint " << from << ": "
               << other.status().message();
      return "";
    }
    auto ck = store_->LatestCheckpoint(*other);
    return ck ? ck->path : "";
  }
  return from;
}

void JobManager::StartAttempt(const JobRecord& job, const JobSpec& spec,
                              const Placement& placement) {
  ActiveAttempt a;
  a.job_id = job.id;
  a.attempt = job.attempt + 1;
  a.world_size = static_cast<int>(placement.rank_nodes.size());
  a.trial_dir = job.trial_dir;
  a.per_worker = spec.resources_per_worker;
  a.rank_gpus = placement.rank_gpus;
  active_[job.id] = a;  // reserves the resources while start_attempt commits
  proposed_reason_.erase(job.id);
  const std::string restored = ResolveRestore(job, spec);
  log_->Propose(commands::StartAttempt(job.id, a.attempt, restored),
                [this, job, spec, restored](Result<json> r) {
                  if (!r.ok()) {
                    LOG_WARN << "job " << job.id << ": start not committed: "
                             << r.status().message();
                    active_.erase(job.id);
                    ScheduleTick();
                    return;
                  }
                  LaunchCommitted(job.id, job, spec, restored);
                });
}

void JobManager::LaunchCommitted(const std::string& job_id, const JobRecord& job,
                                 const JobSpec& spec, const std::string& restored_from) {
  auto it = active_.find(job_id);
  if (it == active_.end()) return;
  ActiveAttempt& a = it->second;
  a.launched = true;
  if (a.stop_requested || !leader_ || shutting_down_) {
    commands::AttemptOutcome o;
    o.state = a.stop_requested ? kJobStopped : kJobFailed;
    o.reason = a.stop_requested ? "stopped by user" : "the head stepped down before the start";
    EndAttemptNow(a, o);
    return;
  }
  NodeAttemptPlan plan;
  plan.job_id = job_id;
  plan.job_name = job.name;
  plan.attempt = a.attempt;
  plan.world_size = a.world_size;
  plan.node_rank = 0;
  for (int r = 0; r < a.world_size; ++r) {
    plan.world_ranks.push_back(r);
    plan.rank_gpus.push_back(r < static_cast<int>(a.rank_gpus.size()) ? a.rank_gpus[r]
                                                                       : std::vector<int>{});
  }
  plan.library_path = job.library_path;
  plan.function = spec.function;
  plan.config = spec.train_loop_config;
  plan.checkpoint_dir = restored_from;
  plan.trial_dir = job.trial_dir;
  plan.master_addr = options_.node_address;
  plan.master_port = PickFreePort(options_.node_address);
  plan.collective_timeout_s = options_.collective_timeout_s;
  plan.use_gpu = spec.use_gpu;
  json datasets = json::object();
  for (const auto& [name, d] : spec.datasets)
    datasets[name] = {{"uri", d.uri}, {"format", d.format}, {"split", d.split}};
  plan.datasets = datasets;
  plan.user_env = spec.env;
  auto cpu = spec.resources_per_worker.find("CPU");
  plan.cpus_per_worker = cpu == spec.resources_per_worker.end() ? 1 : cpu->second;
  LOG_INFO << "job " << job_id << ": starting attempt " << a.attempt << " with " << a.world_size
           << " worker(s)" << (restored_from.empty() ? "" : " from " + restored_from);
  Status st = agent_->Launch(plan);
  if (!st.ok()) {
    commands::AttemptOutcome o;
    o.state = kJobFailed;
    o.reason = st.message();
    a.failure = o;
    BeginEnding(a);
    MaybeFinishAttempt(job_id);
  }
}

JobManager::ActiveAttempt* JobManager::Find(const std::string& job_id, int attempt) {
  auto it = active_.find(job_id);
  if (it == active_.end() || it->second.attempt != attempt) return nullptr;
  return &it->second;
}

void JobManager::OnWorkerHello(const std::string& job_id, int attempt, int rank) {
  ActiveAttempt* a = Find(job_id, attempt);
  if (a == nullptr) return;
  a->hellos.insert(rank);
  log_->Propose(commands::WorkerEvent(job_id, attempt, rank, "started", ""), [](Result<json>) {});
  if (static_cast<int>(a->hellos.size()) == a->world_size && !a->ending)
    log_->Propose(commands::JobRunning(job_id, attempt), [](Result<json>) {});
}

void JobManager::OnWorkerReport(const std::string& job_id, int attempt, int rank, int seq,
                                const json& metrics, const std::string& checkpoint) {
  ActiveAttempt* a = Find(job_id, attempt);
  if (a == nullptr) return;
  std::string ckpt = checkpoint;
  if (!ckpt.empty()) {
    // The directory's files are about to be moved: only accept this attempt's staging area.
    const std::string staging = Agent::StagingDir(a->trial_dir, attempt) + "/";
    if (ckpt.rfind(staging, 0) != 0 || ckpt.find("/..") != std::string::npos) {
      LOG_WARN << "job " << job_id << " rank " << rank << " reported a checkpoint outside "
               << staging << "; ignored";
      ckpt.clear();
    }
  }
  // The worker copied its files durably before reporting, so it may go on at once.
  agent_->Ack(job_id, attempt, rank, seq);
  a->reports[seq][rank] = RankReport{metrics, ckpt};
  if (static_cast<int>(a->reports[seq].size()) == a->world_size) CommitReport(*a, seq);
}

void JobManager::CommitReport(ActiveAttempt& a, int seq) {
  auto& ranks = a.reports[seq];
  json metrics = ranks.count(0) ? ranks[0].metrics : json::object();
  std::map<int, std::string> dirs;
  for (const auto& [rank, rep] : ranks)
    if (!rep.checkpoint.empty()) dirs[rank] = rep.checkpoint;
  a.reports.erase(seq);
  log_->Propose(commands::Report(a.job_id, a.attempt, seq, metrics), [](Result<json>) {});
  if (dirs.empty()) return;
  auto merged = MergeCheckpoint(a.trial_dir, a.attempt, seq, dirs, metrics);
  if (!merged.ok()) {
    LOG_ERROR << "job " << a.job_id << ": checkpoint " << seq
              << " could not be committed: " << merged.status().message();
    if (!a.failure) {
      commands::AttemptOutcome o;
      o.state = kJobFailed;
      o.reason = "checkpoint " + std::to_string(seq) +
                 " could not be committed: " + merged.status().message();
      a.failure = o;
    }
    BeginEnding(a);
    return;
  }
  const std::string trial_prefix = a.trial_dir + "/checkpoint_";
  log_->Propose(commands::CommitCheckpoint(a.job_id, a.attempt, seq, *merged, metrics),
                [trial_prefix](Result<json> r) {
                  if (!r.ok()) return;
                  // Records go first, files after: a crash in between leaves only garbage.
                  for (const auto& p : r->value("deleted", json::array())) {
                    if (!p.is_string()) continue;
                    const std::string path = p.get<std::string>();
                    if (path.rfind(trial_prefix, 0) == 0 && path.find("/..") == std::string::npos)
                      RemoveAll(path);
                  }
                });
}

commands::AttemptOutcome JobManager::DescribeFailure(const ActiveAttempt& a,
                                                     const WorkerExit& e) const {
  commands::AttemptOutcome o;
  o.state = kJobFailed;
  o.failed_rank = e.rank;
  o.exit_code = e.exit_code;
  o.signal = e.signal;
  o.log_tail = TailFile(agent_->LogPath(a.job_id, a.attempt, e.rank), options_.log_tail_bytes);
  const std::string r = "rank " + std::to_string(e.rank);
  if (e.signal) {
    o.reason = r + " was killed by " + SignalName(*e.signal);
  } else if (e.exit_code && *e.exit_code == 3) {
    std::string why = e.done_error.empty() ? LastLine(o.log_tail) : e.done_error;
    o.reason = r + " could not load the training library: " + why;
    o.retryable = false;
  } else if (!e.done_error.empty()) {
    o.reason = r + " failed: " + e.done_error;
  } else {
    o.reason = r + " exited with code " + std::to_string(e.exit_code.value_or(-1));
  }
  if (!e.retryable) o.retryable = false;
  return o;
}

void JobManager::OnWorkerExit(const WorkerExit& e) {
  ActiveAttempt* a = Find(e.job_id, e.attempt);
  if (a == nullptr) return;
  a->exits[e.rank] = e;
  std::string detail = e.signal ? SignalName(*e.signal)
                                : "exit code " + std::to_string(e.exit_code.value_or(-1));
  log_->Propose(commands::WorkerEvent(e.job_id, e.attempt, e.rank, "exited", detail),
                [](Result<json>) {});
  const bool clean = e.exit_code && *e.exit_code == 0 && !(e.done_seen && !e.done_ok);
  if (!clean) {
    const bool expected = a->ending && e.stopped_by_agent;
    if (!a->failure && !expected) a->failure = DescribeFailure(*a, e);
    BeginEnding(*a);
  }
  MaybeFinishAttempt(e.job_id);
}

void JobManager::BeginEnding(ActiveAttempt& a) {
  if (a.ending) return;
  a.ending = true;
  agent_->Stop(a.job_id, a.attempt);
}

void JobManager::MaybeFinishAttempt(const std::string& job_id) {
  auto it = active_.find(job_id);
  if (it == active_.end()) return;
  ActiveAttempt& a = it->second;
  if (!a.launched || a.end_proposed) return;
  // Wait for every process this node started for the attempt (after a launch failure,
  // some ranks never started and never exit).
  if (agent_->LiveWorkers(a.job_id, a.attempt) > 0) return;
  commands::AttemptOutcome o;
  if (a.stop_requested) {
    o.state = kJobStopped;
    o.reason = "stopped by user";
  } else if (a.failure) {
    o = *a.failure;
  } else if (static_cast<int>(a.exits.size()) == a.world_size) {
    o.state = kJobSucceeded;
  } else {
    return;
  }
  EndAttemptNow(a, o);
}

void JobManager::EndAttemptNow(ActiveAttempt& a, commands::AttemptOutcome outcome) {
  a.end_proposed = true;
  const std::string job_id = a.job_id;
  const std::string trial_dir = a.trial_dir;
  const int attempt = a.attempt;
  LOG_INFO << "job " << job_id << ": attempt " << attempt << " ended " << outcome.state
           << (outcome.reason.empty() ? "" : ": " + outcome.reason);
  log_->Propose(commands::EndAttempt(job_id, attempt, outcome),
                [this, job_id, trial_dir, attempt](Result<json> r) {
                  if (!r.ok())
                    LOG_WARN << "job " << job_id << ": end of attempt not committed: "
                             << r.status().message();
                  RemoveAll(Agent::StagingDir(trial_dir, attempt));
                  CleanupUncommitted(trial_dir);
                  auto it = active_.find(job_id);
                  if (it != active_.end() && it->second.attempt == attempt) active_.erase(it);
                  ScheduleTick();
                });
}

}  // namespace traintl
