// The Raft command codec (proto/raft_commands.h): every command round-trips, malformed
// text is refused naming the field, and entries of older releases decode with defaults.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "proto/raft_commands.h"

using namespace traintl;
using nlohmann::json;

namespace {

cmd::Envelope RoundTrip(cmd::Command c) {
  auto e = cmd::Decode(cmd::Encode(std::move(c)));
  REQUIRE(e.ok());
  return *e;
}

}  // namespace

TEST_CASE("every command round-trips with a fresh rid and the proposer's time") {
  cmd::SubmitJob s;
  s.job_id = "ab12";
  s.name = "n";
  s.spec = {{"name", "n"}, {"num_workers", 2}};
  s.policy = {3, 2, "loss", true};
  s.priority = 7;
  s.library_sha256 = "ff";
  s.library_path = "/l.so";
  s.trial_dir = "/t";
  s.submitted_at = 42;
  s.submission_id = "sid";
  auto e = RoundTrip(s);
  CHECK(e.rid.size() == 24);
  CHECK(e.time > 1600000000000);
  const auto& got = std::get<cmd::SubmitJob>(e.body);
  CHECK(got.job_id == "ab12");
  CHECK(got.spec == s.spec);
  CHECK(got.policy == s.policy);
  CHECK(got.priority == 7);
  CHECK(got.submitted_at == 42);
  CHECK(got.submission_id == "sid");

  cmd::EndAttempt end;
  end.job_id = "ab12";
  end.attempt = 3;
  end.outcome.state = "FAILED";
  end.outcome.failed_rank = 1;
  end.outcome.signal = 9;
  end.outcome.reason = "r";
  end.outcome.log_tail = "tail";
  end.outcome.retryable = false;
  const auto& ge = std::get<cmd::EndAttempt>(RoundTrip(end).body);
  CHECK(ge.outcome.failed_rank == 1);
  CHECK(!ge.outcome.exit_code);
  CHECK(ge.outcome.signal == 9);
  CHECK(!ge.outcome.retryable);

  const auto& gs = std::get<cmd::StartAttempt>(
      RoundTrip(cmd::StartAttempt{"j", 2, "/c", "n1", "r1", {}, {}}).body);
  CHECK(gs.head_node == "n1");
  CHECK(gs.head_run == "r1");
  const auto& gp = std::get<cmd::StartAttempt>(
      RoundTrip(cmd::StartAttempt{"j", 2, "", "n1", "r1", {"n1", "n2"}, {{"n2", "h:7450"}}}).body);
  CHECK(gp.rank_nodes == std::vector<std::string>{"n1", "n2"});
  CHECK(gp.node_addresses.at("n2") == "h:7450");
  const auto& gr = std::get<cmd::SetPendingReasons>(
      RoundTrip(cmd::SetPendingReasons{{{"a", "x"}, {"b", "y"}}}).body);
  CHECK(gr.reasons.size() == 2);
  const auto& gv = std::get<cmd::SetVoterAddress>(
      RoundTrip(cmd::SetVoterAddress{18446744073709551615ull, "h:1"}).body);
  CHECK(gv.raft_id == 18446744073709551615ull);
  CHECK(std::get<cmd::Report>(RoundTrip(cmd::Report{"j", 1, 4, {{"loss", 1}}}).body).metrics ==
        json{{"loss", 1}});
  // A stop's reason travels only when set (a user's stop reads as before reasons existed).
  CHECK(std::get<cmd::StopJob>(RoundTrip(cmd::StopJob{"j", "time limit"}).body).reason ==
        "time limit");
  CHECK_FALSE(json::parse(cmd::Encode(cmd::StopJob{"j", ""})).contains("reason"));
  CHECK(std::get<cmd::DeleteJob>(RoundTrip(cmd::DeleteJob{"j"}).body).job_id == "j");
  // The op name comes from the type: every alternative has a distinct one.
  CHECK(cmd::OpOf(cmd::StopJob{"j", ""}) == "stop_job");
  CHECK(cmd::OpOf(cmd::DeleteJob{"j"}) == "delete_job");
  CHECK(json::parse(cmd::Encode(cmd::FailPendingJob{"j", "r"}))["op"] == "fail_pending_job");
}

TEST_CASE("malformed commands are refused naming the op and the field") {
  auto bad = [](const std::string& text) {
    auto e = cmd::Decode(text);
    REQUIRE(!e.ok());
    CHECK(e.status().code() == Status::Code::kInvalidArgument);
    return e.status().message();
  };
  CHECK(bad("not json").find("not a JSON object") != std::string::npos);
  CHECK(bad(R"({"op":5,"rid":"x"})").find("op and rid") != std::string::npos);
  CHECK(bad(R"({"op":"nope","rid":"y","time":1})") == "unknown op nope");
  CHECK(bad(R"({"op":"submit_job","rid":"x","time":1,"job":{"id":5}})") ==
        "malformed submit_job command: job.id: wrong type (number)");
  CHECK(bad(R"({"op":"start_attempt","rid":"x","time":1,"job_id":"j","restored_from":""})") ==
        "malformed start_attempt command: attempt: missing");
  CHECK(bad(R"({"op":"stop_job","rid":"x","job_id":"j"})") ==
        "malformed stop_job command: time: missing");
  CHECK(bad(R"({"op":"set_pending_reasons","rid":"x","time":1,"reasons":{"a":7}})")
            .find("reasons: wrong type") != std::string::npos);
  // Nesting beyond the JSON depth limit is refused before it is parsed.
  CHECK(bad(std::string(10000, '[') + std::string(10000, ']')).find("not a JSON") !=
        std::string::npos);
}

TEST_CASE("entries of older releases decode with the defaults of fields added since") {
  // end_attempt before `retryable`, start_attempt before head_node/head_run.
  auto end = cmd::Decode(
      R"({"op":"end_attempt","rid":"a","time":5,"job_id":"j","attempt":1,"state":"FAILED",)"
      R"("failed_rank":null,"exit_code":1,"signal":null,"reason":"x","log_tail":""})");
  REQUIRE(end.ok());
  CHECK(std::get<cmd::EndAttempt>(end->body).outcome.retryable);
  CHECK(std::get<cmd::EndAttempt>(end->body).outcome.exit_code == 1);
  auto start = cmd::Decode(
      R"({"op":"start_attempt","rid":"b","time":5,"job_id":"j","attempt":1,"restored_from":""})");
  REQUIRE(start.ok());
  CHECK(std::get<cmd::StartAttempt>(start->body).head_node.empty());
  CHECK(std::get<cmd::StartAttempt>(start->body).rank_nodes.empty());
  // submit_job before typed policies: the policy is read from the spec.
  auto submit = cmd::Decode(
      R"({"op":"submit_job","rid":"c","time":5,"submission_id":"","job":{"id":"j","name":"n",)"
      R"("spec":{"run_config":{"failure_config":{"max_failures":-1},"checkpoint_config":)"
      R"({"num_to_keep":2,"checkpoint_score_attribute":"acc","checkpoint_score_order":"max"}}},)"
      R"("priority":0,"library_sha256":"","library_path":"/l","trial_dir":"/t","submitted_at":1}})");
  REQUIRE(submit.ok());
  cmd::JobPolicy want{-1, 2, "acc", true};
  CHECK(std::get<cmd::SubmitJob>(submit->body).policy == want);
}

TEST_CASE("policies from a spec are read leniently") {
  CHECK(cmd::PolicyFromSpecJson(json(nullptr)) == cmd::JobPolicy{});
  CHECK(cmd::PolicyFromSpecJson(json{{"run_config", 5}}) == cmd::JobPolicy{});
  json spec = {{"run_config", {{"failure_config", {{"max_failures", "x"}}}}}};
  CHECK(cmd::PolicyFromSpecJson(spec) == cmd::JobPolicy{});
}

TEST_CASE("submit_job carries the job's definition, older entries get one from their spec") {
  cmd::SubmitJob c;
  c.job_id = "j";
  c.spec = json{{"name", "n"}, {"entrypoint", {{"library", "/l.so"}}}};
  c.definition = json{{"version", 1}};
  auto back = cmd::Decode(cmd::Encode(c));
  REQUIRE(back.ok());
  CHECK(std::get<cmd::SubmitJob>(back->body).definition == c.definition);
  // With a definition the spec does not travel: the definition says it all.
  CHECK_FALSE(json::parse(cmd::Encode(c))["job"].contains("spec"));
  CHECK(std::get<cmd::SubmitJob>(back->body).spec.is_null());

  // Written before definitions: made from the spec when this release accepts it ...
  json old = json::parse(cmd::Encode(c));
  old["job"].erase("definition");
  old["job"]["spec"] = c.spec;
  auto made = cmd::Decode(old.dump());
  REQUIRE(made.ok());
  const json& d = std::get<cmd::SubmitJob>(made->body).definition;
  CHECK(d["version"] == 1);
  CHECK(d["entrypoint"]["library"] == "/l.so");
  // ... and none when it refuses it (the head then fails the job with the reason).
  old["job"]["spec"] = json{{"name", "n"}};
  auto none = cmd::Decode(old.dump());
  REQUIRE(none.ok());
  CHECK(std::get<cmd::SubmitJob>(none->body).definition.is_null());

  old["job"]["definition"] = "text";
  auto bad = cmd::Decode(old.dump());
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("job.definition: must be an object") != std::string::npos);
}
