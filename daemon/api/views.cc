#include "daemon/api/views.h"

#include "common/json_depth.h"
#include "proto/job_definition.h"

namespace traintl {

using nlohmann::json;

namespace {

template <typename T>
json Opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

json ParseOr(const std::string& text, json fallback) {
  json j = ParseJsonBounded(text);
  return j.is_discarded() ? fallback : j;
}

// The job's spec as views show it: its definition's (every default filled in), or the
// stored spec text of a job that has none (stored by an older release).
json DisplaySpec(const JobRecord& job) {
  if (!job.definition.empty()) {
    auto spec = JobDefinitionFromJson(ParseJsonBounded(job.definition));
    if (spec.ok()) return JobSpecToJson(*spec);
  }
  return ParseOr(job.spec, json::object());
}

// scaling_config.num_workers of the job, without building its whole spec (lists show it
// for every job).
int NumWorkersOf(const JobRecord& job) {
  json d = ParseOr(job.definition.empty() ? job.spec : job.definition, json::object());
  const char* section = job.definition.empty() ? "scaling_config" : "scaling";
  auto it = d.find(section);
  if (it == d.end() || !it->is_object()) return 1;
  auto n = it->find("num_workers");
  return n != it->end() && n->is_number_integer() ? n->get<int>() : 1;
}

// An elastic job's minimum (its definition's scaling.min_workers), or 0.
int MinWorkersOf(const JobRecord& job) {
  if (job.definition.empty()) return 0;
  json d = ParseOr(job.definition, json::object());
  auto it = d.find("scaling");
  if (it == d.end() || !it->is_object()) return 0;
  auto n = it->find("min_workers");
  return n != it->end() && n->is_number_integer() ? n->get<int>() : 0;
}

}  // namespace

int JobNumWorkers(const JobRecord& job) { return NumWorkersOf(job); }

json JobSummaryJson(const JobRecord& job) {
  const int workers = NumWorkersOf(job);
  json out{{"job_id", job.id},
           {"name", job.name},
           {"state", job.state},
           {"attempt", job.attempt},
           {"num_workers", workers},
           {"submitted_at", job.submitted_at},
           {"started_at", Opt(job.started_at)},
           {"ended_at", Opt(job.ended_at)},
           {"message", job.message},
           {"pending_reason", job.state == kJobPending ? job.pending_reason : ""},
           {"metrics", ParseOr(job.metrics, json::object())}};
  // An elastic job: num_workers is its maximum (the ranks whose logs there may be).
  if (const int min = MinWorkersOf(job); min > 0 && min < workers) out["min_workers"] = min;
  return out;
}

json AttemptJson(const AttemptRecord& a) {
  return json{{"attempt", a.attempt},
              {"state", a.state},
              {"started_at", a.started_at},
              {"ended_at", Opt(a.ended_at)},
              {"restored_from", a.restored_from.empty() ? json(nullptr) : json(a.restored_from)},
              {"failed_rank", Opt(a.failed_rank)},
              {"exit_code", Opt(a.exit_code)},
              {"signal", Opt(a.signal)},
              {"reason", a.reason},
              {"log_tail", a.log_tail}};
}

json CheckpointJson(const CheckpointRecord& c, bool latest) {
  return json{{"id", c.id},
              {"attempt", c.attempt},
              {"seq", c.seq},
              {"path", c.path},
              {"metrics", ParseOr(c.metrics, json::object())},
              {"created_at", c.created_at},
              {"latest", latest}};
}

json JobDetailJson(const JobRecord& job, const StateStore& store) {
  json out = JobSummaryJson(job);
  json spec = DisplaySpec(job);
  out["spec"] = spec;
  int max_failures = 0;
  if (spec.contains("run_config") && spec["run_config"].contains("failure_config"))
    max_failures = spec["run_config"]["failure_config"].value("max_failures", 0);
  out["max_failures"] = max_failures;
  out["failures"] = job.failures;
  out["library_sha256"] = job.library_sha256;
  out["trial_dir"] = job.trial_dir;
  auto latest = store.LatestCheckpoint(job.id);
  out["latest_checkpoint"] = latest ? CheckpointJson(*latest, true) : json(nullptr);
  json attempts = json::array();
  for (const auto& a : store.ListAttempts(job.id)) attempts.push_back(AttemptJson(a));
  out["attempts"] = attempts;
  return out;
}

}  // namespace traintl
