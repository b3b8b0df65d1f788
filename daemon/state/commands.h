// Builders for the Raft commands the FSM applies (format: proto/WIRE.md). Each returns the
// command's JSON text with a fresh request id and the proposer's clock reading.
//
// Thread-safety: free functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "daemon/state/records.h"

namespace traintl::commands {

int64_t NowMs();

// `job` holds id, name, spec, priority, library_sha256, library_path, trial_dir,
// submitted_at; the FSM sets the state.
std::string SubmitJob(const JobRecord& job, const std::string& submission_id);
// The same with the spec as JSON (job.spec is ignored): saves a parse of its text.
std::string SubmitJob(const JobRecord& job, const nlohmann::json& spec,
                      const std::string& submission_id);
std::string SetPendingReason(const std::string& job_id, const std::string& reason);
// Many reasons in one command (job id -> reason): one commit per scheduling pass instead
// of one per waiting job.
std::string SetPendingReasons(const std::map<std::string, std::string>& reasons);
std::string StartAttempt(const std::string& job_id, int attempt, const std::string& restored_from);
std::string JobRunning(const std::string& job_id, int attempt);
std::string WorkerEvent(const std::string& job_id, int attempt, int rank, const std::string& event,
                        const std::string& detail);
std::string Report(const std::string& job_id, int attempt, int seq, const nlohmann::json& metrics);
std::string CommitCheckpoint(const std::string& job_id, int attempt, int seq,
                             const std::string& path, const nlohmann::json& metrics);

struct AttemptOutcome {
  std::string state;  // SUCCEEDED | FAILED | STOPPED
  std::optional<int> failed_rank;
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::string reason;
  std::string log_tail;
  bool retryable = true;  // false: retrying cannot help (e.g. the library cannot load)
};
std::string EndAttempt(const std::string& job_id, int attempt, const AttemptOutcome& outcome);
std::string StopJob(const std::string& job_id);
// Ends a PENDING job as FAILED with `reason` without an attempt: for a job that can never
// start (a stored spec this version cannot read). A job no longer PENDING is left as it is.
std::string FailPendingJob(const std::string& job_id, const std::string& reason);
// Records the API address of the voter with Raft id `raft_id`, so that every voter can
// find the head's API from the Raft leader id.
std::string SetVoterAddress(uint64_t raft_id, const std::string& api_address);

}  // namespace traintl::commands
