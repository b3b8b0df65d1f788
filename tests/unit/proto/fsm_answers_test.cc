// The FSM's answers (proto/fsm_answers.h): typed on both ends, one text on the wire.
#include "proto/fsm_answers.h"

#include <catch2/catch.hpp>

using namespace traintl;
using namespace traintl::cmd;
using nlohmann::json;

namespace {

template <typename A>
Result<A> RoundTrip(const A& a) {
  auto j = DecodeAnswerText(EncodeAnswer(a));
  REQUIRE(j.ok());
  return AnswerFromJson<A>(*j);
}

}  // namespace

TEST_CASE("every answer reads back as written") {
  CHECK(RoundTrip(SubmitJobAnswer{"abc"})->job_id == "abc");
  CHECK(RoundTrip(SetPendingReasonsAnswer{7})->updated == 7);
  auto ck = RoundTrip(CommitCheckpointAnswer{42, {"/t/c0", "/t/c1"}});
  CHECK(ck->id == 42);
  CHECK(ck->deleted == std::vector<std::string>{"/t/c0", "/t/c1"});
  CHECK(RoundTrip(EndAttemptAnswer{"PENDING"})->job_state == "PENDING");
  auto stop = RoundTrip(StopJobAnswer{"RUNNING", true});
  CHECK(stop->state == "RUNNING");
  CHECK(stop->active);
  CHECK(RoundTrip(FailPendingJobAnswer{"FAILED"})->state == "FAILED");
  CHECK(RoundTrip(NoAnswer{}).ok());
  // The wire form older releases replay from their `applied` table.
  CHECK(json::parse(EncodeAnswer(StopJobAnswer{"STOPPED", false})) ==
        json{{"ok", true}, {"state", "STOPPED"}, {"active", false}});
}

TEST_CASE("a refusal is a FailedPrecondition with the FSM's reason") {
  auto r = DecodeAnswerText(EncodeRefusal("job is RUNNING, not PENDING"));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Status::Code::kFailedPrecondition);
  CHECK(r.status().message() == "job is RUNNING, not PENDING");
  CHECK(DecodeAnswerText("not json").status().code() == Status::Code::kInternal);
}

TEST_CASE("an answer missing a field is refused naming it") {
  auto r = AnswerFromJson<StopJobAnswer>(json{{"ok", true}, {"state", "RUNNING"}});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() == "malformed FSM answer: active: missing");
  auto t = AnswerFromJson<CommitCheckpointAnswer>(json{{"id", 1}, {"deleted", "x"}});
  REQUIRE_FALSE(t.ok());
  CHECK(t.status().message().find("deleted: wrong type") != std::string::npos);
}
