#include "daemon/state/fsm.h"

#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/json_depth.h"
#include "daemon/state/retention.h"

namespace traintl {
namespace {

using nlohmann::json;

std::string Ok(json extra = json::object()) {
  extra["ok"] = true;
  return extra.dump();
}

std::string Err(const std::string& msg) { return json{{"ok", false}, {"error", msg}}.dump(); }

// Looks up spec.run_config.<section>; an empty object when absent. Never throws.
json RunConfigSection(const std::string& spec_text, const char* section) {
  json spec = ParseJsonBounded(spec_text);
  if (!spec.is_object()) return json::object();
  auto rc = spec.find("run_config");
  if (rc == spec.end() || !rc->is_object()) return json::object();
  auto s = rc->find(section);
  if (s == rc->end() || !s->is_object()) return json::object();
  return *s;
}

template <typename T>
T ValueOr(const json& obj, const char* key, T fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const std::exception&) {
    return fallback;
  }
}

template <typename T>
std::optional<T> OptField(const json& c, const char* key) {
  if (!c.contains(key) || c[key].is_null()) return std::nullopt;
  return c[key].get<T>();
}

// Reads every field a command needs before anything is written, so that a malformed
// command (a type error throws here) changes nothing.
struct Fields {
  explicit Fields(const json& c) : c_(c) {}
  std::string Str(const char* k) const { return c_.at(k).get<std::string>(); }
  int Int(const char* k) const { return c_.at(k).get<int>(); }
  int64_t Int64(const char* k) const { return c_.at(k).get<int64_t>(); }
  const json& c_;
};

std::string ApplySubmit(StateStore::Tx& tx, const json& c) {
  const json& j = c.at("job");
  Fields f(j);
  JobRecord job;
  job.id = f.Str("id");
  job.name = f.Str("name");
  job.spec = j.at("spec").dump();
  job.priority = f.Int("priority");
  job.library_sha256 = f.Str("library_sha256");
  job.library_path = f.Str("library_path");
  job.trial_dir = f.Str("trial_dir");
  job.submitted_at = f.Int64("submitted_at");
  job.state = kJobPending;
  job.pending_reason = "waiting for the scheduler";
  const std::string sid = c.value("submission_id", "");
  if (!sid.empty()) {
    if (auto existing = tx.JobIdForSubmission(sid)) return Ok({{"job_id", *existing}});
  }
  if (tx.JobExists(job.id)) return Err("job id " + job.id + " already exists");
  tx.InsertJob(job, sid);
  return Ok({{"job_id", job.id}});
}

std::string ApplySetPendingReason(StateStore::Tx& tx, const json& c) {
  Fields f(c);
  auto job = tx.GetJob(f.Str("job_id"));
  if (!job) return Err("no such job");
  if (job->state != kJobPending) return Err("job is " + job->state);
  job->pending_reason = f.Str("reason");
  tx.UpdateJob(*job);
  return Ok();
}

std::string ApplySetPendingReasons(StateStore::Tx& tx, const json& c) {
  const json& reasons = c.at("reasons");
  if (!reasons.is_object()) return Err("reasons: must be an object");
  std::vector<std::pair<std::string, std::string>> updates;
  for (auto it = reasons.begin(); it != reasons.end(); ++it)
    updates.emplace_back(it.key(), it.value().get<std::string>());  // throws before writes
  // A job may have started or ended since the proposer looked: such entries are skipped,
  // not errors, so that one stale job does not drop the reasons of the others.
  int updated = 0;
  for (const auto& [id, reason] : updates) updated += tx.SetPendingReason(id, reason) ? 1 : 0;
  return Ok({{"updated", updated}});
}

std::string ApplyStartAttempt(StateStore::Tx& tx, const json& c) {
  Fields f(c);
  const int attempt = f.Int("attempt");
  const int64_t time = f.Int64("time");
  const std::string restored_from = f.Str("restored_from");
  auto job = tx.GetJob(f.Str("job_id"));
  if (!job) return Err("no such job");
  if (job->state != kJobPending) return Err("job is " + job->state + ", not PENDING");
  if (attempt != job->attempt + 1) return Err("attempt out of order");
  job->state = kJobStarting;
  job->attempt = attempt;
  job->pending_reason.clear();
  if (!job->started_at) job->started_at = time;
  tx.UpdateJob(*job);
  AttemptRecord a;
  a.job_id = job->id;
  a.attempt = attempt;
  a.state = kJobRunning;
  a.started_at = time;
  a.restored_from = restored_from;
  tx.InsertAttempt(a);
  return Ok();
}

std::string ApplyJobRunning(StateStore::Tx& tx, const json& c) {
  Fields f(c);
  auto job = tx.GetJob(f.Str("job_id"));
  if (!job) return Err("no such job");
  if (job->attempt != f.Int("attempt") || job->state != kJobStarting) return Err("stale");
  job->state = kJobRunning;
  tx.UpdateJob(*job);
  return Ok();
}

std::string ApplyWorkerEvent(StateStore::Tx& tx, const json& c) {
  Fields f(c);
  WorkerEventRecord e;
  e.job_id = f.Str("job_id");
  e.attempt = f.Int("attempt");
  e.rank = f.Int("rank");
  e.time = f.Int64("time");
  e.event = f.Str("event");
  e.detail = f.Str("detail");
  if (!tx.GetJob(e.job_id)) return Err("no such job");
  tx.InsertWorkerEvent(e);
  return Ok();
}

std::string ApplyReport(StateStore::Tx& tx, const json& c) {
  Fields f(c);
  MetricRecord m;
  m.job_id = f.Str("job_id");
  m.attempt = f.Int("attempt");
  m.seq = f.Int("seq");
  m.time = f.Int64("time");
  m.metrics = c.at("metrics").dump();
  auto job = tx.GetJob(m.job_id);
  if (!job) return Err("no such job");
  if (job->attempt != m.attempt || IsTerminalJobState(job->state)) return Err("stale");
  tx.UpsertMetric(m);
  job->metrics = m.metrics;
  tx.UpdateJob(*job);
  return Ok();
}

std::string ApplyCommitCheckpoint(StateStore::Tx& tx, const json& c) {
  Fields f(c);
  CheckpointRecord ck;
  ck.job_id = f.Str("job_id");
  ck.attempt = f.Int("attempt");
  ck.seq = f.Int("seq");
  ck.path = f.Str("path");
  ck.metrics = c.at("metrics").dump();
  ck.created_at = f.Int64("time");
  auto job = tx.GetJob(ck.job_id);
  if (!job) return Err("no such job");
  if (job->attempt != ck.attempt || IsTerminalJobState(job->state)) return Err("stale");
  const json cc = RunConfigSection(job->spec, "checkpoint_config");
  RetentionPolicy policy;
  policy.num_to_keep = ValueOr<int>(cc, "num_to_keep", 0);
  policy.score_attribute = ValueOr<std::string>(cc, "checkpoint_score_attribute", "");
  policy.score_max = ValueOr<std::string>(cc, "checkpoint_score_order", "min") == "max";
  const int64_t id = tx.InsertCheckpoint(ck);
  json deleted = json::array();
  auto all = tx.ListCheckpoints(ck.job_id);
  for (int64_t victim : CheckpointsToDelete(all, policy)) {
    for (const auto& r : all)
      if (r.id == victim) deleted.push_back(r.path);
    tx.DeleteCheckpoint(victim);
  }
  return Ok({{"id", id}, {"deleted", deleted}});
}

std::string ApplyEndAttempt(StateStore::Tx& tx, const json& c) {
  Fields f(c);
  const int attempt = f.Int("attempt");
  const int64_t time = f.Int64("time");
  const std::string state = f.Str("state");
  const bool retryable = c.value("retryable", true);
  AttemptRecord update;
  update.failed_rank = OptField<int>(c, "failed_rank");
  update.exit_code = OptField<int>(c, "exit_code");
  update.signal = OptField<int>(c, "signal");
  update.reason = f.Str("reason");
  update.log_tail = f.Str("log_tail");
  if (state != kJobSucceeded && state != kJobFailed && state != kJobStopped)
    return Err("bad attempt state " + state);
  auto job = tx.GetJob(f.Str("job_id"));
  if (!job) return Err("no such job");
  auto a = tx.GetAttempt(job->id, attempt);
  if (!a || job->attempt != attempt) return Err("no such attempt");
  if (a->ended_at) return Ok({{"job_state", job->state}});  // already ended
  a->state = state;
  a->ended_at = time;
  a->failed_rank = update.failed_rank;
  a->exit_code = update.exit_code;
  a->signal = update.signal;
  a->reason = update.reason;
  a->log_tail = update.log_tail;
  tx.UpdateAttempt(*a);

  if (state == kJobFailed) {
    ++job->failures;
    const int max_failures =
        ValueOr<int>(RunConfigSection(job->spec, "failure_config"), "max_failures", 0);
    const bool allowed = max_failures < 0 || job->failures <= max_failures;
    if (retryable && allowed && !job->stop_requested) {
      job->state = kJobPending;
      job->pending_reason =
          "restarting after attempt " + std::to_string(attempt) + " failed: " + update.reason;
    } else {
      job->state = kJobFailed;
      job->ended_at = time;
      job->message = update.reason;
      if (!retryable) {
        job->message += " (not retried: retrying cannot help)";
      } else if (!allowed) {
        job->message += " (max_failures=" + std::to_string(max_failures) + " exhausted)";
      }
    }
  } else if (state == kJobStopped) {
    job->state = kJobStopped;
    job->ended_at = time;
    job->message = update.reason.empty() ? "stopped by user" : update.reason;
  } else {
    job->state = kJobSucceeded;
    job->ended_at = time;
    job->message.clear();
  }
  tx.UpdateJob(*job);
  return Ok({{"job_state", job->state}});
}

std::string ApplyStopJob(StateStore::Tx& tx, const json& c) {
  Fields f(c);
  const int64_t time = f.Int64("time");
  auto job = tx.GetJob(f.Str("job_id"));
  if (!job) return Err("no such job");
  if (IsTerminalJobState(job->state)) return Ok({{"state", job->state}, {"active", false}});
  if (job->state == kJobPending) {
    job->state = kJobStopped;
    job->ended_at = time;
    job->message = "stopped by user";
    job->pending_reason.clear();
    tx.UpdateJob(*job);
    return Ok({{"state", job->state}, {"active", false}});
  }
  job->stop_requested = true;
  tx.UpdateJob(*job);
  return Ok({{"state", job->state}, {"active", true}});
}

std::string ApplyFailPendingJob(StateStore::Tx& tx, const json& c) {
  Fields f(c);
  const int64_t time = f.Int64("time");
  const std::string reason = f.Str("reason");
  auto job = tx.GetJob(f.Str("job_id"));
  if (!job) return Err("no such job");
  if (job->state != kJobPending) return Ok({{"state", job->state}});
  job->state = kJobFailed;
  job->ended_at = time;
  job->message = reason;
  job->pending_reason.clear();
  tx.UpdateJob(*job);
  return Ok({{"state", job->state}});
}

std::string ApplySetVoterAddress(StateStore::Tx& tx, const json& c) {
  const uint64_t id = c.at("raft_id").get<uint64_t>();
  const std::string address = c.at("api_address").get<std::string>();
  tx.SetMeta("voter_api:" + std::to_string(id), address);
  return Ok();
}

std::string Dispatch(StateStore::Tx& tx, const std::string& op, const json& c) {
  if (op == "submit_job") return ApplySubmit(tx, c);
  if (op == "set_pending_reason") return ApplySetPendingReason(tx, c);
  if (op == "set_pending_reasons") return ApplySetPendingReasons(tx, c);
  if (op == "start_attempt") return ApplyStartAttempt(tx, c);
  if (op == "job_running") return ApplyJobRunning(tx, c);
  if (op == "worker_event") return ApplyWorkerEvent(tx, c);
  if (op == "report") return ApplyReport(tx, c);
  if (op == "commit_checkpoint") return ApplyCommitCheckpoint(tx, c);
  if (op == "end_attempt") return ApplyEndAttempt(tx, c);
  if (op == "stop_job") return ApplyStopJob(tx, c);
  if (op == "fail_pending_job") return ApplyFailPendingJob(tx, c);
  if (op == "set_voter_address") return ApplySetVoterAddress(tx, c);
  return Err("unknown op " + op);
}

}  // namespace

std::string Fsm::Apply(const std::string& command) {
  json c = ParseJsonBounded(command);
  if (!c.is_object() || !c.contains("op") || !c["op"].is_string() || !c.contains("rid") ||
      !c["rid"].is_string()) {
    return Err("malformed command");
  }
  const std::string rid = c["rid"].get<std::string>();
  const std::string op = c["op"].get<std::string>();
  return store_->Mutate([&](StateStore::Tx& tx) -> std::string {
    if (auto prior = tx.AppliedResult(rid)) return *prior;
    std::string result;
    try {
      result = Dispatch(tx, op, c);
    } catch (const std::exception& e) {
      // Fields are all read before the first write, so nothing was changed.
      result = Err(std::string("malformed ") + op + " command: " + e.what());
    }
    tx.RecordApplied(rid, result);
    return result;
  });
}

Result<std::string> Fsm::Snapshot() { return store_->Serialize(); }

Status Fsm::Restore(const std::string& snapshot) { return store_->Restore(snapshot); }

}  // namespace traintl
