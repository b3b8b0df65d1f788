// The Raft commands: what the head proposes and the FSM (daemon/state/fsm.cc) applies, as
// C++ structs with one JSON codec (proto/WIRE.md is the contract; field names there are
// the names here).
//
// A command travels as an Envelope: the request id (the FSM's idempotency key), the
// proposer's clock reading (the only time the FSM ever uses) and one of the typed bodies
// of `Command`. Encode never fails; Decode refuses malformed text with InvalidArgument
// naming the op and the field, and fills fields a newer release added with their
// defaults (fields are only ever added; see WIRE.md "Versioning").
//
// Thread-safety: plain values and free functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "proto/fsm_answers.h"

namespace traintl::cmd {

// The spec's policies the FSM applies itself (restart vs FAILED, checkpoint retention),
// validated at submit and stored typed with the job, so the FSM never reads the spec.
struct JobPolicy {
  int max_failures = 0;         // failure_config.max_failures: 0, N, or -1 (unlimited)
  int num_to_keep = 0;          // checkpoint_config.num_to_keep; 0 = keep all
  std::string score_attribute;  // checkpoint_config.checkpoint_score_attribute; "" = recency
  bool score_max = false;       // checkpoint_config.checkpoint_score_order == "max"

  bool operator==(const JobPolicy& o) const {
    return max_failures == o.max_failures && num_to_keep == o.num_to_keep &&
           score_attribute == o.score_attribute && score_max == o.score_max;
  }
};

// Reads the policy from a canonical spec's JSON, leniently (absent or mistyped fields keep
// their defaults). For commands and databases written before policies were stored typed.
JobPolicy PolicyFromSpecJson(const nlohmann::json& spec);

// What makes a job one of a tuning trial's runs: the FSM records the trial (first job) or
// moves it on to this job (a continuation) in the same entry.
struct TrialLink {
  std::string experiment_id;
  int index = 0;
  std::string name;                                  // the trial's name
  nlohmann::json config = nlohmann::json::object();  // its config from this job on
};

struct SubmitJob {
  using Answer = SubmitJobAnswer;
  static constexpr std::string_view kOp = "submit_job";
  std::string job_id;
  std::string name;
  // What the head runs, and what views show as the job's spec (proto/job_definition.h).
  // Entries written before definitions existed get one from their spec when decoded; null
  // when this release refuses that spec.
  nlohmann::json definition;
  // The user's spec, only in entries without a definition (older releases); null else.
  nlohmann::json spec;
  JobPolicy policy;
  int priority = 0;
  std::string library_sha256;
  std::string library_path;
  std::string trial_dir;
  int64_t submitted_at = 0;
  std::string submission_id;       // "" = none; a known one answers with the existing job
  std::optional<TrialLink> trial;  // absent: not a tuning trial's job
};

struct SetPendingReason {
  using Answer = NoAnswer;
  static constexpr std::string_view kOp = "set_pending_reason";
  std::string job_id;
  std::string reason;
};

// Many reasons in one entry: one commit per scheduling pass, not one per waiting job.
struct SetPendingReasons {
  using Answer = SetPendingReasonsAnswer;
  static constexpr std::string_view kOp = "set_pending_reasons";
  std::map<std::string, std::string> reasons;  // job id -> reason
};

struct StartAttempt {
  using Answer = NoAnswer;
  static constexpr std::string_view kOp = "start_attempt";
  std::string job_id;
  int attempt = 0;
  std::string restored_from;  // "" = no checkpoint
  // Who started it: the head's node id and its daemon run (a random id per process
  // start), so that a later head can say why the attempt's workers are gone (head
  // failover vs a daemon restart). "" in entries written before this field existed.
  std::string head_node;
  std::string head_run;
  // Where the ranks run: rank r on node rank_nodes[r], and each node's API address.
  // Empty in entries written before these fields existed.
  std::vector<std::string> rank_nodes;
  std::map<std::string, std::string> node_addresses;
};

struct JobRunning {
  using Answer = NoAnswer;
  static constexpr std::string_view kOp = "job_running";
  std::string job_id;
  int attempt = 0;
};

struct WorkerEvent {
  using Answer = NoAnswer;
  static constexpr std::string_view kOp = "worker_event";
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  std::string event;  // "started" | "exited"
  std::string detail;
};

struct Report {
  using Answer = NoAnswer;
  static constexpr std::string_view kOp = "report";
  std::string job_id;
  int attempt = 0;
  int seq = 0;
  nlohmann::json metrics = nlohmann::json::object();
};

struct CommitCheckpoint {
  using Answer = CommitCheckpointAnswer;
  static constexpr std::string_view kOp = "commit_checkpoint";
  std::string job_id;
  int attempt = 0;
  int seq = 0;
  std::string path;
  nlohmann::json metrics = nlohmann::json::object();
};

struct AttemptOutcome {
  std::string state;  // SUCCEEDED | FAILED | STOPPED
  std::optional<int> failed_rank;
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::string reason;
  std::string log_tail;
  bool retryable = true;  // false: retrying cannot help (e.g. the library cannot load)
};

struct EndAttempt {
  using Answer = EndAttemptAnswer;
  static constexpr std::string_view kOp = "end_attempt";
  std::string job_id;
  int attempt = 0;
  AttemptOutcome outcome;
};

struct StopJob {
  using Answer = StopJobAnswer;
  static constexpr std::string_view kOp = "stop_job";
  std::string job_id;
  // Why, when not at a user's request (e.g. run_config.time_limit_s): the job's message
  // once it is STOPPED. "" = "stopped by user".
  std::string reason;
};

// Forgets a finished job: its row, attempts, checkpoints' records, metrics and worker
// events. Refused for a job that has not ended.
struct DeleteJob {
  using Answer = DeleteJobAnswer;
  static constexpr std::string_view kOp = "delete_job";
  std::string job_id;
};

// Ends a PENDING job as FAILED without an attempt (a stored spec this release cannot run).
struct FailPendingJob {
  using Answer = FailPendingJobAnswer;
  static constexpr std::string_view kOp = "fail_pending_job";
  std::string job_id;
  std::string reason;
};

// The API address of the voter with Raft id `raft_id`, so every voter finds the head's API.
struct SetVoterAddress {
  using Answer = NoAnswer;
  static constexpr std::string_view kOp = "set_voter_address";
  uint64_t raft_id = 0;
  std::string api_address;
};

// A tuning experiment (DESIGN §8 "Tune"), RUNNING from this entry on. Its trials are
// created by submit_job entries that carry a TrialLink.
struct CreateExperiment {
  using Answer = CreateExperimentAnswer;
  static constexpr std::string_view kOp = "create_experiment";
  std::string experiment_id;
  std::string name;
  nlohmann::json spec;  // the tune spec with defaults
  int64_t seed = 0;
  std::string exp_dir;
  std::string library_sha256;
  std::string library_path;
  std::string submission_id;  // "" = none; a known one answers with the existing experiment
};

// A change to one trial; absent fields stay.
struct TrialUpdate {
  int index = 0;
  std::optional<std::string> status;   // "", "PAUSED", "DONE"
  std::optional<std::string> reason;   // the scheduler's word on it
  std::optional<std::string> pending;  // a continuation (JSON text), "" = none
};

// The head's experiment controller records what it decided: the experiment's state
// (RUNNING again for a resume; SUCCEEDED, STOPPED or FAILED to end it), the scheduler's
// state, and trial changes, in one entry.
struct UpdateExperiment {
  using Answer = NoAnswer;
  static constexpr std::string_view kOp = "update_experiment";
  std::string experiment_id;
  std::string state;    // "" = unchanged
  std::string message;  // with `state`: why it ended ("" for a resume or success)
  std::optional<std::string> scheduler_state;  // JSON text; absent = unchanged
  std::vector<TrialUpdate> trials;
};

// Forgets an experiment that is not RUNNING: its row, its trials, and its trials' jobs as
// delete_job does. Refused while one of those jobs has not ended (a stop still under way).
struct DeleteExperiment {
  using Answer = DeleteExperimentAnswer;
  static constexpr std::string_view kOp = "delete_experiment";
  std::string experiment_id;
};

using Command =
    std::variant<SubmitJob, SetPendingReason, SetPendingReasons, StartAttempt, JobRunning,
                 WorkerEvent, Report, CommitCheckpoint, EndAttempt, StopJob, FailPendingJob,
                 SetVoterAddress, DeleteJob, CreateExperiment, UpdateExperiment, DeleteExperiment>;

struct Envelope {
  std::string rid;   // request id: 24 hex chars
  int64_t time = 0;  // the proposer's clock, ms since the epoch
  Command body;
};

// The op name of `c` (its type's kOp).
std::string_view OpOf(const Command& c);

// `c` with a fresh request id and this machine's clock, as the JSON text Raft carries.
std::string Encode(Command c);
std::string Encode(const Envelope& e);

// InvalidArgument "malformed <op> command: <field>: ..." or "unknown op X" (a command of a
// newer release: WIRE.md says such ops are introduced only after every voter knows them).
Result<Envelope> Decode(std::string_view text);

// Milliseconds since the epoch (system clock): the `time` Encode stamps.
int64_t NowMs();

}  // namespace traintl::cmd
