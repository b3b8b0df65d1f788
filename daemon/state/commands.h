// Builders for the Raft commands the FSM applies (proto/raft_commands.h; format:
// proto/WIRE.md). Each returns the command's text with a fresh request id and the
// proposer's clock reading: shorthand for cmd::Encode of the typed command.
//
// Thread-safety: free functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "daemon/state/records.h"
#include "proto/job_spec.h"
#include "proto/raft_commands.h"

namespace traintl::commands {

using cmd::AttemptOutcome;
using cmd::NowMs;

// `job` holds id, name, spec, definition, policy, priority, library_sha256, library_path,
// trial_dir, submitted_at; the FSM sets the state. An empty job.definition is made from
// job.spec, as the decoder does for entries of releases without definitions; the spec
// itself travels only when no definition can be made of it.
std::string SubmitJob(const JobRecord& job, const std::string& submission_id);
// The head's submission: the definition of the validated `spec` (job.spec and
// job.definition are ignored). With `trial`, the job runs that tuning trial.
std::string SubmitJob(const JobRecord& job, const JobSpec& spec, const std::string& submission_id,
                      std::optional<cmd::TrialLink> trial = std::nullopt);
// Many reasons in one command (job id -> reason): one commit per scheduling pass instead
// of one per waiting job.
std::string SetPendingReasons(const std::map<std::string, std::string>& reasons);
// `rank_nodes`: rank r runs on node rank_nodes[r]; `node_addresses`: their API addresses.
std::string StartAttempt(const std::string& job_id, int attempt, const std::string& restored_from,
                         const std::string& head_node = "", const std::string& head_run = "",
                         const std::vector<std::string>& rank_nodes = {},
                         const std::map<std::string, std::string>& node_addresses = {});
std::string JobRunning(const std::string& job_id, int attempt);
std::string WorkerEvent(const std::string& job_id, int attempt, int rank, const std::string& event,
                        const std::string& detail);
std::string Report(const std::string& job_id, int attempt, int seq, const nlohmann::json& metrics);
std::string CommitCheckpoint(const std::string& job_id, int attempt, int seq,
                             const std::string& path, const nlohmann::json& metrics);
std::string EndAttempt(const std::string& job_id, int attempt, const AttemptOutcome& outcome);
// `reason` = "" for a user's stop; else the job's message once stopped.
std::string StopJob(const std::string& job_id, const std::string& reason = "");
std::string DeleteJob(const std::string& job_id);
// Ends a PENDING job as FAILED with `reason` without an attempt: for a job that can never
// start (a stored spec this version cannot read). A job no longer PENDING is left as it is.
std::string FailPendingJob(const std::string& job_id, const std::string& reason);
// Records the API address of the voter with Raft id `raft_id`, so that every voter can
// find the head's API from the Raft leader id.
std::string SetVoterAddress(uint64_t raft_id, const std::string& api_address);

}  // namespace traintl::commands
