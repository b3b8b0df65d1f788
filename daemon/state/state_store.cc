#include "daemon/state/state_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>

#include "common/json_depth.h"
#include "common/logging.h"
#include "daemon/state/sqlite_stmt.h"

namespace traintl {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT OR IGNORE INTO meta(key, value) VALUES('schema_version', '5');
CREATE TABLE IF NOT EXISTS jobs(
  id TEXT PRIMARY KEY, name TEXT NOT NULL, spec TEXT NOT NULL, state TEXT NOT NULL,
  attempt INTEGER NOT NULL, failures INTEGER NOT NULL, priority INTEGER NOT NULL,
  submitted_at INTEGER NOT NULL, started_at INTEGER, ended_at INTEGER,
  message TEXT NOT NULL, pending_reason TEXT NOT NULL, metrics TEXT NOT NULL,
  library_sha256 TEXT NOT NULL, library_path TEXT NOT NULL, trial_dir TEXT NOT NULL,
  stop_requested INTEGER NOT NULL, submission_id TEXT,
  max_failures INTEGER NOT NULL DEFAULT 0, ckpt_num_to_keep INTEGER NOT NULL DEFAULT 0,
  ckpt_score_attribute TEXT NOT NULL DEFAULT '', ckpt_score_max INTEGER NOT NULL DEFAULT 0,
  definition TEXT NOT NULL DEFAULT '');
CREATE UNIQUE INDEX IF NOT EXISTS jobs_by_submission ON jobs(submission_id)
  WHERE submission_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs(state);
CREATE INDEX IF NOT EXISTS jobs_by_time ON jobs(submitted_at);
CREATE INDEX IF NOT EXISTS jobs_by_newest ON jobs(submitted_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS jobs_by_name ON jobs(name, submitted_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS jobs_by_state_newest ON jobs(state, submitted_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS finished_jobs_by_end ON jobs(COALESCE(ended_at, submitted_at), id)
  WHERE state IN ('SUCCEEDED', 'FAILED', 'STOPPED');
CREATE TABLE IF NOT EXISTS attempts(
  job_id TEXT NOT NULL, attempt INTEGER NOT NULL, state TEXT NOT NULL,
  started_at INTEGER NOT NULL, ended_at INTEGER, restored_from TEXT NOT NULL,
  failed_rank INTEGER, exit_code INTEGER, signal INTEGER, reason TEXT NOT NULL,
  log_tail TEXT NOT NULL, head_node TEXT NOT NULL DEFAULT '',
  head_run TEXT NOT NULL DEFAULT '', placement TEXT NOT NULL DEFAULT '',
  PRIMARY KEY(job_id, attempt));
CREATE TABLE IF NOT EXISTS checkpoints(
  id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, attempt INTEGER NOT NULL,
  seq INTEGER NOT NULL, path TEXT NOT NULL, metrics TEXT NOT NULL, created_at INTEGER NOT NULL,
  UNIQUE(job_id, attempt, seq));
CREATE TABLE IF NOT EXISTS metrics(
  job_id TEXT NOT NULL, attempt INTEGER NOT NULL, seq INTEGER NOT NULL, time INTEGER NOT NULL,
  metrics TEXT NOT NULL, PRIMARY KEY(job_id, attempt, seq));
CREATE TABLE IF NOT EXISTS worker_events(
  job_id TEXT NOT NULL, attempt INTEGER NOT NULL, rank INTEGER NOT NULL, time INTEGER NOT NULL,
  event TEXT NOT NULL, detail TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS worker_events_by_job ON worker_events(job_id);
CREATE TABLE IF NOT EXISTS applied(rid TEXT PRIMARY KEY, result TEXT NOT NULL,
  time INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS experiments(
  id TEXT PRIMARY KEY, name TEXT NOT NULL, spec TEXT NOT NULL, seed INTEGER NOT NULL,
  state TEXT NOT NULL, message TEXT NOT NULL, created_at INTEGER NOT NULL, ended_at INTEGER,
  budget_from INTEGER NOT NULL, budget_used_ms INTEGER NOT NULL, exp_dir TEXT NOT NULL,
  library_sha256 TEXT NOT NULL, library_path TEXT NOT NULL, scheduler_state TEXT NOT NULL,
  trials_created INTEGER NOT NULL, submission_id TEXT);
CREATE UNIQUE INDEX IF NOT EXISTS experiments_by_submission ON experiments(submission_id)
  WHERE submission_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS experiments_by_name ON experiments(name, created_at DESC);
CREATE INDEX IF NOT EXISTS experiments_by_state ON experiments(state);
CREATE TABLE IF NOT EXISTS trials(
  experiment_id TEXT NOT NULL, idx INTEGER NOT NULL, name TEXT NOT NULL, config TEXT NOT NULL,
  job_id TEXT NOT NULL, jobs TEXT NOT NULL, status TEXT NOT NULL, reason TEXT NOT NULL,
  pending TEXT NOT NULL, created_at INTEGER NOT NULL, PRIMARY KEY(experiment_id, idx));
CREATE INDEX IF NOT EXISTS trials_by_job ON trials(job_id);
)sql";

// What refers to columns that migrations add: run after them.
constexpr const char* kSchemaAfterMigrations = R"sql(
CREATE INDEX IF NOT EXISTS applied_by_time ON applied(time);
)sql";

constexpr const char* kJobColumns =
    "id, name, spec, state, attempt, failures, priority, submitted_at, started_at, ended_at, "
    "message, pending_reason, metrics, library_sha256, library_path, trial_dir, stop_requested, "
    "max_failures, ckpt_num_to_keep, ckpt_score_attribute, ckpt_score_max, definition";

// kJobColumns with empty strings in the places of the spec and the definition (ReadJob
// reads by position).
constexpr const char* kJobColumnsWithoutSpec =
    "id, name, '', state, attempt, failures, priority, submitted_at, started_at, ended_at, "
    "message, pending_reason, metrics, library_sha256, library_path, trial_dir, stop_requested, "
    "max_failures, ckpt_num_to_keep, ckpt_score_attribute, ckpt_score_max, ''";

JobRecord ReadJob(const Stmt& s) {
  JobRecord j;
  j.id = s.Text(0);
  j.name = s.Text(1);
  j.spec = s.Text(2);
  j.state = s.Text(3);
  j.attempt = static_cast<int>(s.Int(4));
  j.failures = static_cast<int>(s.Int(5));
  j.priority = static_cast<int>(s.Int(6));
  j.submitted_at = s.Int(7);
  j.started_at = s.OptInt(8);
  j.ended_at = s.OptInt(9);
  j.message = s.Text(10);
  j.pending_reason = s.Text(11);
  j.metrics = s.Text(12);
  j.library_sha256 = s.Text(13);
  j.library_path = s.Text(14);
  j.trial_dir = s.Text(15);
  j.stop_requested = s.Int(16) != 0;
  j.policy.max_failures = static_cast<int>(s.Int(17));
  j.policy.num_to_keep = static_cast<int>(s.Int(18));
  j.policy.score_attribute = s.Text(19);
  j.policy.score_max = s.Int(20) != 0;
  j.definition = s.Text(21);
  return j;
}

constexpr const char* kAttemptColumns =
    "job_id, attempt, state, started_at, ended_at, restored_from, failed_rank, exit_code, "
    "signal, reason, log_tail, head_node, head_run, placement";

// The attempts.placement column: {"rank_nodes": [...], "addresses": {node: address}}, or ""
// when none was recorded.
std::string PlacementText(const AttemptRecord& a) {
  if (a.rank_nodes.empty()) return "";
  return nlohmann::json{{"rank_nodes", a.rank_nodes}, {"addresses", a.node_addresses}}.dump();
}

void PlacementFromText(const std::string& text, AttemptRecord* a) {
  if (text.empty()) return;
  nlohmann::json j = ParseJsonBounded(text);
  if (!j.is_object()) return;
  try {
    a->rank_nodes = j.value("rank_nodes", std::vector<std::string>{});
    a->node_addresses = j.value("addresses", std::map<std::string, std::string>{});
  } catch (const nlohmann::json::exception&) {
    a->rank_nodes.clear();
    a->node_addresses.clear();
  }
}

AttemptRecord ReadAttempt(const Stmt& s) {
  AttemptRecord a;
  a.job_id = s.Text(0);
  a.attempt = static_cast<int>(s.Int(1));
  a.state = s.Text(2);
  a.started_at = s.Int(3);
  a.ended_at = s.OptInt(4);
  a.restored_from = s.Text(5);
  a.failed_rank = s.OptInt32(6);
  a.exit_code = s.OptInt32(7);
  a.signal = s.OptInt32(8);
  a.reason = s.Text(9);
  a.log_tail = s.Text(10);
  a.head_node = s.Text(11);
  a.head_run = s.Text(12);
  PlacementFromText(s.Text(13), &a);
  return a;
}

constexpr const char* kCheckpointColumns = "id, job_id, attempt, seq, path, metrics, created_at";

CheckpointRecord ReadCheckpoint(const Stmt& s) {
  CheckpointRecord c;
  c.id = s.Int(0);
  c.job_id = s.Text(1);
  c.attempt = static_cast<int>(s.Int(2));
  c.seq = static_cast<int>(s.Int(3));
  c.path = s.Text(4);
  c.metrics = s.Text(5);
  c.created_at = s.Int(6);
  return c;
}

std::string Sql(const std::string& a, const char* cols, const std::string& b) {
  return a + cols + b;
}

std::optional<JobRecord> GetJobImpl(StmtCache& db, const std::string& id, bool with_spec = true) {
  Stmt s(db, Sql("SELECT ", with_spec ? kJobColumns : kJobColumnsWithoutSpec,
                 " FROM jobs WHERE id = ?"));
  s.Bind(1, id);
  if (!s.Step()) return std::nullopt;
  return ReadJob(s);
}

std::optional<AttemptRecord> GetAttemptImpl(StmtCache& db, const std::string& id, int attempt) {
  Stmt s(
      db,
      Sql("SELECT ", kAttemptColumns, " FROM attempts WHERE job_id = ? AND attempt = ?").c_str());
  s.Bind(1, id).Bind(2, attempt);
  if (!s.Step()) return std::nullopt;
  return ReadAttempt(s);
}

std::vector<CheckpointRecord> ListCheckpointsImpl(StmtCache& db, const std::string& id) {
  Stmt s(
      db,
      Sql("SELECT ", kCheckpointColumns, " FROM checkpoints WHERE job_id = ? ORDER BY id").c_str());
  s.Bind(1, id);
  std::vector<CheckpointRecord> out;
  while (s.Step()) out.push_back(ReadCheckpoint(s));
  return out;
}

// The store's file is rebuilt at every start, so it is written without fsync.
Status WriteScratchFile(const std::string& path, const std::string& data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Internal("cannot create " + path + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      return Status::Internal("cannot write " + path + ": " + std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return Status::Ok();
}

// PRAGMA quick_check of `db`: OK when SQLite finds the database sound.
Status QuickCheck(sqlite3* db) {
  std::string result;
  char* err = nullptr;
  const int rc = sqlite3_exec(
      db, "PRAGMA quick_check(1)",
      [](void* out, int n, char** values, char**) {
        if (n > 0 && values[0] != nullptr) *static_cast<std::string*>(out) = values[0];
        return 0;
      },
      &result, &err);
  if (rc != SQLITE_OK) {
    Status st = Status::Internal(std::string("not a database: ") + (err ? err : "?"));
    sqlite3_free(err);
    return st;
  }
  if (result != "ok") return Status::Internal("a damaged database: " + result);
  return Status::Ok();
}

}  // namespace

bool IsTerminalJobState(const std::string& state) {
  return state == kJobSucceeded || state == kJobFailed || state == kJobStopped;
}

StateStore::StateStore() : stmts_(nullptr) {
  std::lock_guard<std::mutex> l(mu_);
  OpenFresh();
}

StateStore::~StateStore() {
  stmts_.Clear();  // a connection with live statements does not close
  sqlite3_close(db_);
}

void StateStore::OpenFresh() {
  if (file_.path.empty()) {
    if (sqlite3_open_v2(":memory:", &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
        SQLITE_OK) {
      std::abort();
    }
  } else {
    ::unlink(file_.path.c_str());
    if (Status st = OpenFileLocked(file_.path); !st.ok()) {
      LOG_ERROR << "state store: " << st.message();
      std::abort();
    }
  }
  CreateSchemaLocked();
}

void StateStore::CreateSchemaLocked() {
  stmts_.Clear(db_);
  ExecOrDie(db_, kSchema);
  ExecOrDie(db_, kSchemaAfterMigrations);
}

Status StateStore::OpenFileLocked(const std::string& path) {
  db_ = nullptr;
  if (int rc = sqlite3_open_v2(path.c_str(), &db_,
                               SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOFOLLOW,
                               nullptr);
      rc != SQLITE_OK) {
    std::string msg = db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close(db_);
    db_ = nullptr;
    return Status::Internal("cannot open " + path + ": " + msg);
  }
  // The file is scratch (Raft rebuilds it at start), so it is never synced; the journal
  // stays in memory (a transaction's old pages, for ROLLBACK); one connection, so the
  // lock is taken once.
  const std::string pragmas =
      "PRAGMA synchronous = OFF; PRAGMA journal_mode = MEMORY; "
      "PRAGMA locking_mode = EXCLUSIVE; PRAGMA cache_size = -" +
      std::to_string(file_.cache_kib) + ";";
  char* err = nullptr;
  if (sqlite3_exec(db_, pragmas.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err != nullptr ? err : "?";
    sqlite3_free(err);
    sqlite3_close(db_);
    db_ = nullptr;
    return Status::Internal("cannot set up " + path + ": " + msg);
  }
  return Status::Ok();
}

Status StateStore::UseFile(const FileOptions& options) {
  if (options.path.empty()) return Status::InvalidArgument("state store: no file");
  if (options.cache_kib <= 0) return Status::InvalidArgument("state store: cache_kib <= 0");
  std::lock_guard<std::mutex> l(mu_);
  // Fresh databases only: what is in memory is not carried over.
  stmts_.Clear();
  sqlite3_close(db_);
  file_ = options;
  ::unlink(file_.path.c_str());
  ::unlink((file_.path + ".restoring").c_str());  // a restore's, cut short by a crash
  if (Status st = OpenFileLocked(file_.path); !st.ok()) {
    file_ = FileOptions{};
    OpenFresh();
    return st;
  }
  CreateSchemaLocked();
  return Status::Ok();
}

std::optional<JobRecord> StateStore::GetJob(const std::string& id, bool with_spec) const {
  std::lock_guard<std::mutex> l(mu_);
  return GetJobImpl(stmts_, id, with_spec);
}

Result<std::string> StateStore::ResolveJobId(const std::string& ref,
                                             std::vector<std::string>* candidates) const {
  if (ref.empty()) return Status::InvalidArgument("empty job id");
  const bool hex = ref.find_first_not_of("0123456789abcdef") == std::string::npos;
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::string> ids;
  if (hex) {
    // The prefix is hex-only, so it cannot carry LIKE wildcards; a range scan of the key.
    Stmt s(stmts_, "SELECT id FROM jobs WHERE id >= ? AND id < ? ORDER BY id LIMIT 11");
    s.Bind(1, ref).Bind(2, ref + "g");
    while (s.Step()) ids.push_back(s.Text(0));
    for (const auto& id : ids)
      if (id == ref) return id;
  }
  std::optional<std::string> named;
  {
    Stmt s(stmts_,
           "SELECT id FROM jobs WHERE name = ? ORDER BY submitted_at DESC, id DESC LIMIT 1");
    s.Bind(1, ref);
    if (s.Step()) named = s.Text(0);
  }
  if (ids.empty()) {
    if (named) return *named;
    return Status::NotFound("no job with the id, id prefix or name " + ref);
  }
  if (ids.size() == 1 && (!named || *named == ids[0])) return ids[0];
  if (named && std::find(ids.begin(), ids.end(), *named) == ids.end()) ids.push_back(*named);
  if (candidates != nullptr) *candidates = ids;
  return Status::FailedPrecondition(named ? ref + " is both the name of job " + *named +
                                                " and a prefix of other job ids"
                                          : "job prefix " + ref + " is ambiguous");
}

std::vector<JobRecord> StateStore::ListJobs(size_t limit) const {
  JobQuery q;
  q.limit = limit;
  return ListJobs(q).jobs;
}

StateStore::JobPage StateStore::ListJobs(const JobQuery& q) const {
  // Filters and the cursor are spelled into the SQL only when set, so that each shape is
  // one cached statement the planner serves from an index (jobs_by_newest, jobs_by_name,
  // jobs_by_state_newest) instead of scanning the table.
  std::string sql = Sql("SELECT ", kJobColumns, " FROM jobs WHERE 1");
  if (!q.state.empty()) sql += " AND state = :state";
  if (!q.name.empty()) sql += " AND name = :name";
  if (q.before) sql += " AND (submitted_at < :at OR (submitted_at = :at AND id < :id))";
  sql += " ORDER BY submitted_at DESC, id DESC LIMIT :limit";
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(stmts_, sql);
  if (!q.state.empty()) s.Bind(":state", q.state);
  if (!q.name.empty()) s.Bind(":name", q.name);
  if (q.before) s.Bind(":at", q.before->first).Bind(":id", q.before->second);
  // One more than asked says whether another page follows.
  s.Bind(":limit", q.limit > 0 ? static_cast<int64_t>(q.limit) + 1 : int64_t{-1});
  JobPage page;
  while (s.Step()) page.jobs.push_back(ReadJob(s));
  if (q.limit > 0 && page.jobs.size() > q.limit) {
    page.jobs.pop_back();
    page.more = true;
  }
  return page;
}

namespace {

// Retention leaves alone the jobs of a RUNNING experiment's trials, finished or not: its
// scheduler still reads their histories (and PBT their checkpoints). SQLite runs the
// subquery once, into an ephemeral index.
constexpr const char* kNotOfRunningExperiment =
    "id NOT IN (SELECT j.value FROM experiments e JOIN trials t ON t.experiment_id = e.id, "
    "json_each(t.jobs) j WHERE e.state = 'RUNNING')";

}  // namespace

std::vector<std::string> StateStore::ExpiredJobs(int keep, int64_t ended_before_ms,
                                                 size_t limit) const {
  std::lock_guard<std::mutex> l(mu_);
  // Either limit deletes: a job past the count, or past the age. A job without ended_at
  // counts as ended at its submission. The queries walk finished_jobs_by_end (a partial
  // index on that expression; named, as the planner would rather sort by state), so a
  // pass costs O(keep + limit), not a sort of every job.
  std::vector<std::pair<int64_t, std::string>> found;
  if (keep > 0) {
    // The oldest job kept; every finished job before it goes, oldest first.
    Stmt last(
        stmts_,
        "SELECT COALESCE(ended_at, submitted_at), id FROM jobs INDEXED BY finished_jobs_by_end "
        "WHERE state IN ('SUCCEEDED', 'FAILED', 'STOPPED') "
        "ORDER BY COALESCE(ended_at, submitted_at) DESC, id DESC LIMIT 1 OFFSET :keep");
    last.Bind(":keep", static_cast<int64_t>(keep - 1));
    if (last.Step()) {
      Stmt s(stmts_, Sql("SELECT COALESCE(ended_at, submitted_at), id FROM jobs INDEXED BY "
                         "finished_jobs_by_end WHERE state IN ('SUCCEEDED', 'FAILED', 'STOPPED') "
                         "AND (COALESCE(ended_at, submitted_at) < :t OR "
                         "(COALESCE(ended_at, submitted_at) = :t AND id < :id)) AND ",
                         kNotOfRunningExperiment,
                         " ORDER BY COALESCE(ended_at, submitted_at), id LIMIT :limit")
                         .c_str());
      s.Bind(":t", last.Int(0))
          .Bind(":id", last.Text(1))
          .Bind(":limit", static_cast<int64_t>(limit));
      while (s.Step()) found.emplace_back(s.Int(0), s.Text(1));
    }
  }
  if (ended_before_ms > 0) {
    Stmt s(stmts_, Sql("SELECT COALESCE(ended_at, submitted_at), id FROM jobs INDEXED BY "
                       "finished_jobs_by_end WHERE state IN ('SUCCEEDED', 'FAILED', 'STOPPED') "
                       "AND COALESCE(ended_at, submitted_at) < :cutoff AND ",
                       kNotOfRunningExperiment,
                       " ORDER BY COALESCE(ended_at, submitted_at), id LIMIT :limit")
                       .c_str());
    s.Bind(":cutoff", ended_before_ms).Bind(":limit", static_cast<int64_t>(limit));
    while (s.Step()) found.emplace_back(s.Int(0), s.Text(1));
  }
  std::sort(found.begin(), found.end());
  found.erase(std::unique(found.begin(), found.end()), found.end());
  std::vector<std::string> out;
  for (const auto& [t, id] : found) {
    if (out.size() == limit) break;
    out.push_back(id);
  }
  return out;
}

std::vector<JobRecord> StateStore::ListActiveJobs(bool with_spec) const {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(stmts_, Sql("SELECT ", with_spec ? kJobColumns : kJobColumnsWithoutSpec,
                     " FROM jobs WHERE state IN ('PENDING', 'STARTING', 'RUNNING') "
                     "ORDER BY priority DESC, submitted_at, id")
                     .c_str());
  std::vector<JobRecord> out;
  while (s.Step()) out.push_back(ReadJob(s));
  return out;
}

std::vector<std::string> StateStore::ActiveLibraryHashes() const {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(stmts_,
         "SELECT DISTINCT library_sha256 FROM jobs WHERE state IN ('PENDING', 'STARTING', "
         "'RUNNING') AND library_sha256 <> '' ORDER BY library_sha256");
  std::vector<std::string> out;
  while (s.Step()) out.push_back(s.Text(0));
  return out;
}

std::vector<AttemptRecord> StateStore::ListAttempts(const std::string& job_id) const {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(stmts_,
         Sql("SELECT ", kAttemptColumns, " FROM attempts WHERE job_id = ? ORDER BY attempt"));
  s.Bind(1, job_id);
  std::vector<AttemptRecord> out;
  while (s.Step()) out.push_back(ReadAttempt(s));
  return out;
}

std::optional<AttemptRecord> StateStore::GetAttempt(const std::string& job_id, int attempt) const {
  std::lock_guard<std::mutex> l(mu_);
  return GetAttemptImpl(stmts_, job_id, attempt);
}

std::vector<CheckpointRecord> StateStore::ListCheckpoints(const std::string& job_id) const {
  std::lock_guard<std::mutex> l(mu_);
  return ListCheckpointsImpl(stmts_, job_id);
}

std::optional<CheckpointRecord> StateStore::LatestCheckpoint(const std::string& job_id) const {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(stmts_, Sql("SELECT ", kCheckpointColumns,
                     " FROM checkpoints WHERE job_id = ? ORDER BY id DESC LIMIT 1")
                     .c_str());
  s.Bind(1, job_id);
  if (!s.Step()) return std::nullopt;
  return ReadCheckpoint(s);
}

std::vector<MetricRecord> StateStore::ListMetrics(const std::string& job_id, int64_t since_ms,
                                                  int64_t skip) const {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(stmts_,
         "SELECT job_id, attempt, seq, time, metrics FROM metrics WHERE job_id = ? AND time >= ? "
         "ORDER BY attempt, seq LIMIT -1 OFFSET ?");
  s.Bind(1, job_id).Bind(2, since_ms).Bind(3, skip);
  std::vector<MetricRecord> out;
  while (s.Step()) {
    MetricRecord m;
    m.job_id = s.Text(0);
    m.attempt = static_cast<int>(s.Int(1));
    m.seq = static_cast<int>(s.Int(2));
    m.time = s.Int(3);
    m.metrics = s.Text(4);
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<WorkerEventRecord> StateStore::ListWorkerEvents(const std::string& job_id) const {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(stmts_,
         "SELECT job_id, attempt, rank, time, event, detail FROM worker_events WHERE job_id = ? "
         "ORDER BY rowid");
  s.Bind(1, job_id);
  std::vector<WorkerEventRecord> out;
  while (s.Step()) {
    WorkerEventRecord e;
    e.job_id = s.Text(0);
    e.attempt = static_cast<int>(s.Int(1));
    e.rank = static_cast<int>(s.Int(2));
    e.time = s.Int(3);
    e.event = s.Text(4);
    e.detail = s.Text(5);
    out.push_back(std::move(e));
  }
  return out;
}

std::optional<std::string> StateStore::GetMeta(const std::string& key) const {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(stmts_, "SELECT value FROM meta WHERE key = ?");
  s.Bind(1, key);
  if (!s.Step()) return std::nullopt;
  return s.Text(0);
}

void StateStore::Tx::SetMeta(const std::string& key, const std::string& value) {
  Stmt(stmts_, "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)")
      .Bind(1, key)
      .Bind(2, value)
      .Run();
}

int64_t StateStore::CountJobs() const {
  std::lock_guard<std::mutex> l(mu_);
  Stmt s(stmts_, "SELECT count(*) FROM jobs");
  s.Step();
  return s.Int(0);
}

int64_t StateStore::CacheUsedBytes() const {
  std::lock_guard<std::mutex> l(mu_);
  int used = 0, highwater = 0;
  sqlite3_db_status(db_, SQLITE_DBSTATUS_CACHE_USED, &used, &highwater, 0);
  return used;
}

Result<std::string> StateStore::Serialize() const {
  std::lock_guard<std::mutex> l(mu_);
  sqlite3_int64 size = 0;
  unsigned char* p = sqlite3_serialize(db_, "main", &size, 0);
  if (p == nullptr) return Status::Internal("sqlite3_serialize failed");
  std::string out(reinterpret_cast<const char*>(p), static_cast<size_t>(size));
  sqlite3_free(p);
  return out;
}

Status StateStore::Restore(const std::string& image) {
  std::lock_guard<std::mutex> l(mu_);
  // The statements were planned for the database being replaced.
  stmts_.Clear();
  if (!file_.path.empty()) return RestoreFileLocked(image);
  auto* p = static_cast<unsigned char*>(sqlite3_malloc64(image.size()));
  if (p == nullptr && !image.empty()) return Status::ResourceExhausted("out of memory");
  std::memcpy(p, image.data(), image.size());
  int rc = sqlite3_deserialize(db_, "main", p, static_cast<sqlite3_int64>(image.size()),
                               static_cast<sqlite3_int64>(image.size()),
                               SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_RESIZEABLE);
  if (rc != SQLITE_OK) {
    // The previous contents are gone; start from an empty schema rather than a broken one.
    sqlite3_close(db_);
    OpenFresh();
    return Status::Internal(std::string("cannot restore snapshot: ") + sqlite3_errstr(rc));
  }
  return FinishRestoreLocked();
}

Status StateStore::RestoreFileLocked(const std::string& image) {
  // A serialized database is the database file's bytes: they become the file. It is
  // written beside the database, opened there and brought up to this release's schema
  // before it replaces it: a restore that fails (a full disk, a broken image, a migration)
  // leaves the state as it was, which is what Raft assumes of a snapshot it could not
  // install (the follower's applied index stays).
  const std::string tmp = file_.path + ".restoring";
  Status st = WriteScratchFile(tmp, image);
  sqlite3* const old = db_;
  if (st.ok()) st = OpenFileLocked(tmp);
  if (st.ok()) {
    stmts_.Clear(db_);
    // A file that is not a database, or a damaged one, fails here rather than in a
    // statement later (which aborts the daemon on corruption).
    st = QuickCheck(db_);
    try {
      if (st.ok()) st = FinishRestoreLocked();
    } catch (const std::exception& e) {  // StateWriteError from a statement
      st = Status::Internal(e.what());
    }
    // An open database may be renamed: its journal is in memory, its lock on the inode.
    if (st.ok() && ::rename(tmp.c_str(), file_.path.c_str()) != 0)
      st = Status::Internal("cannot rename " + tmp + ": " + std::strerror(errno));
    if (!st.ok()) {
      stmts_.Clear();  // statements of the new database: it closes only without them
      sqlite3_close(db_);
    }
  }
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    db_ = old;
    stmts_.Clear(db_);
    return Status::Internal("cannot restore snapshot: " + st.message());
  }
  sqlite3_close(old);
  return Status::Ok();
}

Status StateStore::FinishRestoreLocked() {
  // Snapshots from an older schema gain new tables here (migrations are additive).
  char* err = nullptr;
  if (sqlite3_exec(db_, kSchema, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "?";
    sqlite3_free(err);
    return Status::Internal("snapshot schema: " + msg);
  }
  TRAINTL_RETURN_IF_ERROR(MigrateLocked());
  return ExecLocked(kSchemaAfterMigrations, "snapshot schema");
}

std::string StateStore::Mutate(const std::function<std::string(Tx&)>& fn) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt(stmts_, "BEGIN").Run();
  try {
    Tx tx(db_, stmts_);
    std::string result = fn(tx);
    Stmt(stmts_, "COMMIT").Run();
    return result;
  } catch (...) {
    // Else the transaction stays open, half applied, and the next BEGIN aborts the daemon.
    // (A failed COMMIT may have rolled back already: ROLLBACK then fails, harmlessly.)
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

// ---- Tx ----

std::optional<std::string> StateStore::Tx::AppliedResult(const std::string& rid) {
  Stmt s(stmts_, "SELECT result FROM applied WHERE rid = ?");
  s.Bind(1, rid);
  if (!s.Step()) return std::nullopt;
  return s.Text(0);
}

void StateStore::Tx::RecordApplied(const std::string& rid, const std::string& result,
                                   int64_t time) {
  Stmt(stmts_, "INSERT OR REPLACE INTO applied(rid, result, time) VALUES(?, ?, ?)")
      .Bind(1, rid)
      .Bind(2, result)
      .Bind(3, time)
      .Run();
}

void StateStore::Tx::ExpireApplied(int64_t now, int64_t keep_ms) {
  // Rows of a snapshot from before schema 5 have no time (0): they start their window
  // with the first command after it.
  Stmt(stmts_, "UPDATE applied SET time = ? WHERE time = 0").Bind(1, now).Run();
  Stmt(stmts_, "DELETE FROM applied WHERE time < ?").Bind(1, now - keep_ms).Run();
}

std::optional<std::string> StateStore::Tx::JobIdForSubmission(const std::string& sid) {
  Stmt s(stmts_, "SELECT id FROM jobs WHERE submission_id = ?");
  s.Bind(1, sid);
  if (!s.Step()) return std::nullopt;
  return s.Text(0);
}

bool StateStore::Tx::SetPendingReason(const std::string& id, const std::string& reason) {
  Stmt(stmts_,
       "UPDATE jobs SET pending_reason = ?1 WHERE id = ?2 AND state = 'PENDING' AND "
       "pending_reason <> ?1")
      .Bind(1, reason)
      .Bind(2, id)
      .Run();
  return sqlite3_changes(db_) > 0;
}

bool StateStore::Tx::JobExists(const std::string& id) {
  Stmt s(stmts_, "SELECT 1 FROM jobs WHERE id = ?");
  s.Bind(1, id);
  return s.Step();
}

std::optional<JobRecord> StateStore::Tx::GetJob(const std::string& id) {
  return GetJobImpl(stmts_, id);
}

void StateStore::Tx::InsertJob(const JobRecord& j, const std::string& submission_id) {
  Stmt s(stmts_, Sql("INSERT INTO jobs(", kJobColumns,
                     ", submission_id) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)")
                     .c_str());
  s.Bind(1, j.id).Bind(2, j.name).Bind(3, j.spec).Bind(4, j.state).Bind(5, j.attempt);
  s.Bind(6, j.failures).Bind(7, j.priority).Bind(8, j.submitted_at).Bind(9, j.started_at);
  s.Bind(10, j.ended_at).Bind(11, j.message).Bind(12, j.pending_reason).Bind(13, j.metrics);
  s.Bind(14, j.library_sha256).Bind(15, j.library_path).Bind(16, j.trial_dir);
  s.Bind(17, static_cast<int64_t>(j.stop_requested)).Bind(18, j.policy.max_failures);
  s.Bind(19, j.policy.num_to_keep).Bind(20, j.policy.score_attribute);
  s.Bind(21, static_cast<int64_t>(j.policy.score_max)).Bind(22, j.definition);
  if (submission_id.empty()) {
    s.BindNull(23);
  } else {
    s.Bind(23, submission_id);
  }
  s.Run();
}

void StateStore::Tx::UpdateJob(const JobRecord& j) {
  Stmt s(stmts_,
         "UPDATE jobs SET state=?, attempt=?, failures=?, started_at=?, ended_at=?, message=?, "
         "pending_reason=?, metrics=?, stop_requested=? WHERE id=?");
  s.Bind(1, j.state).Bind(2, j.attempt).Bind(3, j.failures).Bind(4, j.started_at);
  s.Bind(5, j.ended_at).Bind(6, j.message).Bind(7, j.pending_reason).Bind(8, j.metrics);
  s.Bind(9, static_cast<int64_t>(j.stop_requested)).Bind(10, j.id);
  s.Run();
}

void StateStore::Tx::InsertAttempt(const AttemptRecord& a) {
  Stmt s(stmts_, Sql("INSERT OR REPLACE INTO attempts(", kAttemptColumns,
                     ") VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)")
                     .c_str());
  s.Bind(1, a.job_id).Bind(2, a.attempt).Bind(3, a.state).Bind(4, a.started_at);
  s.Bind(5, a.ended_at).Bind(6, a.restored_from).Bind(7, a.failed_rank).Bind(8, a.exit_code);
  s.Bind(9, a.signal).Bind(10, a.reason).Bind(11, a.log_tail).Bind(12, a.head_node);
  s.Bind(13, a.head_run).Bind(14, PlacementText(a));
  s.Run();
}

void StateStore::Tx::UpdateAttempt(const AttemptRecord& a) { InsertAttempt(a); }

std::optional<AttemptRecord> StateStore::Tx::GetAttempt(const std::string& job_id, int attempt) {
  return GetAttemptImpl(stmts_, job_id, attempt);
}

void StateStore::Tx::UpsertMetric(const MetricRecord& m) {
  Stmt(stmts_,
       "INSERT OR REPLACE INTO metrics(job_id, attempt, seq, time, metrics) "
       "VALUES(?,?,?,?,?)")
      .Bind(1, m.job_id)
      .Bind(2, m.attempt)
      .Bind(3, m.seq)
      .Bind(4, m.time)
      .Bind(5, m.metrics)
      .Run();
}

int64_t StateStore::Tx::InsertCheckpoint(const CheckpointRecord& c) {
  {
    Stmt s(stmts_, "SELECT id FROM checkpoints WHERE job_id=? AND attempt=? AND seq=?");
    s.Bind(1, c.job_id).Bind(2, c.attempt).Bind(3, c.seq);
    if (s.Step()) return s.Int(0);
  }
  Stmt(stmts_,
       "INSERT INTO checkpoints(job_id, attempt, seq, path, metrics, created_at) "
       "VALUES(?,?,?,?,?,?)")
      .Bind(1, c.job_id)
      .Bind(2, c.attempt)
      .Bind(3, c.seq)
      .Bind(4, c.path)
      .Bind(5, c.metrics)
      .Bind(6, c.created_at)
      .Run();
  return sqlite3_last_insert_rowid(db_);
}

std::vector<CheckpointRecord> StateStore::Tx::ListCheckpoints(const std::string& job_id) {
  return ListCheckpointsImpl(stmts_, job_id);
}

void StateStore::Tx::DeleteCheckpoint(int64_t id) {
  Stmt(stmts_, "DELETE FROM checkpoints WHERE id = ?").Bind(1, id).Run();
}

void StateStore::Tx::DeleteJob(const std::string& id) {
  for (const char* sql :
       {"DELETE FROM attempts WHERE job_id = ?", "DELETE FROM checkpoints WHERE job_id = ?",
        "DELETE FROM metrics WHERE job_id = ?", "DELETE FROM worker_events WHERE job_id = ?",
        "DELETE FROM jobs WHERE id = ?"})
    Stmt(stmts_, sql).Bind(1, id).Run();
}

void StateStore::Tx::InsertWorkerEvent(const WorkerEventRecord& e) {
  Stmt(stmts_,
       "INSERT INTO worker_events(job_id, attempt, rank, time, event, detail) "
       "VALUES(?,?,?,?,?,?)")
      .Bind(1, e.job_id)
      .Bind(2, e.attempt)
      .Bind(3, e.rank)
      .Bind(4, e.time)
      .Bind(5, e.event)
      .Bind(6, e.detail)
      .Run();
}

}  // namespace traintl
