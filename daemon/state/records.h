// Rows of the state store: what the replicated state says about jobs, attempts,
// checkpoints and metrics.
//
// Thread-safety: plain values with no shared state; copies may be used on any thread,
// and one object is safe to read from several threads as long as none writes it.
// IsTerminalJobState is a pure function.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "proto/raft_commands.h"

namespace traintl {

// Job states (DESIGN §4).
inline constexpr const char* kJobPending = "PENDING";
inline constexpr const char* kJobStarting = "STARTING";
inline constexpr const char* kJobRunning = "RUNNING";
inline constexpr const char* kJobSucceeded = "SUCCEEDED";
inline constexpr const char* kJobFailed = "FAILED";
inline constexpr const char* kJobStopped = "STOPPED";

bool IsTerminalJobState(const std::string& state);

struct JobRecord {
  std::string id;
  std::string name;
  // What the head runs and views show: the validated spec, typed and versioned
  // (proto/job_definition.h), as JSON text. "" when the job was stored by a release whose
  // spec this one refuses.
  std::string definition;
  // The user's spec as an older release stored it (JSON text); "" for jobs that have a
  // definition (views show the definition's spec then).
  std::string spec;
  std::string state;
  int attempt = 0;   // the latest attempt number, 0 before the first start
  int failures = 0;  // failed attempts so far
  int priority = 0;
  int64_t submitted_at = 0;
  std::optional<int64_t> started_at;  // first attempt start
  std::optional<int64_t> ended_at;
  std::string message;         // why it ended (FAILED / STOPPED)
  std::string pending_reason;  // why it waits (PENDING)
  std::string metrics = "{}";  // latest rank-0 report (JSON object)
  std::string library_sha256;  // "" when the spec's path is used as-is
  std::string library_path;    // what the workers dlopen
  std::string trial_dir;       // where checkpoints and results go
  bool stop_requested = false;
  cmd::JobPolicy policy;  // what the FSM applies (failure_config, checkpoint_config)
};

struct AttemptRecord {
  std::string job_id;
  int attempt = 0;
  std::string state;  // RUNNING | SUCCEEDED | FAILED | STOPPED
  int64_t started_at = 0;
  std::optional<int64_t> ended_at;
  std::string restored_from;  // checkpoint dir handed to get_checkpoint(), "" = none
  std::optional<int> failed_rank;
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::string reason;
  std::string log_tail;
  // The head that started it (node id, daemon run id); "" for attempts of older releases.
  std::string head_node;
  std::string head_run;
  // Where its ranks ran: rank r on node rank_nodes[r], whose API address was
  // node_addresses[node] then (so that any daemon can fetch a remote rank's log). Empty
  // for attempts of older releases.
  std::vector<std::string> rank_nodes;
  std::map<std::string, std::string> node_addresses;
};

struct CheckpointRecord {
  int64_t id = 0;
  std::string job_id;
  int attempt = 0;
  int seq = 0;
  std::string path;
  std::string metrics = "{}";
  int64_t created_at = 0;
};

struct MetricRecord {
  std::string job_id;
  int attempt = 0;
  int seq = 0;
  int64_t time = 0;
  std::string metrics = "{}";
};

struct WorkerEventRecord {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  int64_t time = 0;
  std::string event;  // "started" | "exited"
  std::string detail;
};

// Experiment states (`traintl tune`): RUNNING until every trial ended (SUCCEEDED), its
// time budget ran out (SUCCEEDED too: the budget is how long it was meant to run), a
// user stopped it (STOPPED, resumable) or it could not go on (FAILED, with the message).
inline constexpr const char* kExperimentRunning = "RUNNING";

// A tuning experiment (DESIGN §8 "Tune"): the spec, the seed every trial config derives
// from, and the scheduler's saved state.
struct ExperimentRecord {
  std::string id;
  std::string name;
  std::string spec;  // the tune spec with defaults (JSON text)
  int64_t seed = 0;  // what trial configs and scheduler draws derive from (>= 0)
  std::string state;
  std::string message;
  int64_t created_at = 0;
  std::optional<int64_t> ended_at;
  // The time budget counts running time: budget_used_ms before the latest (re)start at
  // budget_from.
  int64_t budget_from = 0;
  int64_t budget_used_ms = 0;
  std::string exp_dir;         // holds one directory per trial
  std::string library_sha256;  // the trainer's code blob ("" = a path used as is)
  std::string library_path;
  std::string scheduler_state = "{}";  // TrialScheduler::SaveState (JSON text)
  int trials_created = 0;              // trial indexes 0..trials_created-1 exist
};

// One trial of an experiment: its config and the jobs that ran it (one, or more when a
// scheduler paused it or PBT restarted it from another trial's checkpoint).
struct TrialRecord {
  std::string experiment_id;
  int index = 0;
  std::string name;         // "<experiment name>_00003"
  std::string config;       // JSON text, param_space nesting
  std::string job_id;       // its current (latest) job
  std::string jobs = "[]";  // every job id, oldest first (JSON array)
  // "" (it follows its job), "PAUSED" (waits for the scheduler), "DONE" (the scheduler
  // has been told it ended).
  std::string status;
  std::string reason;        // the scheduler's last word on it ("" = none)
  std::string pending = "";  // a continuation to start once its job ends (JSON), "" = none
  int64_t created_at = 0;
};

// The ids of every job `trial` ran, oldest first (its `jobs` list; its job_id when the list
// is empty or unreadable).
std::vector<std::string> JobsOf(const TrialRecord& trial);

}  // namespace traintl
