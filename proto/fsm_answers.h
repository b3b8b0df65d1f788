// What the FSM answers each Raft command, as typed values: the proposer's `done` receives
// `Result<Answer>` (daemon/head/command_log.h, Answered), the FSM returns one per command
// (daemon/state/fsm.cc). A refusal is a FailedPrecondition Status with the FSM's reason.
//
// On the wire (the text Raft hands back, and the `applied` table replays for a known rid)
// an answer is {"ok": true, <fields>} or {"ok": false, "error": "<reason>"} (WIRE.md
// "Answers"); the codec here is the only place that reads or writes it.
//
// Thread-safety: plain values and free functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "common/status.h"

namespace traintl::cmd {

// set_pending_reason, start_attempt, job_running, worker_event, report, set_voter_address.
struct NoAnswer {};

struct SubmitJobAnswer {
  std::string job_id;  // the new job, or the existing one of a known submission_id
};

struct SetPendingReasonsAnswer {
  int updated = 0;  // reasons that changed (jobs that started or ended meanwhile are skipped)
};

struct CommitCheckpointAnswer {
  int64_t id = 0;                    // the checkpoint's row
  std::vector<std::string> deleted;  // checkpoint dirs retention dropped: delete them
};

struct EndAttemptAnswer {
  std::string job_state;  // PENDING (a restart follows) or a terminal state
};

struct StopJobAnswer {
  std::string state;    // the job's state afterwards
  bool active = false;  // an attempt runs: its workers must be stopped
};

struct DeleteJobAnswer {
  std::string trial_dir;                      // the deleted job's trial dir (its files stay)
  std::vector<std::string> checkpoint_paths;  // its retained checkpoints' directories
};

struct DeleteExperimentAnswer {
  std::string exp_dir;               // the deleted experiment's dir (its files stay)
  std::vector<std::string> job_ids;  // its trials' jobs, deleted with it
};

struct CreateExperimentAnswer {
  std::string experiment_id;  // the new one, or the existing one of a known submission_id
};

struct FailPendingJobAnswer {
  std::string state;  // FAILED, or the state it had when it was no longer PENDING
};

// {"ok": true, ...} of an answer, and {"ok": false, "error": ...} of a refusal.
std::string EncodeAnswer(const NoAnswer& a);
std::string EncodeAnswer(const SubmitJobAnswer& a);
std::string EncodeAnswer(const SetPendingReasonsAnswer& a);
std::string EncodeAnswer(const CommitCheckpointAnswer& a);
std::string EncodeAnswer(const EndAttemptAnswer& a);
std::string EncodeAnswer(const StopJobAnswer& a);
std::string EncodeAnswer(const FailPendingJobAnswer& a);
std::string EncodeAnswer(const DeleteJobAnswer& a);
std::string EncodeAnswer(const CreateExperimentAnswer& a);
std::string EncodeAnswer(const DeleteExperimentAnswer& a);
std::string EncodeRefusal(const std::string& error);

// The answer's fields from {"ok": true, ...}; InvalidArgument naming a missing or mistyped
// field (a broken invariant between proposer and FSM, reported, not aborted on).
Status TakeAnswer(const nlohmann::json& j, NoAnswer* a);
Status TakeAnswer(const nlohmann::json& j, SubmitJobAnswer* a);
Status TakeAnswer(const nlohmann::json& j, SetPendingReasonsAnswer* a);
Status TakeAnswer(const nlohmann::json& j, CommitCheckpointAnswer* a);
Status TakeAnswer(const nlohmann::json& j, EndAttemptAnswer* a);
Status TakeAnswer(const nlohmann::json& j, StopJobAnswer* a);
Status TakeAnswer(const nlohmann::json& j, FailPendingJobAnswer* a);
Status TakeAnswer(const nlohmann::json& j, DeleteJobAnswer* a);
Status TakeAnswer(const nlohmann::json& j, CreateExperimentAnswer* a);
Status TakeAnswer(const nlohmann::json& j, DeleteExperimentAnswer* a);

// The FSM's answer text as CommandLog::Propose's `done` receives it: the object of
// {"ok": true, ...}; FailedPrecondition with the FSM's reason for a refusal; Internal for
// text that is not an answer.
Result<nlohmann::json> DecodeAnswerText(const std::string& text);

template <typename A>
Result<A> AnswerFromJson(const nlohmann::json& j) {
  A a;
  Status st = TakeAnswer(j, &a);
  if (!st.ok()) return st;
  return a;
}

}  // namespace traintl::cmd
