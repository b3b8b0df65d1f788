#include "daemon/state/fsm.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/json_depth.h"
#include "daemon/state/retention.h"
#include "proto/raft_commands.h"

namespace traintl {
namespace {

using nlohmann::json;

// The FSM refuses a command: nothing changed, and the proposer is told why.
Status Refused(const std::string& why) { return Status::FailedPrecondition(why); }

// One ApplyCommand per command type, answering the command's typed Answer (or a refusal). `time` is
// the proposer's clock (the envelope's), the only time the FSM uses. Every field was decoded (and
// type-checked) before the first write.

// Records the tuning trial a submitted job runs: a new trial (its first job), or the
// trial's continuation (PBT's exploit, a HyperBand promotion) moved on to `job_id`. Only
// a RUNNING experiment gets jobs: a head that lost its leadership mid-decision cannot add
// trials to an experiment a user stopped.
Status LinkTrial(StateStore::Tx& tx, int64_t time, const cmd::TrialLink& link,
                 const std::string& job_id, bool dry_run) {
  auto exp = tx.GetExperiment(link.experiment_id);
  if (!exp) return Refused("no experiment " + link.experiment_id);
  if (exp->state != kExperimentRunning)
    return Refused("experiment " + exp->id + " is " + exp->state);
  if (link.index < 0) return Refused("bad trial index");
  auto trial = tx.GetTrial(exp->id, link.index);
  if (dry_run) return Status::Ok();
  if (!trial) {
    trial.emplace();
    trial->experiment_id = exp->id;
    trial->index = link.index;
    trial->name = link.name;
    trial->created_at = time;
    trial->jobs = "[]";
    if (link.index + 1 > exp->trials_created) {
      exp->trials_created = link.index + 1;
      tx.UpdateExperiment(*exp);
    }
  }
  json jobs = ParseJsonBounded(trial->jobs);
  if (!jobs.is_array()) jobs = json::array();
  jobs.push_back(job_id);
  trial->jobs = jobs.dump();
  trial->job_id = job_id;
  trial->config = link.config.dump();
  trial->status.clear();
  trial->pending.clear();
  tx.UpsertTrial(*trial);
  return Status::Ok();
}

Result<cmd::SubmitJob::Answer> ApplyCommand(StateStore::Tx& tx, int64_t time,
                                            const cmd::SubmitJob& c) {
  JobRecord job;
  job.id = c.job_id;
  job.name = c.name;
  // The definition is what views show as the spec; the spec text is kept only for jobs
  // without one (a spec this release refuses), so that they still show what was sent.
  if (!c.definition.is_null()) {
    job.definition = c.definition.dump();
  } else if (!c.spec.is_null()) {
    job.spec = c.spec.dump();
  }
  job.policy = c.policy;
  job.priority = c.priority;
  job.library_sha256 = c.library_sha256;
  job.library_path = c.library_path;
  job.trial_dir = c.trial_dir;
  job.submitted_at = c.submitted_at;
  job.state = kJobPending;
  job.pending_reason = "waiting for the scheduler";
  if (!c.submission_id.empty()) {
    if (auto existing = tx.JobIdForSubmission(c.submission_id))
      return cmd::SubmitJobAnswer{*existing};
  }
  if (tx.JobExists(job.id)) return Refused("job id " + job.id + " already exists");
  if (c.trial) {
    // Checked before the job is written: a refused entry changes nothing.
    if (Status st = LinkTrial(tx, time, *c.trial, job.id, /*dry_run=*/true); !st.ok()) return st;
  }
  tx.InsertJob(job, c.submission_id);
  if (c.trial) (void)LinkTrial(tx, time, *c.trial, job.id, /*dry_run=*/false);
  return cmd::SubmitJobAnswer{job.id};
}

Result<cmd::SetPendingReason::Answer> ApplyCommand(StateStore::Tx& tx, int64_t,
                                                   const cmd::SetPendingReason& c) {
  auto job = tx.GetJob(c.job_id);
  if (!job) return Refused("no such job");
  if (job->state != kJobPending) return Refused("job is " + job->state);
  job->pending_reason = c.reason;
  tx.UpdateJob(*job);
  return cmd::NoAnswer{};
}

Result<cmd::SetPendingReasons::Answer> ApplyCommand(StateStore::Tx& tx, int64_t,
                                                    const cmd::SetPendingReasons& c) {
  // A job may have started or ended since the proposer looked: such entries are skipped,
  // not errors, so that one stale job does not drop the reasons of the others.
  int updated = 0;
  for (const auto& [id, reason] : c.reasons) updated += tx.SetPendingReason(id, reason) ? 1 : 0;
  return cmd::SetPendingReasonsAnswer{updated};
}

Result<cmd::StartAttempt::Answer> ApplyCommand(StateStore::Tx& tx, int64_t time,
                                               const cmd::StartAttempt& c) {
  auto job = tx.GetJob(c.job_id);
  if (!job) return Refused("no such job");
  if (job->state != kJobPending) return Refused("job is " + job->state + ", not PENDING");
  if (c.attempt != job->attempt + 1) return Refused("attempt out of order");
  job->state = kJobStarting;
  job->attempt = c.attempt;
  job->pending_reason.clear();
  if (!job->started_at) job->started_at = time;
  tx.UpdateJob(*job);
  AttemptRecord a;
  a.job_id = job->id;
  a.attempt = c.attempt;
  a.state = kJobRunning;
  a.started_at = time;
  a.restored_from = c.restored_from;
  a.head_node = c.head_node;
  a.head_run = c.head_run;
  a.rank_nodes = c.rank_nodes;
  a.node_addresses = c.node_addresses;
  tx.InsertAttempt(a);
  return cmd::NoAnswer{};
}

Result<cmd::JobRunning::Answer> ApplyCommand(StateStore::Tx& tx, int64_t,
                                             const cmd::JobRunning& c) {
  auto job = tx.GetJob(c.job_id);
  if (!job) return Refused("no such job");
  if (job->attempt != c.attempt || job->state != kJobStarting) return Refused("stale");
  job->state = kJobRunning;
  tx.UpdateJob(*job);
  return cmd::NoAnswer{};
}

Result<cmd::WorkerEvent::Answer> ApplyCommand(StateStore::Tx& tx, int64_t time,
                                              const cmd::WorkerEvent& c) {
  WorkerEventRecord e;
  e.job_id = c.job_id;
  e.attempt = c.attempt;
  e.rank = c.rank;
  e.time = time;
  e.event = c.event;
  e.detail = c.detail;
  if (!tx.GetJob(e.job_id)) return Refused("no such job");
  tx.InsertWorkerEvent(e);
  return cmd::NoAnswer{};
}

Result<cmd::Report::Answer> ApplyCommand(StateStore::Tx& tx, int64_t time, const cmd::Report& c) {
  MetricRecord m;
  m.job_id = c.job_id;
  m.attempt = c.attempt;
  m.seq = c.seq;
  m.time = time;
  m.metrics = c.metrics.dump();
  auto job = tx.GetJob(m.job_id);
  if (!job) return Refused("no such job");
  if (job->attempt != m.attempt || IsTerminalJobState(job->state)) return Refused("stale");
  tx.UpsertMetric(m);
  job->metrics = m.metrics;
  tx.UpdateJob(*job);
  return cmd::NoAnswer{};
}

Result<cmd::CommitCheckpoint::Answer> ApplyCommand(StateStore::Tx& tx, int64_t time,
                                                   const cmd::CommitCheckpoint& c) {
  CheckpointRecord ck;
  ck.job_id = c.job_id;
  ck.attempt = c.attempt;
  ck.seq = c.seq;
  ck.path = c.path;
  ck.metrics = c.metrics.dump();
  ck.created_at = time;
  auto job = tx.GetJob(ck.job_id);
  if (!job) return Refused("no such job");
  if (job->attempt != ck.attempt || IsTerminalJobState(job->state)) return Refused("stale");
  RetentionPolicy policy;
  policy.num_to_keep = job->policy.num_to_keep;
  policy.score_attribute = job->policy.score_attribute;
  policy.score_max = job->policy.score_max;
  const int64_t id = tx.InsertCheckpoint(ck);
  std::vector<std::string> deleted;
  auto all = tx.ListCheckpoints(ck.job_id);
  for (int64_t victim : CheckpointsToDelete(all, policy)) {
    for (const auto& r : all)
      if (r.id == victim) deleted.push_back(r.path);
    tx.DeleteCheckpoint(victim);
  }
  return cmd::CommitCheckpointAnswer{id, std::move(deleted)};
}

Result<cmd::EndAttempt::Answer> ApplyCommand(StateStore::Tx& tx, int64_t time,
                                             const cmd::EndAttempt& c) {
  const cmd::AttemptOutcome& o = c.outcome;
  if (o.state != kJobSucceeded && o.state != kJobFailed && o.state != kJobStopped)
    return Refused("bad attempt state " + o.state);
  auto job = tx.GetJob(c.job_id);
  if (!job) return Refused("no such job");
  auto a = tx.GetAttempt(job->id, c.attempt);
  if (!a || job->attempt != c.attempt) return Refused("no such attempt");
  if (a->ended_at) return cmd::EndAttemptAnswer{job->state};  // already ended
  a->state = o.state;
  a->ended_at = time;
  a->failed_rank = o.failed_rank;
  a->exit_code = o.exit_code;
  a->signal = o.signal;
  a->reason = o.reason;
  a->log_tail = o.log_tail;
  tx.UpdateAttempt(*a);

  if (o.state == kJobFailed) {
    ++job->failures;
    const int max_failures = job->policy.max_failures;
    const bool allowed = max_failures < 0 || job->failures <= max_failures;
    if (o.retryable && allowed && !job->stop_requested) {
      job->state = kJobPending;
      job->pending_reason =
          "restarting after attempt " + std::to_string(c.attempt) + " failed: " + o.reason;
    } else {
      job->state = kJobFailed;
      job->ended_at = time;
      job->message = o.reason;
      if (!o.retryable) {
        job->message += " (not retried: retrying cannot help)";
      } else if (!allowed) {
        job->message += " (max_failures=" + std::to_string(max_failures) + " exhausted)";
      }
    }
  } else if (o.state == kJobStopped) {
    job->state = kJobStopped;
    job->ended_at = time;
    // A stop with a reason (stop_job's) already holds it as the message.
    if (!job->stop_requested || job->message.empty())
      job->message = o.reason.empty() ? "stopped by user" : o.reason;
  } else {
    job->state = kJobSucceeded;
    job->ended_at = time;
    job->message.clear();
  }
  tx.UpdateJob(*job);
  return cmd::EndAttemptAnswer{job->state};
}

Result<cmd::StopJob::Answer> ApplyCommand(StateStore::Tx& tx, int64_t time, const cmd::StopJob& c) {
  auto job = tx.GetJob(c.job_id);
  if (!job) return Refused("no such job");
  if (IsTerminalJobState(job->state)) return cmd::StopJobAnswer{job->state, false};
  if (job->state == kJobPending) {
    job->state = kJobStopped;
    job->ended_at = time;
    job->message = c.reason.empty() ? "stopped by user" : c.reason;
    job->pending_reason.clear();
    tx.UpdateJob(*job);
    return cmd::StopJobAnswer{job->state, false};
  }
  // The first stop decides the reason.
  if (!job->stop_requested) job->message = c.reason;
  job->stop_requested = true;
  tx.UpdateJob(*job);
  return cmd::StopJobAnswer{job->state, true};
}

Result<cmd::DeleteJob::Answer> ApplyCommand(StateStore::Tx& tx, int64_t, const cmd::DeleteJob& c) {
  auto job = tx.GetJob(c.job_id);
  if (!job) return Refused("no such job");
  if (!IsTerminalJobState(job->state))
    return Refused("job " + job->id + " is " + job->state + "; stop it and let it end first");
  cmd::DeleteJobAnswer answer;
  answer.trial_dir = job->trial_dir;
  for (const auto& ck : tx.ListCheckpoints(job->id)) answer.checkpoint_paths.push_back(ck.path);
  tx.DeleteJob(job->id);
  return answer;
}

Result<cmd::FailPendingJob::Answer> ApplyCommand(StateStore::Tx& tx, int64_t time,
                                                 const cmd::FailPendingJob& c) {
  auto job = tx.GetJob(c.job_id);
  if (!job) return Refused("no such job");
  if (job->state != kJobPending) return cmd::FailPendingJobAnswer{job->state};
  job->state = kJobFailed;
  job->ended_at = time;
  job->message = c.reason;
  job->pending_reason.clear();
  tx.UpdateJob(*job);
  return cmd::FailPendingJobAnswer{job->state};
}

Result<cmd::CreateExperiment::Answer> ApplyCommand(StateStore::Tx& tx, int64_t time,
                                                   const cmd::CreateExperiment& c) {
  if (!c.submission_id.empty()) {
    if (auto existing = tx.ExperimentIdForSubmission(c.submission_id))
      return cmd::CreateExperimentAnswer{*existing};
  }
  if (tx.GetExperiment(c.experiment_id))
    return Refused("experiment id " + c.experiment_id + " already exists");
  ExperimentRecord e;
  e.id = c.experiment_id;
  e.name = c.name;
  e.spec = c.spec.dump();
  e.seed = c.seed;
  e.state = kExperimentRunning;
  e.created_at = time;
  e.budget_from = time;
  e.exp_dir = c.exp_dir;
  e.library_sha256 = c.library_sha256;
  e.library_path = c.library_path;
  tx.InsertExperiment(e, c.submission_id);
  return cmd::CreateExperimentAnswer{e.id};
}

Result<cmd::UpdateExperiment::Answer> ApplyCommand(StateStore::Tx& tx, int64_t time,
                                                   const cmd::UpdateExperiment& c) {
  auto e = tx.GetExperiment(c.experiment_id);
  if (!e) return Refused("no experiment " + c.experiment_id);
  std::vector<TrialRecord> trials;
  for (const auto& u : c.trials) {
    auto t = tx.GetTrial(e->id, u.index);
    if (!t) return Refused("experiment " + e->id + " has no trial " + std::to_string(u.index));
    if (u.status) t->status = *u.status;
    if (u.reason) t->reason = *u.reason;
    if (u.pending) t->pending = *u.pending;
    trials.push_back(std::move(*t));
  }
  const bool running = e->state == kExperimentRunning;
  if (c.state == kExperimentRunning) {
    if (running) return Refused("experiment " + e->id + " is already RUNNING");
    e->state = kExperimentRunning;
    e->message.clear();
    e->ended_at.reset();
    e->budget_from = time;
  } else if (!c.state.empty()) {
    if (c.state != kJobSucceeded && c.state != kJobStopped && c.state != kJobFailed)
      return Refused("bad experiment state " + c.state);
    if (!running) return Refused("experiment " + e->id + " is " + e->state);
    e->state = c.state;
    e->message = c.message;
    e->ended_at = time;
    e->budget_used_ms += std::max<int64_t>(0, time - e->budget_from);
  }
  if (c.scheduler_state) e->scheduler_state = *c.scheduler_state;
  tx.UpdateExperiment(*e);
  for (const auto& t : trials) tx.UpsertTrial(t);
  return cmd::NoAnswer{};
}

Result<cmd::DeleteExperiment::Answer> ApplyCommand(StateStore::Tx& tx, int64_t,
                                                   const cmd::DeleteExperiment& c) {
  auto e = tx.GetExperiment(c.experiment_id);
  if (!e) return Refused("no experiment " + c.experiment_id);
  if (e->state == kExperimentRunning)
    return Refused("experiment " + e->id + " is RUNNING; stop it first");
  // Every job a trial ran (a PBT exploit or a promotion continues a trial in a new job);
  // one a user deleted already is gone.
  cmd::DeleteExperimentAnswer answer;
  answer.exp_dir = e->exp_dir;
  for (const auto& t : tx.ListTrials(e->id)) {
    for (const auto& id : JobsOf(t)) {
      auto job = tx.GetJob(id);
      if (!job ||
          std::find(answer.job_ids.begin(), answer.job_ids.end(), id) != answer.job_ids.end())
        continue;
      if (!IsTerminalJobState(job->state))
        return Refused("trial " + t.name + "'s job " + job->id + " is " + job->state +
                       "; wait for it to end");
      answer.job_ids.push_back(job->id);
    }
  }
  // Nothing was written before the last refusal could come.
  for (const auto& id : answer.job_ids) tx.DeleteJob(id);
  tx.DeleteExperiment(e->id);
  return answer;
}

Result<cmd::SetVoterAddress::Answer> ApplyCommand(StateStore::Tx& tx, int64_t,
                                                  const cmd::SetVoterAddress& c) {
  tx.SetMeta("voter_api:" + std::to_string(c.raft_id), c.api_address);
  return cmd::NoAnswer{};
}

}  // namespace

std::string Fsm::Apply(const std::string& command) {
  // A command that does not decode is refused the same way by every voter (the text is
  // the same everywhere), so it need not be recorded under its rid.
  Result<cmd::Envelope> e = cmd::Decode(command);
  if (!e.ok()) return cmd::EncodeRefusal(e.status().message());
  return store_->Mutate([&](StateStore::Tx& tx) -> std::string {
    if (auto prior = tx.AppliedResult(e->rid)) return *prior;
    // The variant is the dispatch table: one ApplyCommand overload per command type.
    std::string result = std::visit(
        [&](const auto& body) {
          auto answer = ApplyCommand(tx, e->time, body);
          return answer.ok() ? cmd::EncodeAnswer(*answer)
                             : cmd::EncodeRefusal(answer.status().message());
        },
        e->body);
    tx.RecordApplied(e->rid, result, e->time);
    tx.ExpireApplied(e->time, kRememberAppliedMs);
    return result;
  });
}

Result<std::string> Fsm::Snapshot() { return store_->Serialize(); }

Status Fsm::Restore(const std::string& snapshot) { return store_->Restore(snapshot); }

}  // namespace traintl
