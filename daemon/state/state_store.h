// StateStore: the cluster's records (jobs, attempts, checkpoints, metrics, worker events,
// applied request ids) in a SQLite database: in memory until UseFile() moves it into a
// scratch file, which is what the daemon does.
//
// Durability comes from the Raft log, not from this database: the FSM (fsm.h) is the only
// writer, and after a restart Raft rebuilds the database from its latest snapshot
// (Serialize/Restore) plus the log entries after it. So kill -9 loses nothing committed,
// and the file is never synced: it is rebuilt at every start. It exists so that memory
// does not grow with the jobs stored: SQLite keeps at most `cache_kib` of its pages in
// memory, the rest stays in the file (the OS's page cache, not the daemon's RSS).
//
// Thread-safety: every public method locks mu_. Writers go through Mutate(), which holds
// mu_ and one SQLite transaction for the whole callback, so readers never see half a
// command.
#pragma once

#include <sqlite3.h>

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/thread_annotations.h"
#include "daemon/state/records.h"
#include "daemon/state/sqlite_stmt.h"

namespace traintl {

class StateStore {
 public:
  StateStore();
  ~StateStore();
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  // Where a file-backed store keeps its pages.
  struct FileOptions {
    std::string path;  // the scratch file; replaced (no default: required)
    // Pages SQLite keeps in memory, in KiB. Default 4096: the hot pages of the active
    // jobs and of the indexes used by listing stay cached.
    int cache_kib = 4096;
  };
  // Moves the (empty) store into a fresh file at options.path, replacing any file there:
  // call once, before Raft restores anything, with the data dir locked. Thread-safe.
  Status UseFile(const FileOptions& options);

  // ---- reads (thread-safe) ----
  // Without `with_spec` the spec field is left empty (see ListActiveJobs).
  std::optional<JobRecord> GetJob(const std::string& id, bool with_spec = true) const;
  // Resolves what a user calls a job: its id, a unique id prefix, or its name (the newest
  // job of that name). NotFound; or FailedPrecondition with the ids it could mean in
  // `candidates` (a prefix of several ids, or a name that is also another job's prefix).
  Result<std::string> ResolveJobId(const std::string& ref,
                                   std::vector<std::string>* candidates = nullptr) const;
  std::vector<JobRecord> ListJobs(size_t limit = 0) const;  // newest first; 0 = all
  // What a page of the job list selects.
  struct JobQuery {
    std::string state;  // only jobs in this state; "" (default) = any
    std::string name;   // only jobs of this name; "" (default) = any
    size_t limit = 0;   // at most this many; 0 (default) = all
    // Only jobs older than this (submitted_at, id) position, the last one of the previous
    // page: newest first, ties by id descending. Default: unset (from the newest).
    std::optional<std::pair<int64_t, std::string>> before;
  };
  struct JobPage {
    std::vector<JobRecord> jobs;  // newest first
    bool more = false;            // more jobs match after the last one
  };
  JobPage ListJobs(const JobQuery& query) const;
  // Finished jobs (SUCCEEDED, FAILED, STOPPED) beyond the newest `keep` of them (by end
  // time; 0 = no count limit) or that ended before `ended_before_ms` (0 = no age limit),
  // oldest first, at most `limit`. Never the jobs of a RUNNING experiment's trials (they
  // still count towards `keep`).
  std::vector<std::string> ExpiredJobs(int keep, int64_t ended_before_ms, size_t limit) const;
  // Jobs in PENDING, STARTING or RUNNING, by priority desc then submit time. Without
  // `with_spec` the spec field is left empty: the head's scheduling pass reads every
  // active job several times a second and keeps the (immutable) specs it parsed.
  std::vector<JobRecord> ListActiveJobs(bool with_spec = true) const;
  // The distinct non-empty library hashes of PENDING, STARTING and RUNNING jobs (what a
  // voter keeps a copy of), without reading the jobs' rows.
  std::vector<std::string> ActiveLibraryHashes() const;
  std::vector<AttemptRecord> ListAttempts(const std::string& job_id) const;
  std::optional<AttemptRecord> GetAttempt(const std::string& job_id, int attempt) const;
  std::vector<CheckpointRecord> ListCheckpoints(const std::string& job_id) const;  // oldest first
  std::optional<CheckpointRecord> LatestCheckpoint(const std::string& job_id) const;
  // Reports committed at or after `since_ms` (0: all), in (attempt, seq) order, without
  // the first `skip` of them.
  std::vector<MetricRecord> ListMetrics(const std::string& job_id, int64_t since_ms = 0,
                                        int64_t skip = 0) const;
  std::vector<WorkerEventRecord> ListWorkerEvents(const std::string& job_id) const;
  int64_t CountJobs() const;
  // Bytes of database pages SQLite holds in memory now (all of them in memory; at most
  // about FileOptions::cache_kib in a file).
  int64_t CacheUsedBytes() const;
  // Cluster metadata (e.g. "voter_api:<raft id>" -> API address); nullopt when unset.
  std::optional<std::string> GetMeta(const std::string& key) const;

  // What /metrics counts: rows by state, and attempts beyond each job's first.
  struct Counts {
    std::map<std::string, int64_t> jobs;         // state -> jobs
    std::map<std::string, int64_t> attempts;     // state -> attempts
    std::map<std::string, int64_t> experiments;  // state -> experiments
    int64_t restarts = 0;
  };
  Counts CountByState() const;

  // ---- tuning experiments (experiment_store.cc; thread-safe) ----
  std::optional<ExperimentRecord> GetExperiment(const std::string& id) const;
  // An experiment's id, unique id prefix or name (the newest of that name); NotFound, or
  // FailedPrecondition naming the candidates.
  Result<std::string> ResolveExperimentId(const std::string& ref) const;
  // Newest first; only RUNNING ones with `running_only`; at most `limit` (0 = all).
  std::vector<ExperimentRecord> ListExperiments(bool running_only, size_t limit = 0) const;
  std::vector<TrialRecord> ListTrials(const std::string& experiment_id) const;  // by index
  // How many reports of `job_id` are stored (cheaper than ListMetrics).
  int64_t CountMetrics(const std::string& job_id) const;
  // The trial whose current job is `job_id`, if any.
  std::optional<TrialRecord> TrialOfJob(const std::string& job_id) const;

  // ---- snapshot (thread-safe) ----
  Result<std::string> Serialize() const;
  Status Restore(const std::string& image);

  // ---- writes: only the FSM ----
  // A handle valid inside Mutate(); every method runs in the surrounding transaction.
  class Tx {
   public:
    std::optional<std::string> AppliedResult(const std::string& rid);
    // `time`: the command's (its entry's time); what ExpireApplied compares.
    void RecordApplied(const std::string& rid, const std::string& result, int64_t time);
    // Drops the results of commands older than now - keep_ms (their rids are forgotten).
    void ExpireApplied(int64_t now, int64_t keep_ms);
    std::optional<std::string> JobIdForSubmission(const std::string& submission_id);
    std::optional<JobRecord> GetJob(const std::string& id);
    bool JobExists(const std::string& id);
    // Sets a PENDING job's reason; false when the job is not PENDING (or has it already).
    bool SetPendingReason(const std::string& id, const std::string& reason);
    void InsertJob(const JobRecord& job, const std::string& submission_id);
    void UpdateJob(const JobRecord& job);
    void InsertAttempt(const AttemptRecord& a);
    void UpdateAttempt(const AttemptRecord& a);
    std::optional<AttemptRecord> GetAttempt(const std::string& job_id, int attempt);
    void UpsertMetric(const MetricRecord& m);
    // Returns the new checkpoint's id; an existing (job, attempt, seq) returns its id.
    int64_t InsertCheckpoint(const CheckpointRecord& c);
    std::vector<CheckpointRecord> ListCheckpoints(const std::string& job_id);
    void DeleteCheckpoint(int64_t id);
    // The job's row and every record of it (attempts, checkpoints, metrics, events).
    void DeleteJob(const std::string& id);
    void InsertWorkerEvent(const WorkerEventRecord& e);
    void SetMeta(const std::string& key, const std::string& value);
    // Tuning experiments (experiment_store.cc).
    std::optional<ExperimentRecord> GetExperiment(const std::string& id);
    std::optional<std::string> ExperimentIdForSubmission(const std::string& submission_id);
    void InsertExperiment(const ExperimentRecord& e, const std::string& submission_id);
    void UpdateExperiment(const ExperimentRecord& e);
    std::optional<TrialRecord> GetTrial(const std::string& experiment_id, int index);
    std::vector<TrialRecord> ListTrials(const std::string& experiment_id);  // by index
    void UpsertTrial(const TrialRecord& t);
    // The experiment's row and its trials' (not their jobs).
    void DeleteExperiment(const std::string& id);

   private:
    friend class StateStore;
    Tx(sqlite3* db, StmtCache& stmts) : db_(db), stmts_(stmts) {}
    sqlite3* db_;
    StmtCache& stmts_;
  };
  // Runs fn inside one transaction under mu_; returns what fn returns. A SQLite failure
  // here is a broken invariant (in-memory database, schema we own) and aborts.
  std::string Mutate(const std::function<std::string(Tx&)>& fn);

 private:
  // The schema this release writes; Restore migrates images of older ones.
  static constexpr int kSchemaVersion = 5;

  // A fresh, empty database (schema only): in memory, or in file_.path when set. Aborts
  // when SQLite cannot open it (a new in-memory database, or a file UseFile opened once).
  void OpenFresh() TRAINTL_REQUIRES(mu_);
  // The schema in the empty database db_, its statements forgotten.
  void CreateSchemaLocked() TRAINTL_REQUIRES(mu_);
  // Opens `path` (file_.path, or an image being restored beside it) as db_ with the
  // scratch file's settings.
  Status OpenFileLocked(const std::string& path) TRAINTL_REQUIRES(mu_);
  // Restore into the file: the image becomes the file. mu_ held, statements cleared.
  Status RestoreFileLocked(const std::string& image) TRAINTL_REQUIRES(mu_);
  // After a restore: the schema's new tables, then the migrations. mu_ held.
  Status FinishRestoreLocked() TRAINTL_REQUIRES(mu_);
  // Brings a restored image up to kSchemaVersion (migrations are additive). mu_ held.
  Status MigrateLocked() TRAINTL_REQUIRES(mu_);
  Status MigrateTo2Locked() TRAINTL_REQUIRES(mu_);
  Status MigrateTo3Locked() TRAINTL_REQUIRES(mu_);
  // sqlite3_exec of `sql`; Internal "<what>: <sqlite's message>" when it fails. mu_ held.
  Status ExecLocked(const char* sql, const char* what) TRAINTL_REQUIRES(mu_);

  mutable std::mutex mu_;
  sqlite3* db_ TRAINTL_GUARDED_BY(mu_) = nullptr;
  FileOptions file_ TRAINTL_GUARDED_BY(mu_);         // path "" = in memory
  mutable StmtCache stmts_ TRAINTL_GUARDED_BY(mu_);  // statements of db_
};

}  // namespace traintl
