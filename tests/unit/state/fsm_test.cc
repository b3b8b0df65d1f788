#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "daemon/state/commands.h"
#include "daemon/state/fsm.h"

using namespace traintl;
using nlohmann::json;

namespace {

JobRecord MakeJob(const std::string& id, int max_failures, int num_to_keep = 0) {
  JobRecord j;
  j.id = id;
  j.name = "test";
  json spec = {{"name", "test"},
               {"run_config",
                {{"failure_config", {{"max_failures", max_failures}}},
                 {"checkpoint_config", {{"num_to_keep", num_to_keep}}}}}};
  j.spec = spec.dump();
  j.library_path = "/lib.so";
  j.trial_dir = "/tmp/trial";
  j.submitted_at = 1000;
  j.policy.max_failures = max_failures;
  j.policy.num_to_keep = num_to_keep;
  return j;
}

json Apply(Fsm& fsm, const std::string& cmd) { return json::parse(fsm.Apply(cmd)); }

commands::AttemptOutcome Failed(int rank, int code) {
  commands::AttemptOutcome o;
  o.state = kJobFailed;
  o.failed_rank = rank;
  o.exit_code = code;
  o.reason = "rank " + std::to_string(rank) + " exited with code " + std::to_string(code);
  return o;
}

}  // namespace

TEST_CASE("job lifecycle with a restart then success") {
  StateStore store;
  Fsm fsm(&store);
  REQUIRE(Apply(fsm, commands::SubmitJob(MakeJob("abc123", 1), ""))["ok"] == true);
  auto job = store.GetJob("abc123");
  REQUIRE(job);
  CHECK(job->state == kJobPending);

  REQUIRE(Apply(fsm, commands::StartAttempt("abc123", 1, ""))["ok"] == true);
  CHECK(store.GetJob("abc123")->state == kJobStarting);
  REQUIRE(Apply(fsm, commands::JobRunning("abc123", 1))["ok"] == true);
  REQUIRE(Apply(fsm, commands::Report("abc123", 1, 0, {{"loss", 0.5}}))["ok"] == true);
  auto r = Apply(fsm, commands::CommitCheckpoint("abc123", 1, 0, "/tmp/trial/c0", {{"loss", 0.5}}));
  REQUIRE(r["ok"] == true);
  CHECK(store.GetJob("abc123")->metrics == R"({"loss":0.5})");

  r = Apply(fsm, commands::EndAttempt("abc123", 1, Failed(1, 7)));
  CHECK(r["job_state"] == kJobPending);
  job = store.GetJob("abc123");
  CHECK(job->failures == 1);
  CHECK(job->pending_reason.find("attempt 1 failed") != std::string::npos);
  auto a1 = store.GetAttempt("abc123", 1);
  REQUIRE(a1);
  CHECK(a1->state == kJobFailed);
  CHECK(a1->failed_rank == 1);
  CHECK(a1->exit_code == 7);

  // A start for the wrong attempt number is refused and changes nothing.
  CHECK(Apply(fsm, commands::StartAttempt("abc123", 5, ""))["ok"] == false);
  REQUIRE(Apply(fsm, commands::StartAttempt("abc123", 2, "/tmp/trial/c0"))["ok"] == true);
  CHECK(store.GetAttempt("abc123", 2)->restored_from == "/tmp/trial/c0");
  // Stale report from attempt 1 is ignored.
  CHECK(Apply(fsm, commands::Report("abc123", 1, 3, {{"loss", 9}}))["ok"] == false);
  commands::AttemptOutcome ok;
  ok.state = kJobSucceeded;
  CHECK(Apply(fsm, commands::EndAttempt("abc123", 2, ok))["job_state"] == kJobSucceeded);
  job = store.GetJob("abc123");
  CHECK(job->state == kJobSucceeded);
  CHECK(job->ended_at.has_value());
  CHECK(store.ListAttempts("abc123").size() == 2);
}

TEST_CASE("max_failures exhausted and non-retryable failures end the job") {
  StateStore store;
  Fsm fsm(&store);
  Apply(fsm, commands::SubmitJob(MakeJob("aa", 0), ""));
  Apply(fsm, commands::StartAttempt("aa", 1, ""));
  CHECK(Apply(fsm, commands::EndAttempt("aa", 1, Failed(0, 1)))["job_state"] == kJobFailed);
  auto job = store.GetJob("aa");
  CHECK(job->message.find("rank 0 exited with code 1") != std::string::npos);
  CHECK(job->message.find("max_failures=0") != std::string::npos);

  Apply(fsm, commands::SubmitJob(MakeJob("bb", -1), ""));
  Apply(fsm, commands::StartAttempt("bb", 1, ""));
  auto o = Failed(0, 3);
  o.retryable = false;
  CHECK(Apply(fsm, commands::EndAttempt("bb", 1, o))["job_state"] == kJobFailed);
}

TEST_CASE("request ids de-duplicate") {
  StateStore store;
  Fsm fsm(&store);
  Apply(fsm, commands::SubmitJob(MakeJob("cc", 5), ""));
  Apply(fsm, commands::StartAttempt("cc", 1, ""));
  const std::string end = commands::EndAttempt("cc", 1, Failed(0, 1));
  auto first = fsm.Apply(end);
  auto second = fsm.Apply(end);  // a retried proposal
  CHECK(first == second);
  CHECK(store.GetJob("cc")->failures == 1);

  // Same submission id -> the same job, not a second one.
  auto j2 = MakeJob("dd", 0);
  CHECK(Apply(fsm, commands::SubmitJob(j2, "sub-1"))["job_id"] == "dd");
  auto j3 = MakeJob("ee", 0);
  CHECK(Apply(fsm, commands::SubmitJob(j3, "sub-1"))["job_id"] == "dd");
  CHECK(!store.GetJob("ee"));
}

TEST_CASE("malformed commands change nothing") {
  StateStore store;
  Fsm fsm(&store);
  CHECK(Apply(fsm, "not json")["ok"] == false);
  CHECK(Apply(fsm, R"({"op":"submit_job","rid":"x","job":{"id":5}})")["ok"] == false);
  CHECK(Apply(fsm, R"({"op":"nope","rid":"y"})")["ok"] == false);
  CHECK(store.CountJobs() == 0);
}

TEST_CASE("checkpoint retention through the FSM") {
  StateStore store;
  Fsm fsm(&store);
  Apply(fsm, commands::SubmitJob(MakeJob("ff", 0, 2), ""));
  Apply(fsm, commands::StartAttempt("ff", 1, ""));
  json deleted_all = json::array();
  for (int i = 0; i < 4; ++i) {
    auto r = Apply(
        fsm, commands::CommitCheckpoint("ff", 1, i, "/c" + std::to_string(i), {{"epoch", i}}));
    for (auto& d : r["deleted"]) deleted_all.push_back(d);
  }
  CHECK(deleted_all == json::array({"/c0", "/c1"}));
  auto cks = store.ListCheckpoints("ff");
  REQUIRE(cks.size() == 2);
  CHECK(store.LatestCheckpoint("ff")->path == "/c3");
}

TEST_CASE("stop: pending jobs stop at once, running jobs are flagged") {
  StateStore store;
  Fsm fsm(&store);
  Apply(fsm, commands::SubmitJob(MakeJob("a1", 0), ""));
  CHECK(Apply(fsm, commands::StopJob("a1"))["state"] == kJobStopped);
  Apply(fsm, commands::SubmitJob(MakeJob("a2", 3), ""));
  Apply(fsm, commands::StartAttempt("a2", 1, ""));
  auto r = Apply(fsm, commands::StopJob("a2"));
  CHECK(r["active"] == true);
  CHECK(store.GetJob("a2")->stop_requested);
  // A failure after a stop request does not restart.
  CHECK(Apply(fsm, commands::EndAttempt("a2", 1, Failed(0, 9)))["job_state"] == kJobFailed);
}

TEST_CASE("fail_pending_job: a PENDING job fails with the reason, others are left alone") {
  StateStore store;
  Fsm fsm(&store);
  Apply(fsm, commands::SubmitJob(MakeJob("p1", 0), ""));
  CHECK(Apply(fsm, commands::FailPendingJob("p1", "spec unreadable"))["state"] == kJobFailed);
  auto job = store.GetJob("p1");
  CHECK(job->state == kJobFailed);
  CHECK(job->message == "spec unreadable");
  CHECK(job->ended_at);
  CHECK(job->attempt == 0);
  // A job that started, or ended, is not changed.
  Apply(fsm, commands::SubmitJob(MakeJob("p2", 0), ""));
  Apply(fsm, commands::StartAttempt("p2", 1, ""));
  CHECK(Apply(fsm, commands::FailPendingJob("p2", "late"))["state"] == kJobStarting);
  CHECK(store.GetJob("p2")->message.empty());
  CHECK(Apply(fsm, commands::FailPendingJob("p1", "again"))["state"] == kJobFailed);
  CHECK(store.GetJob("p1")->message == "spec unreadable");
}

TEST_CASE("a stop with a reason keeps it as the message, delete_job forgets a finished job") {
  StateStore store;
  Fsm fsm(&store);
  Apply(fsm, commands::SubmitJob(MakeJob("a1", 0), ""));
  Apply(fsm, commands::StartAttempt("a1", 1, ""));
  CHECK(Apply(fsm, commands::DeleteJob("a1"))["ok"] == false);  // still running
  Apply(fsm, commands::Report("a1", 1, 0, {{"loss", 1}}));
  Apply(fsm, commands::CommitCheckpoint("a1", 1, 0, "/tmp/trial/checkpoint_1", {{"loss", 1}}));
  CHECK(Apply(fsm, commands::StopJob("a1", "time limit of 60 s reached"))["active"] == true);
  CHECK(Apply(fsm, commands::StopJob("a1"))["active"] == true);  // the first reason stays
  commands::AttemptOutcome stopped;
  stopped.state = kJobStopped;
  stopped.reason = "stopped by user";
  CHECK(Apply(fsm, commands::EndAttempt("a1", 1, stopped))["job_state"] == kJobStopped);
  CHECK(store.GetJob("a1")->message == "time limit of 60 s reached");
  // A pending job stops at once with the reason.
  Apply(fsm, commands::SubmitJob(MakeJob("b2", 0), ""));
  Apply(fsm, commands::StopJob("b2", "time limit of 1 s reached"));
  CHECK(store.GetJob("b2")->message == "time limit of 1 s reached");
  // A user's stop says so.
  Apply(fsm, commands::SubmitJob(MakeJob("c3", 0), ""));
  Apply(fsm, commands::StopJob("c3"));
  CHECK(store.GetJob("c3")->message == "stopped by user");

  json deleted = Apply(fsm, commands::DeleteJob("a1"));
  REQUIRE(deleted["ok"] == true);
  CHECK(deleted["trial_dir"] == "/tmp/trial");
  CHECK(deleted["checkpoint_paths"] == json::array({"/tmp/trial/checkpoint_1"}));
  CHECK_FALSE(store.GetJob("a1"));
  CHECK(store.ListAttempts("a1").empty());
  CHECK(store.ListCheckpoints("a1").empty());
  CHECK(store.ListMetrics("a1").empty());
  CHECK(store.CountJobs() == 2);
  CHECK(Apply(fsm, commands::DeleteJob("a1"))["ok"] == false);
}

TEST_CASE("snapshot and restore round trip") {
  StateStore store;
  Fsm fsm(&store);
  Apply(fsm, commands::SubmitJob(MakeJob("0a1b", 2), ""));
  Apply(fsm, commands::SubmitJob(MakeJob("0a2c", 2), ""));
  Apply(fsm, commands::StartAttempt("0a1b", 1, ""));
  Apply(fsm, commands::Report("0a1b", 1, 0, {{"loss", 1.5}}));
  auto image = fsm.Snapshot();
  REQUIRE(image.ok());

  StateStore other;
  Fsm fsm2(&other);
  REQUIRE(fsm2.Restore(*image).ok());
  CHECK(other.CountJobs() == 2);
  CHECK(other.GetJob("0a1b")->metrics == R"({"loss":1.5})");
  CHECK(other.ListMetrics("0a1b").size() == 1);
  // Prefix resolution works on the restored store.
  CHECK(*other.ResolveJobId("0a1") == "0a1b");
  std::vector<std::string> cands;
  auto amb = other.ResolveJobId("0a", &cands);
  CHECK(!amb.ok());
  CHECK(cands.size() == 2);
  CHECK(other.ResolveJobId("zz").status().code() == Status::Code::kNotFound);
  // Applying on the restored copy continues where the original was.
  commands::AttemptOutcome ok;
  ok.state = kJobSucceeded;
  CHECK(Apply(fsm2, commands::EndAttempt("0a1b", 1, ok))["job_state"] == kJobSucceeded);
  CHECK(!fsm2.Restore("garbage that is not a database").ok());
}

TEST_CASE("pending reasons in one command: jobs that are no longer PENDING are skipped") {
  StateStore store;
  Fsm fsm(&store);
  Apply(fsm, commands::SubmitJob(MakeJob("b1", 0), ""));
  Apply(fsm, commands::SubmitJob(MakeJob("b2", 0), ""));
  Apply(fsm, commands::SubmitJob(MakeJob("b3", 0), ""));
  Apply(fsm, commands::StartAttempt("b2", 1, ""));
  auto r =
      Apply(fsm, commands::SetPendingReasons(
                     {{"b1", "needs CPU"}, {"b2", "stale"}, {"b3", "needs GPU"}, {"zz", "x"}}));
  CHECK(r["ok"] == true);
  CHECK(r["updated"] == 2);
  CHECK(store.GetJob("b1")->pending_reason == "needs CPU");
  CHECK(store.GetJob("b2")->pending_reason.empty());
  CHECK(store.GetJob("b3")->pending_reason == "needs GPU");
  // A malformed entry changes nothing, not even the well-formed ones.
  json bad = json::parse(commands::SetPendingReasons({{"b1", "other"}}));
  bad["reasons"]["b3"] = 7;
  CHECK(Apply(fsm, bad.dump())["ok"] == false);
  CHECK(store.GetJob("b1")->pending_reason == "needs CPU");
}

TEST_CASE("active jobs without their specs") {
  StateStore store;
  Fsm fsm(&store);
  Apply(fsm, commands::SubmitJob(MakeJob("c1", 0), ""));
  Apply(fsm, commands::SubmitJob(MakeJob("c2", 0), ""));
  Apply(fsm, commands::StopJob("c2"));
  auto full = store.ListActiveJobs();
  auto light = store.ListActiveJobs(/*with_spec=*/false);
  REQUIRE(full.size() == 1);
  REQUIRE(light.size() == 1);
  CHECK(!full[0].spec.empty());
  CHECK(light[0].spec.empty());
  CHECK(light[0].id == "c1");
  CHECK(light[0].state == kJobPending);
  CHECK(light[0].trial_dir == full[0].trial_dir);
  CHECK(light[0].library_path == full[0].library_path);
}

TEST_CASE("library hashes of the active jobs, each once") {
  StateStore store;
  Fsm fsm(&store);
  auto job = [](const std::string& id, const std::string& sha) {
    JobRecord j = MakeJob(id, 0);
    j.library_sha256 = sha;
    return j;
  };
  Apply(fsm, commands::SubmitJob(job("d1", "bb"), ""));
  Apply(fsm, commands::SubmitJob(job("d2", "aa"), ""));
  Apply(fsm, commands::SubmitJob(job("d3", "bb"), ""));
  Apply(fsm, commands::SubmitJob(job("d4", ""), ""));    // a library path used as-is
  Apply(fsm, commands::SubmitJob(job("d5", "cc"), ""));  // ends below
  Apply(fsm, commands::StopJob("d5"));
  CHECK(store.ActiveLibraryHashes() == std::vector<std::string>{"aa", "bb"});
}

TEST_CASE("the FSM applies the job's stored policy, never its spec") {
  StateStore store;
  Fsm fsm(&store);
  JobRecord j = MakeJob("e1", 5, 5);  // the spec says 5 and 5 ...
  j.policy.max_failures = 0;          // ... the validated policy says otherwise
  j.policy.num_to_keep = 1;
  Apply(fsm, commands::SubmitJob(j, ""));
  CHECK(store.GetJob("e1")->policy == j.policy);
  Apply(fsm, commands::StartAttempt("e1", 1, ""));
  Apply(fsm, commands::CommitCheckpoint("e1", 1, 0, "/c0", json::object()));
  auto r = Apply(fsm, commands::CommitCheckpoint("e1", 1, 1, "/c1", json::object()));
  CHECK(r["deleted"] == json::array({"/c0"}));
  CHECK(Apply(fsm, commands::EndAttempt("e1", 1, Failed(0, 1)))["job_state"] == kJobFailed);
}

TEST_CASE("a submit_job of an older release (no policy) takes its policy from the spec") {
  StateStore store;
  Fsm fsm(&store);
  json old = json::parse(commands::SubmitJob(MakeJob("e2", 2, 3), ""));
  old["job"].erase("policy");
  REQUIRE(Apply(fsm, old.dump())["ok"] == true);
  cmd::JobPolicy want;
  want.max_failures = 2;
  want.num_to_keep = 3;
  CHECK(store.GetJob("e2")->policy == want);
}

TEST_CASE("start_attempt records the head that started it") {
  StateStore store;
  Fsm fsm(&store);
  Apply(fsm, commands::SubmitJob(MakeJob("e3", 0), ""));
  Apply(fsm, commands::StartAttempt("e3", 1, "", "node-2", "run7"));
  auto a = store.GetAttempt("e3", 1);
  REQUIRE(a);
  CHECK(a->head_node == "node-2");
  CHECK(a->head_run == "run7");
}

TEST_CASE("request ids are forgotten kRememberAppliedMs after their command") {
  StateStore store;
  Fsm fsm(&store);
  auto at = [](const std::string& command, int64_t time) {
    json j = json::parse(command);
    j["time"] = time;
    return j.dump();
  };
  const std::string submit = at(commands::SubmitJob(MakeJob("dd", 5), ""), 2000);
  const std::string first = fsm.Apply(submit);
  CHECK(json::parse(first)["ok"] == true);
  // Within the window a retry gets the stored answer, even after other commands.
  Apply(fsm, at(commands::SetPendingReasons({{"dd", "waiting"}}), 2000 + Fsm::kRememberAppliedMs));
  CHECK(fsm.Apply(submit) == first);
  // A command past the window forgets it: the same text is applied anew, and refused
  // (the job exists), the job unchanged.
  Apply(fsm,
        at(commands::SetPendingReasons({{"dd", "still"}}), 2000 + Fsm::kRememberAppliedMs + 1));
  auto again = json::parse(fsm.Apply(submit));
  CHECK(again["ok"] == false);
  CHECK(store.GetJob("dd")->pending_reason == "still");
  CHECK(store.CountJobs() == 1);
}
