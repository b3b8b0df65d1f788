#include "proto/fsm_answers.h"

#include "common/json_depth.h"
#include "proto/json_fields.h"

namespace traintl::cmd {
namespace {

using nlohmann::json;
using proto_internal::FieldError;
using proto_internal::Fields;

std::string Ok(json j) {
  j["ok"] = true;
  return j.dump();
}

// Runs `take` over the answer's fields, turning a FieldError into InvalidArgument.
template <typename F>
Status Take(const json& j, F take) {
  try {
    take(Fields(j, ""));
    return Status::Ok();
  } catch (const FieldError& e) {
    return Status::InvalidArgument(std::string("malformed FSM answer: ") + e.what());
  }
}

}  // namespace

std::string EncodeAnswer(const NoAnswer&) { return Ok(json::object()); }
std::string EncodeAnswer(const SubmitJobAnswer& a) { return Ok({{"job_id", a.job_id}}); }
std::string EncodeAnswer(const CreateExperimentAnswer& a) {
  return Ok({{"experiment_id", a.experiment_id}});
}
std::string EncodeAnswer(const SetPendingReasonsAnswer& a) { return Ok({{"updated", a.updated}}); }
std::string EncodeAnswer(const CommitCheckpointAnswer& a) {
  return Ok({{"id", a.id}, {"deleted", a.deleted}});
}
std::string EncodeAnswer(const EndAttemptAnswer& a) { return Ok({{"job_state", a.job_state}}); }
std::string EncodeAnswer(const StopJobAnswer& a) {
  return Ok({{"state", a.state}, {"active", a.active}});
}
std::string EncodeAnswer(const FailPendingJobAnswer& a) { return Ok({{"state", a.state}}); }
std::string EncodeAnswer(const DeleteJobAnswer& a) {
  return Ok({{"trial_dir", a.trial_dir}, {"checkpoint_paths", a.checkpoint_paths}});
}
std::string EncodeAnswer(const DeleteExperimentAnswer& a) {
  return Ok({{"exp_dir", a.exp_dir}, {"job_ids", a.job_ids}});
}
std::string EncodeRefusal(const std::string& error) {
  return json{{"ok", false}, {"error", error}}.dump();
}

Result<json> DecodeAnswerText(const std::string& text) {
  json j = ParseJsonBounded(text);
  if (!j.is_object()) return Status::Internal("unreadable FSM answer");
  if (j.value("ok", false) != true)
    return Status::FailedPrecondition(j.value("error", std::string("refused")));
  return j;
}

Status TakeAnswer(const json& j, NoAnswer*) {
  return Take(j, [](const Fields&) {});
}
Status TakeAnswer(const json& j, CreateExperimentAnswer* a) {
  return Take(j, [a](const Fields& f) { f.Req("experiment_id", &a->experiment_id); });
}
Status TakeAnswer(const json& j, SubmitJobAnswer* a) {
  return Take(j, [a](const Fields& f) { f.Req("job_id", &a->job_id); });
}
Status TakeAnswer(const json& j, SetPendingReasonsAnswer* a) {
  return Take(j, [a](const Fields& f) { f.Req("updated", &a->updated); });
}
Status TakeAnswer(const json& j, CommitCheckpointAnswer* a) {
  return Take(j, [a](const Fields& f) {
    f.Req("id", &a->id);
    f.Req("deleted", &a->deleted);
  });
}
Status TakeAnswer(const json& j, EndAttemptAnswer* a) {
  return Take(j, [a](const Fields& f) { f.Req("job_state", &a->job_state); });
}
Status TakeAnswer(const json& j, StopJobAnswer* a) {
  return Take(j, [a](const Fields& f) {
    f.Req("state", &a->state);
    f.Req("active", &a->active);
  });
}
Status TakeAnswer(const json& j, FailPendingJobAnswer* a) {
  return Take(j, [a](const Fields& f) { f.Req("state", &a->state); });
}
Status TakeAnswer(const json& j, DeleteJobAnswer* a) {
  return Take(j, [a](const Fields& f) {
    f.Req("trial_dir", &a->trial_dir);
    f.Req("checkpoint_paths", &a->checkpoint_paths);
  });
}
Status TakeAnswer(const json& j, DeleteExperimentAnswer* a) {
  return Take(j, [a](const Fields& f) {
    f.Req("exp_dir", &a->exp_dir);
    f.Req("job_ids", &a->job_ids);
  });
}

}  // namespace traintl::cmd
