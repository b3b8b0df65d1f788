#include "daemon/head/job_manager.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "common/crypto.h"
#include "common/file_util.h"
#include "common/logging.h"
#include "daemon/consensus/disk_guard.h"
#include "daemon/head/checkpoint_merge.h"
#include "daemon/head/deletion_check.h"
#include "daemon/head/launch_plans.h"
#include "proto/launch_plan.h"

namespace traintl {

namespace asio = boost::asio;
using nlohmann::json;

cmd::JobPolicy PolicyOf(const JobSpec& spec) {
  cmd::JobPolicy p;
  p.max_failures = spec.max_failures;
  p.num_to_keep = spec.num_to_keep;
  p.score_attribute = spec.checkpoint_score_attribute;
  p.score_max = spec.checkpoint_score_max;
  return p;
}

JobManager::JobManager(asio::io_context& io, JobManagerOptions options, StateStore* store,
                       CommandLog* log, Agent* agent)
    : io_(io),
      options_(std::move(options)),
      store_(store),
      log_(log),
      agent_(agent),
      run_id_(options_.run_id.empty() ? RandomHex(8) : options_.run_id),
      committer_(std::make_unique<CheckpointCommitter>(io, options_.worker_fs_identity,
                                                       options_.checkpoint_files)),
      timer_(io),
      kick_timer_(io),
      restart_timer_(io),
      clock_(options_.clock != nullptr ? options_.clock : SystemClock::Get()),
      queue_([this](const std::string& job_id) {
        auto job = store_->GetJob(job_id);
        return job ? job->definition : std::string();
      }),
      registry_(options_.node_loss_timeout),
      rank_metrics_([this] {
        RankMetricsOptions o;
        o.per_rank = options_.metrics_per_rank;
        return o;
      }()) {}

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
  kick_timer_.cancel();
  restart_timer_.cancel();
}

void JobManager::SetHead(bool head) {
  if (head == is_head_) return;
  is_head_ = head;
  registry_.Clear();
  stale_stopped_.clear();
  head_since_ = clock_->Now();
  settle_pending_ = options_.settle.count() > 0;
  queue_.Clear();
  voter_address_proposed_.clear();
  if (head) {
    RefreshSelf();
    RecordVoterAddress(options_.raft_id, options_.api_address);
  }
  // A leader change is an operator's concern (journalctl -p warning), not just a detail.
  LOG_WARN << (head ? "this node is now the head" : "this node is no longer the head");
  if (!head) {
    // Another head may start these jobs again: never let two attempts run at once.
    for (auto& [id, a] : active_) Run(a, a.tracker.OnStepDown());
  }
  ScheduleTick();
}

void JobManager::ScheduleTick(bool full) {
  if (full) full_pass_due_ = true;
  if (tick_queued_) return;
  tick_queued_ = true;
  const auto since = std::chrono::steady_clock::now() - last_tick_;
  if (since >= kMinTickGap) {
    asio::post(io_, [this] {
      tick_queued_ = false;
      Tick();
    });
    return;
  }
  kick_timer_.expires_after(kMinTickGap - since);
  kick_timer_.async_wait([this](const boost::system::error_code& ec) {
    tick_queued_ = false;
    if (!ec) Tick();
  });
}

Status JobManager::CheckFeasible(const JobSpec& spec) const {
  return traintl::CheckFeasible(Snapshots(SnapshotView::kEverything), ToPending("", spec));
}

ResourceMap JobManager::UsedResources() const {
  ResourceMap used;
  for (const auto& [id, a] : active_)
    for (const auto& [k, v] : a.per_worker)
      used[k] += v * static_cast<double>(a.tracker.active().size());
  return used;
}

void JobManager::Submit(Submission sub, std::function<void(Result<std::string>)> done) {
  JobRecord job;
  job.id = RandomHex(6);
  job.name = sub.spec.name;
  job.priority = sub.spec.priority;
  job.library_sha256 = sub.library_sha256;
  job.library_path = sub.library_path;
  const std::string storage =
      sub.spec.storage_path.empty() ? options_.default_storage_path : sub.spec.storage_path;
  job.trial_dir = sub.trial_dir.empty() ? storage + "/" + job.name + "-" + job.id : sub.trial_dir;
  job.submitted_at = commands::NowMs();
  job.policy = PolicyOf(sub.spec);
  std::string command = commands::SubmitJob(job, sub.spec, sub.submission_id, std::move(sub.trial));
  auto spec = std::make_shared<const JobSpec>(std::move(sub.spec));
  log_->Propose(std::move(command),
                Answered<cmd::SubmitJobAnswer>(
                    [this, done, spec, job_id = job.id](Result<cmd::SubmitJobAnswer> r) {
                      if (!r.ok()) {
                        done(r.status());
                        return;
                      }
                      const std::string id = r->job_id;
                      // The next pass need not read back the definition this head already has (a
                      // repeated submission_id answers with an older job, whose definition the pass
                      // reads).
                      queue_.Submitted(id, id == job_id && is_head_ ? spec : nullptr);
                      done(id);
                      ScheduleTick(/*full=*/false);
                    }));
}

void JobManager::Stop(const std::string& job_id, const std::string& reason,
                      std::function<void(Result<std::string>)> done) {
  log_->Propose(
      commands::StopJob(job_id, reason),
      Answered<cmd::StopJobAnswer>([this, job_id, reason, done](Result<cmd::StopJobAnswer> r) {
        if (!r.ok()) {
          done(r.status());
          return;
        }
        if (r->active) {
          auto it = active_.find(job_id);
          if (it != active_.end()) Run(it->second, it->second.tracker.OnStopRequested(reason));
        }
        if (IsTerminalJobState(r->state) && listener_ != nullptr) listener_->OnJobEnded(job_id);
        done(r->state);
      }));
}

void JobManager::Delete(const std::string& job_id, bool remove_files,
                        std::function<void(Result<cmd::DeleteJobAnswer>)> done) {
  auto job = store_->GetJob(job_id, /*with_spec=*/false);
  if (Status st = CheckDeletion(*store_, {job_id}, remove_files && job ? job->trial_dir : "");
      !st.ok()) {
    done(st);
    return;
  }
  log_->Propose(commands::DeleteJob(job_id),
                Answered<cmd::DeleteJobAnswer>(
                    [this, job_id, remove_files, done](Result<cmd::DeleteJobAnswer> r) {
                      if (r.ok()) {
                        std::vector<std::string> dirs;
                        if (remove_files && !r->trial_dir.empty()) dirs.push_back(r->trial_dir);
                        ForgetDeleted({job_id}, std::move(dirs));
                        LOG_INFO << "job " << job_id << " deleted"
                                 << (remove_files ? " with its trial dir " + r->trial_dir : "");
                      }
                      done(std::move(r));
                    }));
}

void JobManager::ForgetDeleted(const std::vector<std::string>& job_ids,
                               std::vector<std::string> dirs) {
  // Records first, files after: a crash between leaves only garbage.
  for (const auto& id : job_ids) {
    rank_metrics_.Forget(id);
    dirs.push_back(agent_->JobDir(id));
  }
  committer_->RemoveDirs(std::move(dirs));
}

void JobManager::Tick() {
  if (!is_head_ || shutting_down_) return;
  last_tick_ = std::chrono::steady_clock::now();
  const auto now = clock_->Now();
  RefreshSelf();
  for (const auto& id : registry_.ExpireLost(now)) OnNodeLost(id);
  StopStaleLocal();
  agent_->SweepTrackers();
  const bool settling = now - head_since_ < options_.settle;
  if (settle_pending_) {
    // Jobs that ran before wait out the settle period: look again once it is over.
    full_pass_due_ = true;
    settle_pending_ = settling;
  }
  DiagnoseProgress();
  for (auto& [id, a] : active_) {
    if (a.held.empty()) continue;
    AckHeld(a, [&](const ActiveAttempt::HeldReport& h) {
      return now - h.since >= options_.max_report_hold;
    });
  }
  if (full_pass_due_ || last_tick_ - last_full_pass_ >= kFullPassInterval) {
    FullPass(settling);
  } else if (queue_.has_fresh()) {
    FreshPass();
  }
}

JobQueue::PassInput JobManager::PassInputNow(bool settling) const {
  JobQueue::PassInput in;
  in.nodes = [this] { return Snapshots(SnapshotView::kAvailableNow); };
  in.now = std::chrono::steady_clock::now();  // restart holds are timers' deadlines
  in.settling = settling;
  in.has_live_workers = [this](const std::string& id) { return registry_.HasLiveWorkersOf(id); };
  return in;
}

void JobManager::FullPass(bool settling) {
  full_pass_due_ = false;
  last_full_pass_ = std::chrono::steady_clock::now();
  const std::vector<JobRecord> jobs = store_->ListActiveJobs(/*with_spec=*/false);
  std::vector<JobRecord> pending;
  for (const JobRecord& job : jobs) {
    auto it = active_.find(job.id);
    if (job.state == kJobPending) {
      if (it == active_.end()) pending.push_back(job);  // else its start is being committed
      continue;
    }
    if (it == active_.end()) {
      ReconcileLost(job);
      continue;
    }
    if (job.stop_requested) {
      Run(it->second, it->second.tracker.OnStopRequested(job.message));
    } else {
      EnforceTimeLimit(job, it->second);
    }
  }
  Carry(queue_.FullPass(pending, PassInputNow(settling)));
  GrowElastic();
  ExpireFinishedJobs();
}

void JobManager::GrowElastic() {
  if (!is_head_ || shutting_down_) return;
  for (auto& [id, a] : active_) {
    const std::vector<int> missing = a.tracker.Missing();
    if (missing.empty()) continue;
    const std::string node = NodeWithRoom(a);
    if (node.empty()) continue;  // no room yet: the next pass looks again
    Run(a, a.tracker.OnCapacity(missing.front(), node));
    return;  // one rank per pass: the snapshot changed
  }
}

std::string JobManager::NodeWithRoom(const ActiveAttempt& a) const {
  PendingJob one;
  one.job_id = a.job_id();
  one.num_workers = 1;
  one.per_worker = a.per_worker;
  ScheduleResult r = Schedule(Snapshots(SnapshotView::kAvailableNow), {one});
  return r.placements.empty() ? "" : r.placements[0].rank_nodes[0];
}

void JobManager::Relocate(ActiveAttempt& a, const AttemptTracker::Relocate& r) {
  // Place every lost rank first (each on a node with room now), so that the survivors'
  // regroup names where the group meets.
  std::vector<std::pair<int, std::string>> placed;
  for (int rank : r.ranks) {
    const std::string node = NodeWithRoom(a);
    if (node.empty()) {
      // The attempt restarts; none of the lost ranks is started, so each counts as gone.
      for (int lost : r.ranks) FailReplacement(a, lost, "no node has room for it");
      return;
    }
    a.tracker.MoveRank(rank, node, r.generation);
    placed.emplace_back(rank, node);
  }
  const std::vector<int> ranks(a.tracker.active().begin(), a.tracker.active().end());
  const events::Regroup regroup = GroupRegroup(a, r.generation, ranks);
  std::set<std::string> nodes;
  for (int q : ranks)
    if (std::find(r.ranks.begin(), r.ranks.end(), q) == r.ranks.end())
      nodes.insert(a.rank_nodes()[static_cast<size_t>(q)]);
  for (const auto& n : nodes) {
    if (std::unique_ptr<NodeClient> client = ClientFor(n))
      client->Regroup(a.job_id(), a.attempt(), regroup);
  }
  for (const auto& [rank, node] : placed) {
    LOG_INFO << "job " << a.job_id() << " attempt " << a.attempt() << ": rank " << rank
             << " lost with its node starts again on node " << node
             << " (peer recovery, generation " << r.generation << ")";
    LaunchRank(a, rank, node, RankPlan(a, rank, node, regroup));
  }
}

void JobManager::ExpireFinishedJobs() {
  if (expiring_ > 0 || (options_.retain_jobs <= 0 && options_.retain_for.count() <= 0)) return;
  // The query ranks every finished job: not on every pass.
  const auto now = std::chrono::steady_clock::now();
  if (now - last_expiry_ < kRetentionInterval) return;
  last_expiry_ = now;
  constexpr size_t kBatch = 100;  // a backlog (a lowered limit) goes over several passes
  const int64_t cutoff =
      options_.retain_for.count() > 0 ? commands::NowMs() - options_.retain_for.count() : 0;
  for (const std::string& id : store_->ExpiredJobs(options_.retain_jobs, cutoff, kBatch)) {
    ++expiring_;
    Delete(id, /*remove_files=*/false, [this, id](Result<cmd::DeleteJobAnswer> r) {
      --expiring_;
      if (!r.ok()) LOG_WARN << "retention: deleting job " << id << ": " << r.status().message();
    });
  }
}

void JobManager::EnforceTimeLimit(const JobRecord& job, ActiveAttempt& a) {
  if (a.time_limit_s <= 0 || a.time_limit_hit || !job.started_at) return;
  const int64_t ran_ms = commands::NowMs() - *job.started_at;
  if (ran_ms < static_cast<int64_t>(a.time_limit_s * 1000)) return;
  a.time_limit_hit = true;
  std::ostringstream reason;
  reason << "time limit of " << a.time_limit_s << " s (run_config.time_limit_s) reached";
  LOG_WARN << "job " << job.id << ": " << reason.str() << "; stopping it";
  const std::string id = job.id;
  Stop(id, reason.str(), [id](Result<std::string> r) {
    if (!r.ok())
      LOG_WARN << "job " << id << ": stopping at its time limit: " << r.status().message();
  });
}

void JobManager::ReconcileLost(const JobRecord& job) {
  // The store says an attempt runs, but no process of ours runs it: it was lost with a
  // previous daemon. End it so the job restarts from its latest checkpoint.
  if (reconciling_.count(job.id)) return;
  if (auto hold = reconcile_not_before_.find(job.id); hold != reconcile_not_before_.end()) {
    if (std::chrono::steady_clock::now() < hold->second) return;
    reconcile_not_before_.erase(hold);
  }
  reconciling_.insert(job.id);
  commands::AttemptOutcome o;
  o.state = kJobFailed;
  AttemptRecord record;
  record.attempt = job.attempt;
  if (auto stored = store_->GetAttempt(job.id, job.attempt)) record = *stored;
  o.reason = LostAttemptReason(record, options_.node_id, run_id_);
  LOG_WARN << "job " << job.id << ": " << o.reason;
  const std::string id = job.id;
  log_->Propose(commands::EndAttempt(job.id, job.attempt, o), [this, id](Result<json> r) {
    reconciling_.erase(id);
    if (!r.ok() && IsDiskFull(r.status())) {
      // The Raft node warned once; try again in a while, not on every pass.
      LOG_DEBUG << "could not end lost attempt of " << id << ": " << r.status().message();
      reconcile_not_before_[id] = std::chrono::steady_clock::now() + kDiskFullRetry;
      ArmRestartTimer();
      return;
    }
    if (!r.ok()) LOG_WARN << "could not end lost attempt of " << id << ": " << r.status().message();
    ScheduleTick();
  });
}

void JobManager::FreshPass() {
  std::vector<JobRecord> jobs;
  for (const auto& id : queue_.TakeFresh()) {
    if (active_.count(id)) continue;
    auto job = store_->GetJob(id, /*with_spec=*/false);
    if (job && job->state == kJobPending && job->attempt == 0) jobs.push_back(std::move(*job));
  }
  Carry(queue_.FreshPass(std::move(jobs), PassInputNow(/*settling=*/false)));
}

void JobManager::Carry(JobQueue::PassResult pass) {
  for (const auto& start : pass.starts) StartAttempt(start.job, *start.spec, start.placement);
  for (const auto& [id, reason] : pass.unreadable) {
    LOG_ERROR << "job " << id << ": " << reason;
    log_->Propose(commands::FailPendingJob(id, reason), [this, id = id](Result<json> r) {
      if (r.ok()) return;
      LOG_WARN << "could not fail job " << id << ": " << r.status().message();
      queue_.Forget(id);  // the next pass proposes it again
    });
  }
  if (pass.reasons.empty()) return;
  // Every changed reason of this pass in one command, not one per waiting job.
  std::string command = commands::SetPendingReasons(pass.reasons);
  log_->Propose(std::move(command), [this, changed = std::move(pass.reasons)](Result<json> r) {
    if (!r.ok()) queue_.ReasonsNotCommitted(changed);
  });
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
  AttemptPlacement where;
  where.job_id = job.id;
  where.attempt = job.attempt + 1;
  where.rank_nodes = placement.rank_nodes;
  where.local_node = options_.node_id;
  where.staging_prefix = Agent::StagingDir(job.trial_dir, where.attempt) + "/";
  where.max_replacements = spec.peer_recovery ? spec.max_failures : 0;
  // A command job has no run_steps: an elastic one restarts with what fits then.
  where.min_ranks =
      spec.elastic() && spec.entry_kind != EntrypointKind::kCommand ? spec.min_workers : 0;
  where.max_ranks = where.min_ranks > 0 ? spec.num_workers : 0;
  ActiveAttempt a(std::move(where));
  a.trial_dir = job.trial_dir;
  a.hold_reports = listener_ != nullptr && listener_->HoldsReports(job.id);
  a.per_worker = spec.resources_per_worker;
  a.rank_gpus = placement.rank_gpus;
  a.started = clock_->Now();
  a.restart_backoff_s = spec.restart_backoff_s;
  a.max_restart_backoff_s = spec.max_restart_backoff_s;
  a.time_limit_s = spec.time_limit_s;
  const int attempt = a.attempt();
  active_.erase(job.id);
  active_.emplace(job.id, std::move(a));  // reserves the resources while it commits
  queue_.Forget(job.id);
  const std::string restored = ResolveRestore(job, spec);
  // Where the ranks run, replicated: any daemon can then fetch a remote rank's log.
  std::map<std::string, std::string> addresses;
  for (const std::string& node : placement.rank_nodes) {
    const NodeStatus* n = registry_.Get(node);
    if (node == options_.node_id) {
      addresses[node] = options_.api_address;
    } else if (n != nullptr) {
      addresses[node] = n->api_address;
    }
  }
  log_->Propose(
      commands::StartAttempt(job.id, attempt, restored, options_.node_id, run_id_,
                             placement.rank_nodes, addresses),
      [this, job, spec, restored](Result<json> r) {
        if (!r.ok()) {
          active_.erase(job.id);
          if (IsDiskFull(r.status())) {
            // The Raft node warned once; retrying every pass would only flood the log.
            LOG_DEBUG << "job " << job.id << ": start not committed: " << r.status().message();
            queue_.HoldRestart(job.id, std::chrono::steady_clock::now() + kDiskFullRetry);
            ArmRestartTimer();
            return;
          }
          LOG_WARN << "job " << job.id << ": start not committed: " << r.status().message();
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
  Run(a, a.tracker.OnLaunched(is_head_ && !shutting_down_));
  if (a.tracker.end_proposed()) return;
  // A waiting job took its resources: whoever queues the next one may do so now.
  if (listener_ != nullptr) listener_->OnJobStarted(job_id);
  AttemptBasics basics;
  basics.attempt = a.attempt();
  basics.world_size = a.tracker.world_size();
  basics.library_path = job.library_path;
  if (blobs_ != nullptr && !job.library_sha256.empty()) {
    // The recorded path is the first head's; every node resolves the hash in its own store.
    if (auto local = blobs_->PathOf(job.library_sha256); local.ok()) basics.library_path = *local;
  }
  basics.restored_from = restored_from;
  basics.default_storage_path = options_.default_storage_path;
  const NodeStatus* master =
      registry_.Get(a.rank_nodes().empty() ? options_.node_id : a.rank_nodes()[0]);
  basics.master_addr = master != nullptr ? master->host : options_.host;
  basics.collective_timeout_s = options_.collective_timeout_s;
  if (spec.framework == "tensorflow") {
    for (const std::string& node : a.rank_nodes()) {
      const NodeStatus* n = registry_.Get(node);
      basics.rank_hosts.push_back(n != nullptr ? n->host : options_.host);
    }
    basics.worker_port_base = NextWorkerPortBase(worker_ports_end_, basics.world_size);
    worker_ports_end_ = basics.worker_port_base + basics.world_size;
  }
  // Nodes in the order of their first rank: rank 0's node first.
  NodeAttemptPlan base = BasePlan(job, spec, basics);
  base.hold_reports = a.hold_reports;
  std::vector<std::pair<std::string, NodeAttemptPlan>> plans =
      NodePlans(base, a.rank_nodes(), a.rank_gpus);
  if (spec.peer_recovery || spec.elastic()) {
    for (const auto& [node, plan] : plans) a.node_plans[node] = plan;
  }
  if (spec.elastic() || spec.peer_recovery) {
    // A port per rank it may ever have: where a rank serves its group's store when it is
    // the first of a shrunk group, or rank 0 started on another node.
    a.store_port_base = NextWorkerPortBase(worker_ports_end_, spec.num_workers);
    worker_ports_end_ = a.store_port_base + spec.num_workers;
  }
  LOG_INFO << "job " << job_id << ": starting attempt " << a.attempt() << " with "
           << a.tracker.world_size() << " worker(s) on " << plans.size() << " node(s)"
           << (restored_from.empty() ? "" : " from " + restored_from);
  const int attempt = a.attempt();
  auto fail_node = [this, job_id, attempt](const std::string& node, const std::string& why) {
    if (ActiveAttempt* at = Find(job_id, attempt))
      Run(*at, at->tracker.OnNodeStartFailed(node, why));
  };
  // Launches `node`'s plan with the rendezvous port `port` (0 for rank 0's node, which
  // chooses it); then `started(port)` runs, or `failed()` when it could not start. A node
  // of an attempt that is ending is not started (its ranks count as exited).
  using Started = std::function<void(int)>;
  using Failed = std::function<void()>;
  auto launch_node = [this, job_id, attempt, fail_node](const std::string& node,
                                                        NodeAttemptPlan plan, int port,
                                                        Started started, Failed failed) {
    ActiveAttempt* at = Find(job_id, attempt);
    if (at == nullptr) return;
    if (at->tracker.ending()) {
      fail_node(node, "the attempt ended before node " + node + " started its ranks");
      if (failed) failed();
      return;
    }
    plan.master_port = port;
    std::unique_ptr<NodeClient> client = ClientFor(node);
    if (client == nullptr) {
      fail_node(node, "node " + node + " is gone");
      if (failed) failed();
      return;
    }
    client->Launch(std::move(plan), [fail_node, node, started, failed](Result<int> chosen) {
      if (!chosen.ok()) {
        fail_node(node, chosen.status().message());
        if (failed) failed();
        return;
      }
      if (started) started(*chosen);
    });
  };
  // Rank 0's node first (master_port 0: it chooses the port), then the others with the
  // port it chose; when it cannot start, the others never do.
  auto [first, first_plan] = std::move(plans.front());
  std::vector<std::pair<std::string, NodeAttemptPlan>> rest(
      std::make_move_iterator(plans.begin() + 1), std::make_move_iterator(plans.end()));
  launch_node(
      first, std::move(first_plan), 0,
      [this, job_id, attempt, launch_node, rest](int port) {
        if (ActiveAttempt* at = Find(job_id, attempt)) at->master_port = port;
        for (const auto& [node, plan] : rest) launch_node(node, plan, port, nullptr, nullptr);
      },
      [fail_node, rest]() {
        for (const auto& [node, plan] : rest)
          fail_node(node, "not started: the node of rank 0 could not start");
      });
}

void JobManager::ReplaceRank(ActiveAttempt& a, const AttemptTracker::ReplaceRank& r) {
  const std::string& node = a.rank_nodes()[static_cast<size_t>(r.rank)];
  LOG_INFO << "job " << a.job_id() << " attempt " << a.attempt() << ": replacing rank " << r.rank
           << " on node " << node << " (peer recovery, generation " << r.generation << ")";
  // The survivors first: their collectives already fail, and they wait for this word
  // before they rendezvous again.
  std::set<std::string> nodes(a.rank_nodes().begin(), a.rank_nodes().end());
  events::Regroup regroup;
  regroup.generation = r.generation;
  if (a.tracker.active().size() < a.rank_nodes().size()) {
    // A shrunk elastic group: the replacement joins it where it meets now.
    regroup = GroupRegroup(a, r.generation,
                           std::vector<int>(a.tracker.active().begin(), a.tracker.active().end()));
  }
  for (const auto& n : nodes) {
    if (std::unique_ptr<NodeClient> client = ClientFor(n))
      client->Regroup(a.job_id(), a.attempt(), regroup);
  }
  auto plan = a.node_plans.find(node);
  if (!regroup.ranks.empty() || a.tracker.Moved(r.rank) || plan == a.node_plans.end()) {
    // Into a group of another size, or on a node the rank did not start on.
    LaunchRank(a, r.rank, node, RankPlan(a, r.rank, node, regroup));
  } else if (a.master_port == 0) {
    LaunchRank(a, r.rank, node, std::nullopt);
  } else {
    LaunchRank(a, r.rank, node, ReplacementPlan(plan->second, r.rank, a.master_port, r.generation));
  }
}

NodeAttemptPlan JobManager::RankPlan(const ActiveAttempt& a, int rank, const std::string& node,
                                     const events::Regroup& regroup) const {
  // The node's own plan when it ran ranks of the attempt, else any node's, as the only
  // rank there.
  NodeAttemptPlan plan;
  if (auto it = a.node_plans.find(node); it != a.node_plans.end()) {
    plan = it->second;
  } else if (!a.node_plans.empty()) {
    plan = a.node_plans.begin()->second;
    plan.node_rank = static_cast<int>(a.node_plans.size());
    plan.rank_gpus.clear();
  }
  const std::vector<int> ranks =
      regroup.ranks.empty() ? std::vector<int>(a.tracker.active().begin(), a.tracker.active().end())
                            : regroup.ranks;
  int local = 0;
  for (int r : ranks)
    if (r != rank && a.rank_nodes()[static_cast<size_t>(r)] == node) ++local;
  plan.world_size = std::max(plan.world_size, a.tracker.world_size());
  plan.world_ranks = {rank};
  plan.local_ranks = {local};
  plan.local_world_size = local + 1;
  plan.rank_gpus.resize(static_cast<size_t>(local + 1));
  const events::Regroup group =
      regroup.ranks.empty() ? GroupRegroup(a, regroup.generation, ranks) : regroup;
  plan.master_addr = group.store_addr;
  plan.master_port = group.store_port;
  plan.regroup_generation = regroup.generation;
  plan.group_ranks = ranks;
  return plan;
}

void JobManager::FailReplacement(ActiveAttempt& a, int rank, const std::string& why) {
  // Posted: the local agent answers within Launch, and callers run inside Run.
  boost::asio::post(io_, [this, job_id = a.job_id(), attempt = a.attempt(), rank, why] {
    if (ActiveAttempt* at = Find(job_id, attempt))
      Run(*at, at->tracker.OnReplacementFailed(rank, why));
  });
}

void JobManager::LaunchRank(ActiveAttempt& a, int rank, const std::string& node,
                            std::optional<NodeAttemptPlan> plan) {
  const std::string job_id = a.job_id();
  const int attempt = a.attempt();
  auto fail = [this, job_id, attempt, rank](const std::string& why) {
    if (ActiveAttempt* at = Find(job_id, attempt)) FailReplacement(*at, rank, why);
  };
  std::unique_ptr<NodeClient> client = ClientFor(node);
  if (client == nullptr || !plan || a.node_plans.empty()) {
    fail(client == nullptr ? "node " + node + " is gone" : "the attempt's rendezvous is unknown");
    return;
  }
  // The job's latest recorded checkpoint rather than the one the attempt started from,
  // which retention may have deleted since (num_to_keep): a loop that reads its
  // get_checkpoint() before run_steps takes a survivor's state would fail on it.
  if (auto latest = store_->LatestCheckpoint(job_id)) plan->restored_from = latest->path;
  client->Launch(std::move(*plan), [fail](Result<int> started) {
    if (!started.ok()) fail(started.status().message());
  });
}

events::Regroup JobManager::GroupRegroup(const ActiveAttempt& a, int generation,
                                         const std::vector<int>& ranks) const {
  events::Regroup regroup;
  regroup.generation = generation;
  regroup.ranks = ranks;
  // The group's first rank serves its store: the attempt's own rank 0 on master_port (its
  // store lives on), any other on the port reserved for that rank, on its node.
  const int first = ranks.front();
  const NodeStatus* host = registry_.Get(a.rank_nodes()[static_cast<size_t>(first)]);
  regroup.store_addr = host != nullptr ? host->host : options_.host;
  regroup.store_port =
      first == 0 && !a.tracker.Moved(0) ? a.master_port : a.store_port_base + first;
  return regroup;
}

void JobManager::Grow(ActiveAttempt& a, const AttemptTracker::Grow& g) {
  const events::Regroup regroup = GroupRegroup(a, g.generation, g.ranks);
  LOG_INFO << "job " << a.job_id() << " attempt " << a.attempt() << ": rank " << g.rank
           << " starts again on node " << g.node << " (elastic, generation " << g.generation << ", "
           << g.ranks.size() << " ranks)";
  std::set<std::string> nodes;
  for (int r : g.ranks)
    if (r != g.rank) nodes.insert(a.rank_nodes()[static_cast<size_t>(r)]);
  for (const auto& n : nodes) {
    if (std::unique_ptr<NodeClient> client = ClientFor(n))
      client->Regroup(a.job_id(), a.attempt(), regroup);
  }
  LaunchRank(a, g.rank, g.node, RankPlan(a, g.rank, g.node, regroup));
}

void JobManager::Shrink(ActiveAttempt& a, const AttemptTracker::Shrink& s) {
  const events::Regroup regroup = GroupRegroup(a, s.generation, s.ranks);
  std::string list;
  for (int r : s.ranks) list += (list.empty() ? "" : ",") + std::to_string(r);
  LOG_INFO << "job " << a.job_id() << " attempt " << a.attempt() << ": going on with ranks " << list
           << " (elastic, generation " << s.generation << ", store " << regroup.store_addr << ":"
           << regroup.store_port << ")";
  std::set<std::string> nodes;
  for (int r : s.ranks) nodes.insert(a.rank_nodes()[static_cast<size_t>(r)]);
  for (const auto& n : nodes) {
    if (std::unique_ptr<NodeClient> client = ClientFor(n))
      client->Regroup(a.job_id(), a.attempt(), regroup);
  }
}

JobManager::ActiveAttempt* JobManager::Find(const std::string& job_id, int attempt) {
  auto it = active_.find(job_id);
  if (it == active_.end() || it->second.attempt() != attempt) return nullptr;
  return &it->second;
}

void JobManager::Run(ActiveAttempt& a, AttemptTracker::Commands commands) {
  for (auto& c : commands) {
    if (const auto* stop = std::get_if<AttemptTracker::StopWorkers>(&c)) {
      StopWorkers(a, stop->urgent);
    } else if (auto* e = std::get_if<AttemptTracker::RecordWorkerEvent>(&c)) {
      log_->Propose(commands::WorkerEvent(a.job_id(), a.attempt(), e->rank, e->event, e->detail),
                    [](Result<json>) {});
    } else if (std::holds_alternative<AttemptTracker::MarkRunning>(c)) {
      log_->Propose(commands::JobRunning(a.job_id(), a.attempt()), [](Result<json>) {});
    } else if (auto* r = std::get_if<AttemptTracker::CommitReport>(&c)) {
      CommitReport(a, *r);
    } else if (auto* replace = std::get_if<AttemptTracker::ReplaceRank>(&c)) {
      ReplaceRank(a, *replace);
    } else if (auto* shrink = std::get_if<AttemptTracker::Shrink>(&c)) {
      Shrink(a, *shrink);
    } else if (auto* grow = std::get_if<AttemptTracker::Grow>(&c)) {
      Grow(a, *grow);
    } else if (auto* relocate = std::get_if<AttemptTracker::Relocate>(&c)) {
      Relocate(a, *relocate);
    } else if (auto* end = std::get_if<AttemptTracker::End>(&c)) {
      EndAttemptNow(a, end->outcome);
      return;  // nothing follows an end
    }
  }
  if (a.tracker.launched() && !a.tracker.end_proposed()) {
    AttemptTracker::Commands more = a.tracker.Settle(agent_->LiveWorkers(a.job_id(), a.attempt()));
    if (!more.empty()) Run(a, std::move(more));
  }
}

void JobManager::OnWorkerHello(const std::string& job_id, int attempt, int rank) {
  if (ActiveAttempt* a = Find(job_id, attempt)) Run(*a, a->tracker.OnHello(rank));
}

void JobManager::OnWorkerReport(const std::string& job_id, int attempt, int rank,
                                const events::Report& report) {
  ActiveAttempt* a = Find(job_id, attempt);
  if (a == nullptr) return;
  const int seq = report.seq;
  const json& metrics = report.metrics;
  const std::string& checkpoint = report.checkpoint;
  rank_metrics_.Add(job_id, attempt, rank, seq, commands::NowMs(), metrics);
  if (a->hold_reports) {
    a->held.push_back({rank, seq, clock_->Now()});
  } else if (!a->tracker.IsRemote(rank)) {
    // The worker copied its files durably before reporting, so it may go on at once. A
    // remote rank is acked by its agent when this call returns.
    agent_->Ack(job_id, attempt, rank, seq);
  }
  Run(*a, a->tracker.OnReport(rank, seq, metrics, checkpoint));
}

void JobManager::ReleaseReports(const std::string& job_id) {
  auto it = active_.find(job_id);
  if (it == active_.end() || it->second.held.empty()) return;
  const int committed = it->second.committed_seq;
  AckHeld(it->second,
          [committed](const ActiveAttempt::HeldReport& h) { return h.seq <= committed; });
}

void JobManager::AckHeld(ActiveAttempt& a,
                         const std::function<bool(const ActiveAttempt::HeldReport&)>& release) {
  std::map<std::string, std::vector<std::pair<int, int>>> remote;  // node -> (rank, seq)
  auto keep = a.held.begin();
  for (auto& h : a.held) {
    if (!release(h)) {
      *keep++ = h;
      continue;
    }
    if (!a.tracker.IsRemote(h.rank)) {
      agent_->Ack(a.job_id(), a.attempt(), h.rank, h.seq);
    } else {
      remote[a.rank_nodes()[static_cast<size_t>(h.rank)]].emplace_back(h.rank, h.seq);
    }
  }
  a.held.erase(keep, a.held.end());
  for (auto& [node, acks] : remote) {
    if (std::unique_ptr<NodeClient> client = ClientFor(node))
      client->Ack(a.job_id(), a.attempt(), acks);
  }
}

void JobManager::OnWorkerProgress(const std::string& job_id, int attempt, int rank,
                                  const events::Progress& progress) {
  ActiveAttempt* a = Find(job_id, attempt);
  if (a == nullptr) return;
  if (!a->progress) a->progress = std::make_unique<RankProgress>(a->tracker.world_size());
  a->progress->Update(rank, progress, std::chrono::steady_clock::now());
}

json JobManager::ProgressView(const std::string& job_id) const {
  auto it = active_.find(job_id);
  if (it == active_.end() || !it->second.progress) return nullptr;
  json view = it->second.progress->View(std::chrono::steady_clock::now(), it->second.rank_nodes());
  if (!view.is_null()) view["attempt"] = it->second.attempt();
  return view;
}

std::optional<int> JobManager::GroupSize(const std::string& job_id) const {
  auto it = active_.find(job_id);
  if (it == active_.end()) return std::nullopt;
  return static_cast<int>(it->second.tracker.active().size());
}

void JobManager::DiagnoseProgress() {
  const auto now = std::chrono::steady_clock::now();
  for (auto& [id, a] : active_) {
    if (!a.progress) continue;
    // Logged when the ranks named change, not as the numbers move.
    std::string key;
    if (auto stall = a.progress->Stalled(now)) {
      key = "stall " + std::to_string(stall->collective);
      for (int r : stall->lagging) key += " " + std::to_string(r);
    }
    for (const auto& s : a.progress->Stragglers()) key += " slow " + std::to_string(s.rank);
    if (key == a.progress_logged) continue;
    a.progress_logged = key;
    if (!key.empty()) {
      LOG_WARN << "job " << id << " attempt " << a.attempt() << ": "
               << a.progress->Summary(now, a.rank_nodes());
    }
  }
}

void JobManager::CommitReport(ActiveAttempt& a, const AttemptTracker::CommitReport& report) {
  const int seq = report.seq;
  const json& metrics = report.metrics;
  log_->Propose(commands::Report(a.job_id(), a.attempt(), seq, metrics),
                [this, job_id = a.job_id(), attempt = a.attempt(), seq](Result<json> r) {
                  if (!r.ok()) return;
                  if (ActiveAttempt* at = Find(job_id, attempt))
                    at->committed_seq = std::max(at->committed_seq, seq);
                  if (listener_ != nullptr) listener_->OnJobReported(job_id);
                });
  if (report.checkpoint_dirs.empty()) return;
  // Merged off this thread (directory fsyncs); the tracker holds the attempt's end back
  // until the merge is done.
  const std::string job_id = a.job_id();
  const int attempt = a.attempt();
  const std::string trial_dir = a.trial_dir;
  const auto began = std::chrono::steady_clock::now();
  committer_->Merge(
      trial_dir, attempt, seq, report.checkpoint_dirs, metrics,
      [this, job_id, attempt, seq, metrics, trial_dir, began](Result<std::string> merged) {
        if (!merged.ok()) {
          LOG_ERROR << "job " << job_id << ": checkpoint " << seq
                    << " could not be committed: " << merged.status().message();
          if (ActiveAttempt* at = Find(job_id, attempt))
            Run(*at, at->tracker.OnCheckpointFailed(seq, merged.status().message()));
          return;
        }
        // The attempt's end waits for the answer: a checkpoint whose record was refused
        // (the log's disk reserve, a lost leadership) must fail the attempt, which restarts
        // from the last recorded one, not vanish while the job goes on and succeeds.
        log_->Propose(
            commands::CommitCheckpoint(job_id, attempt, seq, *merged, metrics),
            Answered<cmd::CommitCheckpointAnswer>([this, job_id, attempt, seq, trial_dir,
                                                   began](Result<cmd::CommitCheckpointAnswer> r) {
              if (!r.ok()) {
                const std::string why = "job " + job_id + ": checkpoint " + std::to_string(seq) +
                                        " of attempt " + std::to_string(attempt) +
                                        " was not recorded: " + r.status().message();
                if (IsDiskFull(r.status())) {
                  LOG_DEBUG << why;  // the Raft node warned once; the attempt's end says it
                } else {
                  LOG_WARN << why;
                }
                if (ActiveAttempt* at = Find(job_id, attempt)) {
                  Run(*at, at->tracker.OnCheckpointFailed(
                               seq, "it was not recorded: " + r.status().message()));
                }
                return;
              }
              checkpoint_latency_.Record(
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
              // Records go first, files after: a crash in between leaves only garbage.
              if (!r->deleted.empty()) committer_->Remove(trial_dir, std::move(r->deleted));
              if (ActiveAttempt* at = Find(job_id, attempt))
                Run(*at, at->tracker.OnCheckpointCommitted(seq));
            }));
      });
}

void JobManager::OnWorkerExit(const WorkerExit& e) {
  ActiveAttempt* a = Find(e.job_id, e.attempt);
  if (a == nullptr) return;
  std::string tail;
  if (!AttemptTracker::IsCleanExit(e)) {
    if (a->tracker.IsRemote(e.rank)) {
      auto t = a->remote_tails.find(e.rank);
      if (t != a->remote_tails.end()) tail = t->second;
    } else {
      tail = TailFile(agent_->LogPath(e.job_id, e.attempt, e.rank), options_.log_tail_bytes);
    }
  }
  Run(*a, a->tracker.OnExit(e, tail));
}

void JobManager::EndAttemptNow(ActiveAttempt& a, commands::AttemptOutcome outcome, bool retry) {
  const std::string job_id = a.job_id();
  const std::string trial_dir = a.trial_dir;
  const int attempt = a.attempt();
  if (!retry) {  // a retry every second while the disk is full says nothing new
    LOG_INFO << "job " << job_id << ": attempt " << attempt << " ended " << outcome.state
             << (outcome.reason.empty() ? "" : ": " + outcome.reason);
  }
  const std::string reason = outcome.reason;
  log_->Propose(
      commands::EndAttempt(job_id, attempt, outcome),
      Answered<cmd::EndAttemptAnswer>(
          [this, job_id, trial_dir, attempt, reason, outcome](Result<cmd::EndAttemptAnswer> r) {
            // What an operator must see in the journal (journalctl -p warning).
            if (r.ok() && r->job_state == kJobFailed) {
              LOG_WARN << "job " << job_id << " FAILED in attempt " << attempt << ": " << reason;
            } else if (r.ok() && r->job_state == kJobPending) {
              LOG_WARN << "job " << job_id << " attempt " << attempt << " failed: " << reason
                       << "; it restarts";
            }
            auto it = active_.find(job_id);
            if (!r.ok() && IsDiskFull(r.status()) && it != active_.end() &&
                it->second.attempt() == attempt) {
              // Refused for want of disk (the Raft node warned once): the same outcome again
              // in a while, the attempt kept. Forgotten, it would be taken for one lost with
              // a previous daemon, and that reason committed instead of this one.
              LOG_DEBUG << "job " << job_id << ": end of attempt " << attempt
                        << " refused: " << r.status().message() << "; retrying";
              RetryEndAttempt(job_id, attempt, outcome);
              return;
            }
            if (!r.ok()) {
              // Not committed (this node may have lost leadership while paused): the trial dir is
              // the next head's now, and its attempt may be writing there. Leave every file alone.
              const std::string why = "job " + job_id +
                                      ": end of attempt not committed: " + r.status().message() +
                                      "; its files are left to the head that ends it";
              if (IsDiskFull(r.status())) {
                LOG_DEBUG << why;  // the Raft node warned once
              } else {
                LOG_WARN << why;
              }
            } else {
              // The records as they are now (a job deleted meanwhile, its files perhaps kept
              // on purpose, has none: its files are left alone).
              if (store_->GetJob(job_id, /*with_spec=*/false)) {
                std::set<std::string> recorded;
                for (const CheckpointRecord& ck : store_->ListCheckpoints(job_id))
                  recorded.insert(ck.path);
                committer_->CleanUpAttempt(Agent::StagingDir(trial_dir, attempt), trial_dir,
                                           attempt, std::move(recorded));
              }
            }
            if (it != active_.end() && it->second.attempt() == attempt) {
              const AttemptTracker& t = it->second.tracker;
              if (r.ok() && r->job_state == kJobPending && t.failure() && !t.stop_requested()) {
                BackOffRestart(it->second, t.failure()->reason);
              } else if (r.ok()) {
                quick_failures_.erase(job_id);
              }
              active_.erase(it);
            }
            ScheduleTick();
            if (r.ok() && IsTerminalJobState(r->job_state) && listener_ != nullptr)
              listener_->OnJobEnded(job_id);
          }));
}

void JobManager::RetryEndAttempt(const std::string& job_id, int attempt,
                                 commands::AttemptOutcome outcome) {
  auto timer = std::make_shared<asio::steady_timer>(io_, kDiskFullRetry);
  timer->async_wait([this, timer, job_id, attempt,
                     outcome = std::move(outcome)](const boost::system::error_code& ec) {
    if (ec || shutting_down_) return;
    auto it = active_.find(job_id);
    if (it == active_.end() || it->second.attempt() != attempt) return;
    EndAttemptNow(it->second, outcome, /*retry=*/true);
  });
}

void JobManager::BackOffRestart(const ActiveAttempt& a, const std::string& reason) {
  const double ran_s = std::chrono::duration<double>(clock_->Now() - a.started).count();
  const auto now = std::chrono::steady_clock::now();  // the hold is a timer's deadline
  int& quick = quick_failures_[a.job_id()];
  const RestartDelay next =
      NextRestartDelay(quick, ran_s, a.restart_backoff_s, a.max_restart_backoff_s);
  quick = next.quick_failures;
  const double delay_s = next.delay_s;
  if (delay_s <= 0) return;
  queue_.HoldRestart(a.job_id(),
                     now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                               std::chrono::duration<double>(delay_s)));
  ArmRestartTimer();
  char when[32];
  std::snprintf(when, sizeof when, "%.1f", delay_s);
  const std::string why = "restarting in " + std::string(when) + " s (backoff after " +
                          std::to_string(quick) + " failures in a row): attempt " +
                          std::to_string(a.attempt()) + " failed: " + reason;
  LOG_INFO << "job " << a.job_id() << ": " << why;
  log_->Propose(commands::SetPendingReasons({{a.job_id(), why}}), [](Result<json>) {});
}

void JobManager::ArmRestartTimer() {
  // A hold a full pass could have used long ago belongs to a job that left the queue
  // (stopped meanwhile): forget it.
  const auto stale = std::chrono::steady_clock::now() - 2 * kFullPassInterval;
  queue_.DropHoldsBefore(stale);
  for (auto it = reconcile_not_before_.begin(); it != reconcile_not_before_.end();)
    it = it->second < stale ? reconcile_not_before_.erase(it) : std::next(it);
  std::optional<std::chrono::steady_clock::time_point> earliest = queue_.EarliestHold();
  for (const auto& [id, t] : reconcile_not_before_)
    if (!earliest || t < *earliest) earliest = t;
  if (!earliest) return;
  restart_timer_.expires_at(*earliest);
  restart_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || shutting_down_) return;
    ScheduleTick(/*full=*/true);
    // Entries still ahead (a newer, later one) keep the timer going.
    const auto now = std::chrono::steady_clock::now();
    if (queue_.NextHoldAfter(now)) return ArmRestartTimer();
    for (const auto& [id, t] : reconcile_not_before_)
      if (t > now) return ArmRestartTimer();
  });
}

}  // namespace traintl
