// JobQueue: the head's queue of PENDING jobs and its scheduling pass. The jobs the store
// calls PENDING go in, with the nodes' snapshot; what to start, which pending reasons
// changed and which jobs can never run come out. The head (JobManager) reads the store,
// proposes the commands and launches; this part decides, with no I/O, no clock of its own
// and no Raft: unit-tested on records.
//
// Each job's definition (proto/job_definition.h) is decoded once, when the job enters the
// queue, never from the user's spec text. An entry lives while its job is PENDING; a full
// pass drops the entries of jobs that left the queue.
//
// Thread-safety: not thread-safe; the head uses it on its io_context thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/scheduler/scheduler.h"
#include "daemon/state/records.h"
#include "proto/job_spec.h"

namespace traintl {

class JobQueue {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  // The stored definition text of a job ("" when it has none); called once per job that
  // enters the queue without a known spec.
  using DefinitionLoader = std::function<std::string(const std::string& job_id)>;

  explicit JobQueue(DefinitionLoader load) : load_(std::move(load)) {}

  // What a pass needs besides the jobs.
  struct PassInput {
    // The scheduler's view of the nodes now; only called when some job may start.
    std::function<std::vector<NodeSnapshot>()> nodes;
    TimePoint now{};  // restart holds are compared with it
    // A new head's settle period: jobs that ran before wait (their old workers may live).
    bool settling = false;
    // Whether workers of an earlier attempt of the job still run somewhere. Default: none.
    std::function<bool(const std::string& job_id)> has_live_workers;
  };
  // A job to start now, with where its ranks go.
  struct Start {
    JobRecord job;
    std::shared_ptr<const JobSpec> spec;
    Placement placement;
  };
  struct PassResult {
    std::vector<Start> starts;
    // Pending reasons that changed since the last proposal (job id -> reason).
    std::map<std::string, std::string> reasons;
    // Jobs whose definition this release cannot run (job id -> why): to be failed. Each is
    // reported once; Forget() it when failing it did not commit.
    std::map<std::string, std::string> unreadable;
  };

  // A full pass over `pending`: every PENDING job the head does not start right now, in
  // queue order (priority, then submit time). Entries of other jobs leave the queue.
  PassResult FullPass(const std::vector<JobRecord>& pending, const PassInput& in);
  // A pass over the jobs submitted since the last pass only (no job that ran before);
  // sorted into queue order here. Jobs that waited before cannot fit now (nothing freed).
  PassResult FreshPass(std::vector<JobRecord> fresh, const PassInput& in);

  // A job this head just submitted: the next pass may be a fresh one. `spec` (when not
  // null) is the job's validated spec, so its definition need not be decoded; null when the
  // submission named an older job (a repeated submission_id).
  void Submitted(const std::string& job_id, std::shared_ptr<const JobSpec> spec);
  // Ids submitted since the last pass, and taking them (the pass that looks at them).
  bool has_fresh() const { return !fresh_.empty(); }
  std::vector<std::string> TakeFresh();

  // The proposal of these reasons did not commit: a later pass proposes them again.
  void ReasonsNotCommitted(const std::map<std::string, std::string>& reasons);
  // Drops the job's entry (it started, or failing it did not commit and must be retried).
  void Forget(const std::string& job_id) { entries_.erase(job_id); }
  // Forgets everything (leadership changed: another head may have moved the jobs on).
  void Clear();

  // The job does not start before `until` (restart backoff, a start refused for a full
  // disk). Holds older than `stale` are dropped (the job left the queue meanwhile).
  void HoldRestart(const std::string& job_id, TimePoint until) { holds_[job_id] = until; }
  void DropHoldsBefore(TimePoint stale);
  // The earliest hold still ahead of `now`, if any (when the next pass is worth running).
  std::optional<TimePoint> NextHoldAfter(TimePoint now) const;
  std::optional<TimePoint> EarliestHold() const;

 private:
  struct Entry {
    std::shared_ptr<const JobSpec> spec;  // null: unreadable (being failed)
    PendingJob pending;                   // what the scheduler needs of it
    std::string proposed_reason;          // the last pending reason proposed for it
    uint64_t seen = 0;                    // the full pass that last saw it PENDING
  };
  // The entry of `job`, created (definition decoded) when missing; `unreadable` gets the
  // reason when a new entry's definition cannot be read.
  Entry& EntryOf(const JobRecord& job, std::map<std::string, std::string>* unreadable);
  // Places what fits of `jobs` (queue order) and collects the changed reasons of the rest.
  void Place(const std::vector<std::pair<const JobRecord*, Entry*>>& jobs, const PassInput& in,
             PassResult* out);
  bool Held(const std::string& job_id, TimePoint now);

  const DefinitionLoader load_;
  std::unordered_map<std::string, Entry> entries_;  // PENDING job id -> its entry
  std::vector<std::string> fresh_;                  // submitted since the last pass
  std::map<std::string, TimePoint> holds_;          // job id -> not before
  uint64_t pass_ = 0;                               // full passes so far
};

// The scheduler's view of a job.
PendingJob ToPending(const std::string& job_id, const JobSpec& spec);

}  // namespace traintl
