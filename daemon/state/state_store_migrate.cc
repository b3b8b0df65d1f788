// StateStore's schema migrations (state_store.h): a restored image of an older schema is
// brought up to kSchemaVersion in one transaction, one step per version.
#include <sqlite3.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "common/json_depth.h"
#include "daemon/state/sqlite_stmt.h"
#include "daemon/state/state_store.h"
#include "proto/job_definition.h"

namespace traintl {
namespace {

// Schema 1 -> 2: the FSM's policies stored typed with the job (filled from the stored
// spec, the one time it is read after submit), and who started each attempt.
constexpr const char* kMigrateTo2 = R"sql(
ALTER TABLE jobs ADD COLUMN max_failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN ckpt_num_to_keep INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN ckpt_score_attribute TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN ckpt_score_max INTEGER NOT NULL DEFAULT 0;
ALTER TABLE attempts ADD COLUMN head_node TEXT NOT NULL DEFAULT '';
ALTER TABLE attempts ADD COLUMN head_run TEXT NOT NULL DEFAULT '';
)sql";

// Schema 2 -> 3: every job's definition (proto/job_definition.h), made from its stored spec.
constexpr const char* kMigrateTo3 = R"sql(
ALTER TABLE jobs ADD COLUMN definition TEXT NOT NULL DEFAULT '';
)sql";

// Schema 3 -> 4: where each attempt's ranks ran (AttemptRecord::rank_nodes); "" for the
// attempts before, whose logs are looked for on the node serving them.
constexpr const char* kMigrateTo4 = R"sql(
ALTER TABLE attempts ADD COLUMN placement TEXT NOT NULL DEFAULT '';
)sql";

// Schema 4 -> 5: when each command was applied, so that old request ids are forgotten
// (Fsm::kRememberAppliedMs); the rows before get 0, which the first command after
// replaces by its time (StateStore::Tx::ExpireApplied).
constexpr const char* kMigrateTo5 = R"sql(
ALTER TABLE applied ADD COLUMN time INTEGER NOT NULL DEFAULT 0;
)sql";

}  // namespace

Status StateStore::MigrateLocked() {
  auto version = [&] {
    Stmt s(stmts_, "SELECT value FROM meta WHERE key = 'schema_version'");
    return s.Step() ? std::atoi(s.Text(0).c_str()) : 0;
  };
  const int from = version();
  if (from == kSchemaVersion) return Status::Ok();
  if (from > kSchemaVersion || from < 1)
    return Status::FailedPrecondition("snapshot has schema version " + std::to_string(from) +
                                      ", this release reads 1 to " +
                                      std::to_string(kSchemaVersion));
  if (sqlite3_exec(db_, "BEGIN", nullptr, nullptr, nullptr) != SQLITE_OK)
    return Status::Internal(std::string("migrating the snapshot: ") + sqlite3_errmsg(db_));
  Status st = Status::Ok();
  try {
    if (from < 2) st = MigrateTo2Locked();
    if (st.ok() && from < 3) st = MigrateTo3Locked();
    if (st.ok() && from < 4) st = ExecLocked(kMigrateTo4, "migrating the snapshot to schema 4");
    if (st.ok() && from < 5) st = ExecLocked(kMigrateTo5, "migrating the snapshot to schema 5");
    if (st.ok()) {
      Stmt(stmts_, "UPDATE meta SET value = ? WHERE key = 'schema_version'")
          .Bind(1, std::to_string(kSchemaVersion))
          .Run();
    }
  } catch (...) {
    // A statement's StateWriteError: no transaction left open for the next BEGIN.
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  if (!st.ok()) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return st;
  }
  if (sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
    // SQLite rolled the transaction back (a full disk writing its pages).
    const std::string why = sqlite3_errmsg(db_);
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return Status::Internal("migrating the snapshot: " + why);
  }
  return Status::Ok();
}

Status StateStore::ExecLocked(const char* sql, const char* what) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) == SQLITE_OK) return Status::Ok();
  std::string msg = err ? err : sqlite3_errmsg(db_);
  sqlite3_free(err);
  return Status::Internal(std::string(what) + ": " + msg);
}

// The FSM's policies stored typed with the job (filled from the stored spec, the one time
// it is read after submit), and who started each attempt.
Status StateStore::MigrateTo2Locked() {
  if (Status st = ExecLocked(kMigrateTo2, "migrating the snapshot to schema 2"); !st.ok())
    return st;
  std::vector<std::pair<std::string, cmd::JobPolicy>> policies;
  {
    Stmt s(stmts_, "SELECT id, spec FROM jobs");
    while (s.Step())
      policies.emplace_back(s.Text(0), cmd::PolicyFromSpecJson(ParseJsonBounded(s.Text(1))));
  }
  for (const auto& [id, p] : policies) {
    Stmt(stmts_,
         "UPDATE jobs SET max_failures=?, ckpt_num_to_keep=?, ckpt_score_attribute=?, "
         "ckpt_score_max=? WHERE id=?")
        .Bind(1, p.max_failures)
        .Bind(2, p.num_to_keep)
        .Bind(3, p.score_attribute)
        .Bind(4, static_cast<int64_t>(p.score_max))
        .Bind(5, id)
        .Run();
  }
  return Status::Ok();
}

// Every job's definition, made from its stored spec (the one time it is validated again).
// A spec this release refuses leaves the definition empty: the head fails such a job if it
// is still waiting, with the reason, instead of running what it no longer accepts.
Status StateStore::MigrateTo3Locked() {
  if (Status st = ExecLocked(kMigrateTo3, "migrating the snapshot to schema 3"); !st.ok())
    return st;
  std::vector<std::pair<std::string, std::string>> definitions;
  {
    Stmt s(stmts_, "SELECT id, spec FROM jobs");
    while (s.Step()) {
      auto d = JobDefinitionFromSpec(ParseJsonBounded(s.Text(1)));
      if (d.ok()) definitions.emplace_back(s.Text(0), d->dump());
    }
  }
  for (const auto& [id, d] : definitions)
    Stmt(stmts_, "UPDATE jobs SET definition=? WHERE id=?").Bind(1, d).Bind(2, id).Run();
  return Status::Ok();
}

}  // namespace traintl
