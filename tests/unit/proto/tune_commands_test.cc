// The tuning commands' codec (proto/raft_commands.h): create_experiment, update_experiment
// and submit_job's trial link round-trip, absent optional fields stay absent, malformed
// entries are refused naming the field; and create_experiment's answer
// (proto/fsm_answers.h).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "proto/fsm_answers.h"
#include "proto/raft_commands.h"

using namespace traintl;
using nlohmann::json;

namespace {

cmd::Envelope RoundTrip(cmd::Command c) {
  auto e = cmd::Decode(cmd::Encode(std::move(c)));
  REQUIRE(e.ok());
  return *e;
}

// The decoder's message for `text`, which it must refuse as InvalidArgument.
std::string Refusal(const std::string& text) {
  auto e = cmd::Decode(text);
  REQUIRE_FALSE(e.ok());
  CHECK(e.status().code() == Status::Code::kInvalidArgument);
  return e.status().message();
}

cmd::CreateExperiment MakeCreate() {
  cmd::CreateExperiment c;
  c.experiment_id = "e0a1";
  c.name = "mnist-tune";
  c.spec = {{"name", "mnist-tune"},
            {"param_space", {{"lr", {{"loguniform", {0.001, 0.1}}}}}},
            {"num_samples", 8}};
  c.seed = 1234;
  c.exp_dir = "/data/tune/mnist-tune";
  c.library_sha256 = "abcdef";
  c.library_path = "/blobs/abcdef.so";
  c.submission_id = "sub-9";
  return c;
}

cmd::SubmitJob MakeSubmit() {
  cmd::SubmitJob s;
  s.job_id = "j1";
  s.name = "mnist-tune_00003";
  s.definition = json{{"version", 1}};
  s.library_path = "/l.so";
  s.trial_dir = "/data/tune/mnist-tune/mnist-tune_00003";
  s.submitted_at = 42;
  return s;
}

}  // namespace

TEST_CASE("create_experiment round-trips every field") {
  const cmd::CreateExperiment c = MakeCreate();
  auto e = RoundTrip(c);
  CHECK(cmd::OpOf(e.body) == "create_experiment");
  const auto& got = std::get<cmd::CreateExperiment>(e.body);
  CHECK(got.experiment_id == "e0a1");
  CHECK(got.name == "mnist-tune");
  CHECK(got.spec == c.spec);
  CHECK(got.seed == 1234);
  CHECK(got.exp_dir == "/data/tune/mnist-tune");
  CHECK(got.library_sha256 == "abcdef");
  CHECK(got.library_path == "/blobs/abcdef.so");
  CHECK(got.submission_id == "sub-9");

  // submission_id is optional on the wire: absent or null reads as "" (none).
  json j = json::parse(cmd::Encode(c));
  CHECK(j["op"] == "create_experiment");
  j.erase("submission_id");
  auto absent = cmd::Decode(j.dump());
  REQUIRE(absent.ok());
  CHECK(std::get<cmd::CreateExperiment>(absent->body).submission_id.empty());
  j["submission_id"] = nullptr;
  auto null = cmd::Decode(j.dump());
  REQUIRE(null.ok());
  CHECK(std::get<cmd::CreateExperiment>(null->body).submission_id.empty());
}

TEST_CASE("update_experiment with only its id: nothing else travels, nothing else decodes") {
  cmd::UpdateExperiment u;
  u.experiment_id = "e0a1";
  u.message = "dropped without a state";  // a message travels only with a state
  const json j = json::parse(cmd::Encode(u));
  CHECK(j["op"] == "update_experiment");
  CHECK(j["experiment_id"] == "e0a1");
  CHECK_FALSE(j.contains("state"));
  CHECK_FALSE(j.contains("message"));
  CHECK_FALSE(j.contains("scheduler_state"));
  CHECK(j["trials"] == json::array());

  const cmd::UpdateExperiment got = std::get<cmd::UpdateExperiment>(RoundTrip(u).body);
  CHECK(got.experiment_id == "e0a1");
  CHECK(got.state.empty());
  CHECK(got.message.empty());
  CHECK_FALSE(got.scheduler_state.has_value());
  CHECK(got.trials.empty());
}

TEST_CASE("update_experiment with a state, the scheduler's state and trial updates") {
  cmd::UpdateExperiment u;
  u.experiment_id = "e0a1";
  u.state = "STOPPED";
  u.message = "stopped by user";
  u.scheduler_state = R"({"rungs":[1,3,9]})";
  cmd::TrialUpdate all;
  all.index = 2;
  all.status = "PAUSED";
  all.reason = "below the rung's cutoff";
  all.pending = "";  // present and empty: the continuation is cleared
  cmd::TrialUpdate reason_only;
  reason_only.index = 5;
  reason_only.reason = "promoted";
  u.trials = {all, reason_only};

  const json j = json::parse(cmd::Encode(u));
  CHECK(j["state"] == "STOPPED");
  CHECK(j["message"] == "stopped by user");
  CHECK(j["scheduler_state"] == R"({"rungs":[1,3,9]})");  // JSON text, not an object
  REQUIRE(j["trials"].size() == 2);
  CHECK(j["trials"][0] == json{{"index", 2},
                               {"status", "PAUSED"},
                               {"reason", "below the rung's cutoff"},
                               {"pending", ""}});
  CHECK(j["trials"][1] == json{{"index", 5}, {"reason", "promoted"}});

  const cmd::UpdateExperiment got = std::get<cmd::UpdateExperiment>(RoundTrip(u).body);
  CHECK(got.state == "STOPPED");
  CHECK(got.message == "stopped by user");
  REQUIRE(got.scheduler_state.has_value());
  CHECK(*got.scheduler_state == R"({"rungs":[1,3,9]})");
  REQUIRE(got.trials.size() == 2);
  CHECK(got.trials[0].index == 2);
  CHECK(got.trials[0].status == std::optional<std::string>("PAUSED"));
  CHECK(got.trials[0].reason == std::optional<std::string>("below the rung's cutoff"));
  REQUIRE(got.trials[0].pending.has_value());
  CHECK(got.trials[0].pending->empty());
  CHECK(got.trials[1].index == 5);
  CHECK_FALSE(got.trials[1].status.has_value());
  CHECK(got.trials[1].reason == std::optional<std::string>("promoted"));
  CHECK_FALSE(got.trials[1].pending.has_value());

  // A resume: RUNNING with an empty message.
  cmd::UpdateExperiment resume;
  resume.experiment_id = "e0a1";
  resume.state = "RUNNING";
  const json r = json::parse(cmd::Encode(resume));
  CHECK(r["state"] == "RUNNING");
  CHECK(r["message"] == "");
  CHECK(std::get<cmd::UpdateExperiment>(RoundTrip(resume).body).state == "RUNNING");
}

TEST_CASE("submit_job carries a trial link when it has one") {
  cmd::SubmitJob s = MakeSubmit();
  s.trial = cmd::TrialLink{"e0a1", 3, "mnist-tune_00003", {{"lr", 0.01}, {"model", {{"w", 64}}}}};
  const json j = json::parse(cmd::Encode(s));
  CHECK(j["trial"] == json{{"experiment_id", "e0a1"},
                           {"index", 3},
                           {"name", "mnist-tune_00003"},
                           {"config", {{"lr", 0.01}, {"model", {{"w", 64}}}}}});
  const cmd::SubmitJob got = std::get<cmd::SubmitJob>(RoundTrip(s).body);
  CHECK(got.job_id == "j1");
  CHECK(got.trial_dir == "/data/tune/mnist-tune/mnist-tune_00003");
  REQUIRE(got.trial.has_value());
  CHECK(got.trial->experiment_id == "e0a1");
  CHECK(got.trial->index == 3);
  CHECK(got.trial->name == "mnist-tune_00003");
  CHECK(got.trial->config == json{{"lr", 0.01}, {"model", {{"w", 64}}}});

  // An empty config is an object too.
  cmd::SubmitJob empty = MakeSubmit();
  empty.trial = cmd::TrialLink{"e0a1", 0, "t0", json::object()};
  const cmd::SubmitJob ge = std::get<cmd::SubmitJob>(RoundTrip(empty).body);
  REQUIRE(ge.trial.has_value());
  CHECK(ge.trial->config == json::object());
}

TEST_CASE("submit_job without a trial link: none on the wire, none decoded") {
  const cmd::SubmitJob s = MakeSubmit();
  json j = json::parse(cmd::Encode(s));
  CHECK_FALSE(j.contains("trial"));
  CHECK_FALSE(std::get<cmd::SubmitJob>(RoundTrip(s).body).trial.has_value());
  // A null link reads as none (as an older release's entry).
  j["trial"] = nullptr;
  auto null = cmd::Decode(j.dump());
  REQUIRE(null.ok());
  CHECK_FALSE(std::get<cmd::SubmitJob>(null->body).trial.has_value());
}

TEST_CASE("malformed tuning commands are refused naming the op and the field") {
  const std::string update = R"({"op":"update_experiment","rid":"x","time":1,"experiment_id":"e")";
  CHECK(Refusal(update + R"(,"trials":[{}]})") ==
        "malformed update_experiment command: trials[0].index: missing");
  CHECK(Refusal(update + R"(,"trials":[{"index":0},{"index":"1"}]})") ==
        "malformed update_experiment command: trials[1].index: wrong type (string)");
  CHECK(Refusal(update + R"(,"trials":[{"index":0,"status":7}]})") ==
        "malformed update_experiment command: trials[0].status: wrong type (number)");
  CHECK(Refusal(update + R"(,"trials":[{"index":0,"pending":{}}]})") ==
        "malformed update_experiment command: trials[0].pending: wrong type (object)");
  CHECK(Refusal(update + R"(,"trials":{}})") ==
        "malformed update_experiment command: trials: must be an array");
  CHECK(Refusal(update + "}") == "malformed update_experiment command: trials: missing");
  CHECK(Refusal(update + R"(,"scheduler_state":{},"trials":[]})") ==
        "malformed update_experiment command: scheduler_state: wrong type (object)");
  CHECK(Refusal(update + R"(,"state":5,"trials":[]})") ==
        "malformed update_experiment command: state: wrong type (number)");
  CHECK(Refusal(R"({"op":"update_experiment","rid":"x","time":1,"trials":[]})") ==
        "malformed update_experiment command: experiment_id: missing");

  json create = json::parse(cmd::Encode(MakeCreate()));
  create["spec"] = "text";
  CHECK(Refusal(create.dump()) == "malformed create_experiment command: spec: must be an object");
  create = json::parse(cmd::Encode(MakeCreate()));
  create["seed"] = "7";
  CHECK(Refusal(create.dump()) == "malformed create_experiment command: seed: wrong type (string)");
  create = json::parse(cmd::Encode(MakeCreate()));
  create.erase("exp_dir");
  CHECK(Refusal(create.dump()) == "malformed create_experiment command: exp_dir: missing");

  cmd::SubmitJob s = MakeSubmit();
  s.trial = cmd::TrialLink{"e0a1", 1, "t1", json::object()};
  json submit = json::parse(cmd::Encode(s));
  submit["trial"]["config"] = json::array({1});
  CHECK(Refusal(submit.dump()) == "malformed submit_job command: trial.config: must be an object");
  submit["trial"].erase("config");
  CHECK(Refusal(submit.dump()) == "malformed submit_job command: trial.config: missing");
  submit = json::parse(cmd::Encode(s));
  submit["trial"].erase("index");
  CHECK(Refusal(submit.dump()) == "malformed submit_job command: trial.index: missing");
  submit = json::parse(cmd::Encode(s));
  submit["trial"]["experiment_id"] = 3;
  CHECK(Refusal(submit.dump()) ==
        "malformed submit_job command: trial.experiment_id: wrong type (number)");
}

TEST_CASE("create_experiment's answer reads back as written") {
  const std::string text = cmd::EncodeAnswer(cmd::CreateExperimentAnswer{"e0a1"});
  CHECK(json::parse(text) == json{{"ok", true}, {"experiment_id", "e0a1"}});
  auto j = cmd::DecodeAnswerText(text);
  REQUIRE(j.ok());
  auto a = cmd::AnswerFromJson<cmd::CreateExperimentAnswer>(*j);
  REQUIRE(a.ok());
  CHECK(a->experiment_id == "e0a1");

  auto missing = cmd::AnswerFromJson<cmd::CreateExperimentAnswer>(json{{"ok", true}});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message() == "malformed FSM answer: experiment_id: missing");
  auto mistyped =
      cmd::AnswerFromJson<cmd::CreateExperimentAnswer>(json{{"ok", true}, {"experiment_id", 1}});
  REQUIRE_FALSE(mistyped.ok());
  CHECK(mistyped.status().message().find("experiment_id: wrong type") != std::string::npos);
  // update_experiment answers with nothing but ok.
  CHECK(json::parse(cmd::EncodeAnswer(cmd::UpdateExperiment::Answer{})) == json{{"ok", true}});
}

TEST_CASE("delete_experiment and its answer round-trip, malformed ones name the field") {
  const cmd::Envelope e = RoundTrip(cmd::DeleteExperiment{"e0a1"});
  CHECK(std::get<cmd::DeleteExperiment>(e.body).experiment_id == "e0a1");
  CHECK(json::parse(cmd::Encode(cmd::DeleteExperiment{"e0a1"}))["op"] == "delete_experiment");
  CHECK(Refusal(R"({"op":"delete_experiment","rid":"x","time":1})") ==
        "malformed delete_experiment command: experiment_id: missing");
  CHECK(Refusal(R"({"op":"delete_experiment","rid":"x","time":1,"experiment_id":[]})") ==
        "malformed delete_experiment command: experiment_id: wrong type (array)");

  const std::string text =
      cmd::EncodeAnswer(cmd::DeleteExperimentAnswer{"/data/tune/exp", {"j1", "j2"}});
  auto j = cmd::DecodeAnswerText(text);
  REQUIRE(j.ok());
  auto a = cmd::AnswerFromJson<cmd::DeleteExperimentAnswer>(*j);
  REQUIRE(a.ok());
  CHECK(a->exp_dir == "/data/tune/exp");
  CHECK(a->job_ids == std::vector<std::string>{"j1", "j2"});
  auto missing =
      cmd::AnswerFromJson<cmd::DeleteExperimentAnswer>(json{{"ok", true}, {"exp_dir", "/x"}});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message() == "malformed FSM answer: job_ids: missing");
}
