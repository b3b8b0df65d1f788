// StateStore's tuning records (state_store.h "tuning experiments"): experiments and
// their trials; and the counts /metrics shows.
#include <string>
#include <vector>

#include "common/json_depth.h"
#include "daemon/state/sqlite_stmt.h"
#include "daemon/state/state_store.h"

namespace traintl {
namespace {

constexpr const char* kExperimentColumns =
    "id, name, spec, seed, state, message, created_at, ended_at, budget_from, budget_used_ms, "
    "exp_dir, library_sha256, library_path, scheduler_state, trials_created";

ExperimentRecord ReadExperiment(const Stmt& s) {
  ExperimentRecord e;
  e.id = s.Text(0);
  e.name = s.Text(1);
  e.spec = s.Text(2);
  e.seed = s.Int(3);
  e.state = s.Text(4);
  e.message = s.Text(5);
  e.created_at = s.Int(6);
  e.ended_at = s.OptInt(7);
  e.budget_from = s.Int(8);
  e.budget_used_ms = s.Int(9);
  e.exp_dir = s.Text(10);
  e.library_sha256 = s.Text(11);
  e.library_path = s.Text(12);
  e.scheduler_state = s.Text(13);
  e.trials_created = static_cast<int>(s.Int(14));
  return e;
}

constexpr const char* kTrialColumns =
    "experiment_id, idx, name, config, job_id, jobs, status, reason, pending, created_at";

TrialRecord ReadTrial(const Stmt& s) {
  TrialRecord t;
  t.experiment_id = s.Text(0);
  t.index = static_cast<int>(s.Int(1));
  t.name = s.Text(2);
  t.config = s.Text(3);
  t.job_id = s.Text(4);
  t.jobs = s.Text(5);
  t.status = s.Text(6);
  t.reason = s.Text(7);
  t.pending = s.Text(8);
  t.created_at = s.Int(9);
  return t;
}

std::string Select(const char* cols, const std::string& rest) {
  return std::string("SELECT ") + cols + rest;
}

std::optional<ExperimentRecord> GetExperimentImpl(StmtCache& db, const std::string& id) {
  Stmt s(db, Select(kExperimentColumns, " FROM experiments WHERE id = ?"));
  s.Bind(1, id);
  if (!s.Step()) return std::nullopt;
  return ReadExperiment(s);
}

std::optional<TrialRecord> GetTrialImpl(StmtCache& db, const std::string& exp, int index) {
  Stmt s(db, Select(kTrialColumns, " FROM trials WHERE experiment_id = ? AND idx = ?"));
  s.Bind(1, exp).Bind(2, index);
  if (!s.Step()) return std::nullopt;
  return ReadTrial(s);
}

std::vector<TrialRecord> ListTrialsImpl(StmtCache& db, const std::string& experiment_id) {
  Stmt s(db, Select(kTrialColumns, " FROM trials WHERE experiment_id = ? ORDER BY idx"));
  s.Bind(1, experiment_id);
  std::vector<TrialRecord> out;
  while (s.Step()) out.push_back(ReadTrial(s));
  return out;
}

}  // namespace

std::vector<std::string> JobsOf(const TrialRecord& trial) {
  std::vector<std::string> out;
  const nlohmann::json jobs = ParseJsonBounded(trial.jobs);
  if (jobs.is_array()) {
    for (const auto& j : jobs)
      if (j.is_string()) out.push_back(j.get<std::string>());
  }
  if (out.empty() && !trial.job_id.empty()) out.push_back(trial.job_id);
  return out;
}

std::optional<ExperimentRecord> StateStore::GetExperiment(const std::string& id) const {
  std::lock_guard<std::mutex> l(mu_);
  return GetExperimentImpl(stmts_, id);
}

Result<std::string> StateStore::ResolveExperimentId(const std::string& ref) const {
  std::lock_guard<std::mutex> l(mu_);
  if (ref.empty()) return Status::NotFound("no experiment \"\"");
  {
    Stmt s(stmts_, "SELECT id FROM experiments WHERE id = ?");
    s.Bind(1, ref);
    if (s.Step()) return s.Text(0);
  }
  {
    Stmt s(stmts_, "SELECT id FROM experiments WHERE name = ? ORDER BY created_at DESC LIMIT 1");
    s.Bind(1, ref);
    if (s.Step()) return s.Text(0);
  }
  if (ref.find_first_not_of("0123456789abcdef") == std::string::npos) {
    Stmt s(stmts_, "SELECT id FROM experiments WHERE substr(id, 1, ?) = ? LIMIT 6");
    s.Bind(1, static_cast<int64_t>(ref.size())).Bind(2, ref);
    std::vector<std::string> ids;
    while (s.Step()) ids.push_back(s.Text(0));
    if (ids.size() == 1) return ids[0];
    if (ids.size() > 1) {
      std::string list;
      for (const auto& id : ids) list += (list.empty() ? "" : ", ") + id;
      return Status::FailedPrecondition("experiment " + ref + " is ambiguous: " + list);
    }
  }
  return Status::NotFound("no experiment " + ref);
}

std::vector<ExperimentRecord> StateStore::ListExperiments(bool running_only, size_t limit) const {
  std::lock_guard<std::mutex> l(mu_);
  std::string sql = Select(kExperimentColumns, " FROM experiments");
  if (running_only) sql += " WHERE state = 'RUNNING'";
  sql += " ORDER BY created_at DESC, id DESC";
  if (limit > 0) sql += " LIMIT " + std::to_string(limit);
  Stmt s(stmts_, sql);
  std::vector<ExperimentRecord> out;
  while (s.Step()) out.push_back(ReadExperiment(s));
  return out;
}

std::vector<TrialRecord> StateStore::ListTrials(const std::string& experiment_id) const {
  std::lock_guard<std::mutex> l(mu_);
  return ListTrialsImpl(stmts_, experiment_id);
}

StateStore::Counts StateStore::CountByState() const {
  std::lock_guard<std::mutex> l(mu_);
  Counts out;
  auto group = [&](const char* sql, std::map<std::string, int64_t>* into) {
    Stmt s(stmts_, sql);
    while (s.Step()) (*into)[s.Text(0)] = s.Int(1);
  };
  group("SELECT state, count(*) FROM jobs GROUP BY state", &out.jobs);
  group("SELECT state, count(*) FROM attempts GROUP BY state", &out.attempts);
  group("SELECT state, count(*) FROM experiments GROUP BY state", &out.experiments);
  Stmt s(stmts_,
         "SELECT (SELECT count(*) FROM attempts) - (SELECT count(*) FROM jobs WHERE attempt > 0)");
  s.Step();
  out.restarts = s.Int(0);
  return out;
}

int64_t StateStore::CountMetrics(const std::string& job_id) const {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(stmts_, "SELECT count(*) FROM metrics WHERE job_id = ?");
  s.Bind(1, job_id);
  s.Step();
  return s.Int(0);
}

std::optional<TrialRecord> StateStore::TrialOfJob(const std::string& job_id) const {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(stmts_, Select(kTrialColumns, " FROM trials WHERE job_id = ?"));
  s.Bind(1, job_id);
  if (!s.Step()) return std::nullopt;
  return ReadTrial(s);
}

std::optional<ExperimentRecord> StateStore::Tx::GetExperiment(const std::string& id) {
  return GetExperimentImpl(stmts_, id);
}

std::optional<std::string> StateStore::Tx::ExperimentIdForSubmission(
    const std::string& submission_id) {
  Stmt s(stmts_, "SELECT id FROM experiments WHERE submission_id = ?");
  s.Bind(1, submission_id);
  if (!s.Step()) return std::nullopt;
  return s.Text(0);
}

void StateStore::Tx::InsertExperiment(const ExperimentRecord& e, const std::string& submission_id) {
  Stmt s(stmts_, std::string("INSERT INTO experiments(") + kExperimentColumns +
                     ", submission_id) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  s.Bind(1, e.id).Bind(2, e.name).Bind(3, e.spec).Bind(4, e.seed).Bind(5, e.state);
  s.Bind(6, e.message).Bind(7, e.created_at).Bind(8, e.ended_at).Bind(9, e.budget_from);
  s.Bind(10, e.budget_used_ms).Bind(11, e.exp_dir).Bind(12, e.library_sha256);
  s.Bind(13, e.library_path).Bind(14, e.scheduler_state).Bind(15, e.trials_created);
  if (submission_id.empty()) {
    s.BindNull(16);
  } else {
    s.Bind(16, submission_id);
  }
  s.Run();
}

void StateStore::Tx::UpdateExperiment(const ExperimentRecord& e) {
  Stmt s(stmts_,
         "UPDATE experiments SET state=?, message=?, ended_at=?, budget_from=?, "
         "budget_used_ms=?, scheduler_state=?, trials_created=? WHERE id=?");
  s.Bind(1, e.state).Bind(2, e.message).Bind(3, e.ended_at).Bind(4, e.budget_from);
  s.Bind(5, e.budget_used_ms).Bind(6, e.scheduler_state).Bind(7, e.trials_created);
  s.Bind(8, e.id);
  s.Run();
}

std::optional<TrialRecord> StateStore::Tx::GetTrial(const std::string& experiment_id, int index) {
  return GetTrialImpl(stmts_, experiment_id, index);
}

std::vector<TrialRecord> StateStore::Tx::ListTrials(const std::string& experiment_id) {
  return ListTrialsImpl(stmts_, experiment_id);
}

void StateStore::Tx::DeleteExperiment(const std::string& id) {
  Stmt(stmts_, "DELETE FROM trials WHERE experiment_id = ?").Bind(1, id).Run();
  Stmt(stmts_, "DELETE FROM experiments WHERE id = ?").Bind(1, id).Run();
}

void StateStore::Tx::UpsertTrial(const TrialRecord& t) {
  Stmt s(stmts_, std::string("INSERT OR REPLACE INTO trials(") + kTrialColumns +
                     ") VALUES(?,?,?,?,?,?,?,?,?,?)");
  s.Bind(1, t.experiment_id).Bind(2, t.index).Bind(3, t.name).Bind(4, t.config);
  s.Bind(5, t.job_id).Bind(6, t.jobs).Bind(7, t.status).Bind(8, t.reason).Bind(9, t.pending);
  s.Bind(10, t.created_at);
  s.Run();
}

}  // namespace traintl
