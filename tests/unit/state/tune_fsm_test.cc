// Tuning experiments through the FSM (daemon/state/fsm.cc): create_experiment,
// update_experiment, delete_experiment and submit_job's trial link, applied as encoded commands
// with the proposer's clock chosen by the test; and StateStore's experiment reads
// (daemon/state/experiment_store.cc), before and after a snapshot.
#include <sqlite3.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "daemon/state/commands.h"
#include "daemon/state/fsm.h"

using namespace traintl;
using nlohmann::json;

namespace {

JobRecord MakeJob(const std::string& id) {
  JobRecord j;
  j.id = id;
  j.name = "trial";
  j.spec = json{{"name", "trial"}}.dump();
  j.library_path = "/lib.so";
  j.trial_dir = "/tmp/exp/trial";
  j.submitted_at = 1000;
  return j;
}

// `c` as the proposer at `time` (ms) would encode it, with a request id of its own.
std::string At(int64_t time, cmd::Command c) {
  static int n = 0;
  char rid[32];
  std::snprintf(rid, sizeof rid, "%024d", ++n);
  return cmd::Encode(cmd::Envelope{rid, time, std::move(c)});
}

json Apply(Fsm& fsm, const std::string& command) { return json::parse(fsm.Apply(command)); }

cmd::CreateExperiment Create(const std::string& id, const std::string& name,
                             const std::string& submission_id = "") {
  cmd::CreateExperiment c;
  c.experiment_id = id;
  c.name = name;
  c.spec = {{"name", name}, {"num_samples", 4}};
  c.seed = 77;
  c.exp_dir = "/data/tune/" + name;
  c.library_sha256 = "ab12";
  c.library_path = "/blobs/ab12.so";
  c.submission_id = submission_id;
  return c;
}

cmd::TrialLink Link(const std::string& exp, int index, const json& config) {
  char name[32];
  std::snprintf(name, sizeof name, "exp_%05d", index);
  return cmd::TrialLink{exp, index, name, config};
}

// The head's submit_job of job `id` (as commands::SubmitJob builds it), running `link`.
cmd::SubmitJob Submit(const std::string& id, std::optional<cmd::TrialLink> link,
                      const std::string& submission_id = "") {
  auto e = cmd::Decode(commands::SubmitJob(MakeJob(id), submission_id));
  REQUIRE(e.ok());
  cmd::SubmitJob c = std::get<cmd::SubmitJob>(e->body);
  c.trial = std::move(link);
  return c;
}

cmd::UpdateExperiment Update(const std::string& exp, const std::string& state = "",
                             const std::string& message = "") {
  cmd::UpdateExperiment u;
  u.experiment_id = exp;
  u.state = state;
  u.message = message;
  return u;
}

cmd::TrialUpdate TrialUp(int index, std::optional<std::string> status,
                         std::optional<std::string> reason, std::optional<std::string> pending) {
  cmd::TrialUpdate t;
  t.index = index;
  t.status = std::move(status);
  t.reason = std::move(reason);
  t.pending = std::move(pending);
  return t;
}

// A store with experiment "e1" created at t=1000.
struct WithExperiment {
  StateStore store;
  Fsm fsm{&store};
  WithExperiment() { REQUIRE(Apply(fsm, At(1000, Create("e1", "exp")))["ok"] == true); }
};

}  // namespace

TEST_CASE("create_experiment records a RUNNING experiment at the proposer's time") {
  StateStore store;
  Fsm fsm(&store);
  auto r = Apply(fsm, At(5000, Create("e1", "mnist")));
  CHECK(r == json{{"ok", true}, {"experiment_id", "e1"}});
  auto e = store.GetExperiment("e1");
  REQUIRE(e);
  CHECK(e->id == "e1");
  CHECK(e->name == "mnist");
  CHECK(json::parse(e->spec) == json{{"name", "mnist"}, {"num_samples", 4}});
  CHECK(e->seed == 77);
  CHECK(e->state == kExperimentRunning);
  CHECK(e->message.empty());
  CHECK(e->created_at == 5000);
  CHECK_FALSE(e->ended_at);
  CHECK(e->budget_from == 5000);
  CHECK(e->budget_used_ms == 0);
  CHECK(e->exp_dir == "/data/tune/mnist");
  CHECK(e->library_sha256 == "ab12");
  CHECK(e->library_path == "/blobs/ab12.so");
  CHECK(e->scheduler_state == "{}");
  CHECK(e->trials_created == 0);
  CHECK(store.ListTrials("e1").empty());
}

TEST_CASE("create_experiment: a known submission id answers with its experiment, ids are unique") {
  StateStore store;
  Fsm fsm(&store);
  CHECK(Apply(fsm, At(1000, Create("e1", "a", "sub-1")))["experiment_id"] == "e1");
  // The same submission again (a client's retry with a fresh id): the first experiment.
  CHECK(Apply(fsm, At(2000, Create("e2", "b", "sub-1"))) ==
        json{{"ok", true}, {"experiment_id", "e1"}});
  CHECK_FALSE(store.GetExperiment("e2"));
  CHECK(store.GetExperiment("e1")->name == "a");

  // An id taken, with or without another submission id.
  auto dup = Apply(fsm, At(3000, Create("e1", "c", "sub-2")));
  CHECK(dup["ok"] == false);
  CHECK(dup["error"] == "experiment id e1 already exists");
  CHECK(Apply(fsm, At(3000, Create("e1", "c")))["ok"] == false);
  CHECK(store.GetExperiment("e1")->name == "a");
  CHECK(store.ListExperiments(false).size() == 1);
  // Experiments without a submission id do not collide on it.
  CHECK(Apply(fsm, At(4000, Create("e3", "d")))["ok"] == true);
  CHECK(Apply(fsm, At(4000, Create("e4", "d")))["ok"] == true);
  CHECK(store.ListExperiments(false).size() == 3);
}

TEST_CASE("submit_job with a trial link creates the trial") {
  WithExperiment w;
  auto r = Apply(w.fsm, At(2000, Submit("j1", Link("e1", 0, {{"lr", 0.1}}))));
  CHECK(r == json{{"ok", true}, {"job_id", "j1"}});
  REQUIRE(w.store.GetJob("j1"));
  auto t = w.store.ListTrials("e1");
  REQUIRE(t.size() == 1);
  CHECK(t[0].experiment_id == "e1");
  CHECK(t[0].index == 0);
  CHECK(t[0].name == "exp_00000");
  CHECK(json::parse(t[0].config) == json{{"lr", 0.1}});
  CHECK(t[0].job_id == "j1");
  CHECK(json::parse(t[0].jobs) == json::array({"j1"}));
  CHECK(t[0].status.empty());
  CHECK(t[0].reason.empty());
  CHECK(t[0].pending.empty());
  CHECK(t[0].created_at == 2000);
  CHECK(w.store.GetExperiment("e1")->trials_created == 1);

  // trials_created counts up to the highest index, never down.
  REQUIRE(Apply(w.fsm, At(2100, Submit("j4", Link("e1", 3, json::object()))))["ok"] == true);
  CHECK(w.store.GetExperiment("e1")->trials_created == 4);
  REQUIRE(Apply(w.fsm, At(2200, Submit("j2", Link("e1", 1, json::object()))))["ok"] == true);
  CHECK(w.store.GetExperiment("e1")->trials_created == 4);
  // The creation changed nothing else of the experiment.
  auto e = w.store.GetExperiment("e1");
  CHECK(e->state == kExperimentRunning);
  CHECK(e->budget_from == 1000);
  CHECK(e->scheduler_state == "{}");

  // A job without a link is no trial's.
  REQUIRE(Apply(w.fsm, At(2300, Submit("plain", std::nullopt)))["ok"] == true);
  CHECK_FALSE(w.store.TrialOfJob("plain"));
  CHECK(w.store.ListTrials("e1").size() == 3);
}

TEST_CASE("a second submit_job for a trial continues it") {
  WithExperiment w;
  REQUIRE(Apply(w.fsm, At(2000, Submit("j1", Link("e1", 0, {{"lr", 0.1}}))))["ok"] == true);
  // The scheduler paused it and planned a continuation.
  auto pause = Update("e1");
  pause.trials = {TrialUp(0, "PAUSED", "paused at rung 1", R"({"from":"j1"})")};
  REQUIRE(Apply(w.fsm, At(3000, pause))["ok"] == true);
  auto paused = w.store.ListTrials("e1");
  REQUIRE(paused.size() == 1);
  CHECK(paused[0].status == "PAUSED");
  CHECK(paused[0].pending == R"({"from":"j1"})");

  REQUIRE(Apply(w.fsm, At(4000, Submit("j2", Link("e1", 0, {{"lr", 0.2}}))))["ok"] == true);
  auto t = w.store.ListTrials("e1");
  REQUIRE(t.size() == 1);
  CHECK(t[0].job_id == "j2");
  CHECK(json::parse(t[0].jobs) == json::array({"j1", "j2"}));
  CHECK(json::parse(t[0].config) == json{{"lr", 0.2}});
  CHECK(t[0].status.empty());
  CHECK(t[0].pending.empty());
  CHECK(t[0].name == "exp_00000");
  CHECK(t[0].created_at == 2000);  // the trial's, not the continuation's
  CHECK(w.store.GetExperiment("e1")->trials_created == 1);
  // The trial follows its current job.
  CHECK_FALSE(w.store.TrialOfJob("j1"));
  auto of = w.store.TrialOfJob("j2");
  REQUIRE(of);
  CHECK(of->experiment_id == "e1");
  CHECK(of->index == 0);

  // A third run appends again.
  REQUIRE(Apply(w.fsm, At(5000, Submit("j3", Link("e1", 0, {{"lr", 0.3}}))))["ok"] == true);
  CHECK(json::parse(w.store.ListTrials("e1")[0].jobs) == json::array({"j1", "j2", "j3"}));
}

TEST_CASE("a retried trial submission (same submission id) does not link the job twice") {
  WithExperiment w;
  REQUIRE(Apply(w.fsm, At(2000, Submit("j1", Link("e1", 0, json::object()), "s1")))["ok"] == true);
  CHECK(Apply(w.fsm, At(2001, Submit("j1b", Link("e1", 0, json::object()), "s1")))["job_id"] ==
        "j1");
  CHECK_FALSE(w.store.GetJob("j1b"));
  auto t = w.store.ListTrials("e1");
  REQUIRE(t.size() == 1);
  CHECK(json::parse(t[0].jobs) == json::array({"j1"}));
}

TEST_CASE("submit_job linked to a missing or ended experiment is refused and stores no job") {
  WithExperiment w;
  auto missing = Apply(w.fsm, At(2000, Submit("j1", Link("nope", 0, json::object()))));
  CHECK(missing["ok"] == false);
  CHECK(missing["error"] == "no experiment nope");
  CHECK_FALSE(w.store.GetJob("j1"));
  CHECK(w.store.CountJobs() == 0);

  auto negative = Apply(w.fsm, At(2000, Submit("j1", Link("e1", -1, json::object()))));
  CHECK(negative["ok"] == false);
  CHECK(negative["error"] == "bad trial index");
  CHECK_FALSE(w.store.GetJob("j1"));

  REQUIRE(Apply(w.fsm, At(3000, Update("e1", kJobStopped, "stopped by user")))["ok"] == true);
  auto stopped = Apply(w.fsm, At(4000, Submit("j1", Link("e1", 0, json::object()))));
  CHECK(stopped["ok"] == false);
  CHECK(stopped["error"] == "experiment e1 is STOPPED");
  CHECK_FALSE(w.store.GetJob("j1"));
  CHECK(w.store.CountJobs() == 0);
  CHECK(w.store.ListTrials("e1").empty());
  CHECK(w.store.GetExperiment("e1")->trials_created == 0);

  // The job id stays free: once resumed, the same submission goes through.
  REQUIRE(Apply(w.fsm, At(5000, Update("e1", kExperimentRunning)))["ok"] == true);
  CHECK(Apply(w.fsm, At(6000, Submit("j1", Link("e1", 0, json::object()))))["ok"] == true);
  CHECK(w.store.CountJobs() == 1);
  CHECK(w.store.ListTrials("e1").size() == 1);
}

TEST_CASE("update_experiment changes the trials it names, only the fields it carries") {
  WithExperiment w;
  REQUIRE(Apply(w.fsm, At(2000, Submit("j0", Link("e1", 0, json::object()))))["ok"] == true);
  REQUIRE(Apply(w.fsm, At(2000, Submit("j1", Link("e1", 1, json::object()))))["ok"] == true);

  auto u = Update("e1");
  u.trials = {TrialUp(1, "PAUSED", "below cutoff", R"({"exploit":0})")};
  REQUIRE(Apply(w.fsm, At(3000, u))["ok"] == true);
  auto t = w.store.ListTrials("e1");
  REQUIRE(t.size() == 2);
  CHECK(t[0].status.empty());  // not named: unchanged
  CHECK(t[0].reason.empty());
  CHECK(t[1].status == "PAUSED");
  CHECK(t[1].reason == "below cutoff");
  CHECK(t[1].pending == R"({"exploit":0})");
  CHECK(t[1].job_id == "j1");  // the link's fields are the FSM's, not the update's

  // Only a reason: status and pending stay.
  u.trials = {TrialUp(1, std::nullopt, "promoted", std::nullopt)};
  REQUIRE(Apply(w.fsm, At(3100, u))["ok"] == true);
  t = w.store.ListTrials("e1");
  CHECK(t[1].status == "PAUSED");
  CHECK(t[1].reason == "promoted");
  CHECK(t[1].pending == R"({"exploit":0})");

  // Two trials in one entry; an empty pending clears it.
  u.trials = {TrialUp(0, "DONE", std::nullopt, std::nullopt),
              TrialUp(1, "", std::nullopt, std::string())};
  REQUIRE(Apply(w.fsm, At(3200, u))["ok"] == true);
  t = w.store.ListTrials("e1");
  CHECK(t[0].status == "DONE");
  CHECK(t[1].status.empty());
  CHECK(t[1].reason == "promoted");
  CHECK(t[1].pending.empty());
  // Trial updates leave the experiment's state alone.
  auto e = w.store.GetExperiment("e1");
  CHECK(e->state == kExperimentRunning);
  CHECK_FALSE(e->ended_at);
}

TEST_CASE("update_experiment records the scheduler's state, absent, it stays") {
  WithExperiment w;
  auto u = Update("e1");
  u.scheduler_state = R"({"rung":1})";
  REQUIRE(Apply(w.fsm, At(2000, u))["ok"] == true);
  CHECK(w.store.GetExperiment("e1")->scheduler_state == R"({"rung":1})");
  REQUIRE(Apply(w.fsm, At(2100, Update("e1")))["ok"] == true);
  CHECK(w.store.GetExperiment("e1")->scheduler_state == R"({"rung":1})");
  // With an ending, in the same entry.
  auto end = Update("e1", kJobSucceeded);
  end.scheduler_state = R"({"rung":2})";
  REQUIRE(Apply(w.fsm, At(2200, end))["ok"] == true);
  auto e = w.store.GetExperiment("e1");
  CHECK(e->scheduler_state == R"({"rung":2})");
  CHECK(e->state == kJobSucceeded);
}

TEST_CASE("ending, refusing to end again, resuming and ending again keep the budget's account") {
  WithExperiment w;  // created (and its budget started) at t=1000
  auto stop = Apply(w.fsm, At(4000, Update("e1", kJobStopped, "stopped by user")));
  CHECK(stop == json{{"ok", true}});
  auto e = w.store.GetExperiment("e1");
  CHECK(e->state == kJobStopped);
  CHECK(e->message == "stopped by user");
  CHECK(e->ended_at == std::optional<int64_t>(4000));
  CHECK(e->budget_used_ms == 3000);

  // An ended experiment cannot end again: nothing changes.
  auto again = Apply(w.fsm, At(5000, Update("e1", kJobFailed, "late")));
  CHECK(again["ok"] == false);
  CHECK(again["error"] == "experiment e1 is STOPPED");
  e = w.store.GetExperiment("e1");
  CHECK(e->state == kJobStopped);
  CHECK(e->message == "stopped by user");
  CHECK(e->ended_at == std::optional<int64_t>(4000));
  CHECK(e->budget_used_ms == 3000);

  // A resume: RUNNING again, the budget's clock restarted, what was used kept.
  REQUIRE(Apply(w.fsm, At(10000, Update("e1", kExperimentRunning)))["ok"] == true);
  e = w.store.GetExperiment("e1");
  CHECK(e->state == kExperimentRunning);
  CHECK(e->message.empty());
  CHECK_FALSE(e->ended_at);
  CHECK(e->budget_from == 10000);
  CHECK(e->budget_used_ms == 3000);
  CHECK(e->created_at == 1000);
  auto resume_again = Apply(w.fsm, At(10500, Update("e1", kExperimentRunning)));
  CHECK(resume_again["ok"] == false);
  CHECK(resume_again["error"] == "experiment e1 is already RUNNING");
  CHECK(w.store.GetExperiment("e1")->budget_from == 10000);

  // Success: the running time since the resume is added.
  REQUIRE(Apply(w.fsm, At(12500, Update("e1", kJobSucceeded)))["ok"] == true);
  e = w.store.GetExperiment("e1");
  CHECK(e->state == kJobSucceeded);
  CHECK(e->message.empty());
  CHECK(e->ended_at == std::optional<int64_t>(12500));
  CHECK(e->budget_used_ms == 5500);

  // Resumed, then ended by a proposer whose clock is behind: no negative time.
  REQUIRE(Apply(w.fsm, At(20000, Update("e1", kExperimentRunning)))["ok"] == true);
  REQUIRE(Apply(w.fsm, At(19000, Update("e1", kJobFailed, "no trials left")))["ok"] == true);
  e = w.store.GetExperiment("e1");
  CHECK(e->state == kJobFailed);
  CHECK(e->message == "no trials left");
  CHECK(e->ended_at == std::optional<int64_t>(19000));
  CHECK(e->budget_used_ms == 5500);
}

TEST_CASE("update_experiment refusals change nothing") {
  WithExperiment w;
  REQUIRE(Apply(w.fsm, At(2000, Submit("j0", Link("e1", 0, json::object()))))["ok"] == true);

  auto unknown = Apply(w.fsm, At(3000, Update("zz", kJobStopped)));
  CHECK(unknown["ok"] == false);
  CHECK(unknown["error"] == "no experiment zz");

  auto bad_state = Apply(w.fsm, At(3000, Update("e1", "PAUSED")));
  CHECK(bad_state["ok"] == false);
  CHECK(bad_state["error"] == "bad experiment state PAUSED");
  CHECK(w.store.GetExperiment("e1")->state == kExperimentRunning);

  // A trial that does not exist: the whole entry is refused, its other changes with it.
  auto u = Update("e1", kJobStopped, "stopped by user");
  u.scheduler_state = R"({"x":2})";
  u.trials = {TrialUp(0, "DONE", "finished", "{}"), TrialUp(7, std::nullopt, "r", std::nullopt)};
  auto r = Apply(w.fsm, At(4000, u));
  CHECK(r["ok"] == false);
  CHECK(r["error"] == "experiment e1 has no trial 7");
  auto e = w.store.GetExperiment("e1");
  CHECK(e->state == kExperimentRunning);
  CHECK(e->message.empty());
  CHECK_FALSE(e->ended_at);
  CHECK(e->budget_used_ms == 0);
  CHECK(e->scheduler_state == "{}");
  auto t = w.store.ListTrials("e1");
  REQUIRE(t.size() == 1);
  CHECK(t[0].status.empty());
  CHECK(t[0].reason.empty());
  CHECK(t[0].pending.empty());
  // Updates create no trials.
  CHECK(w.store.GetExperiment("e1")->trials_created == 1);
}

TEST_CASE("ResolveExperimentId: id, newest of a name, unique prefix") {
  StateStore store;
  Fsm fsm(&store);
  REQUIRE(Apply(fsm, At(1000, Create("a1b2c3", "mnist")))["ok"] == true);
  REQUIRE(Apply(fsm, At(1500, Create("a1ff00", "other")))["ok"] == true);
  REQUIRE(Apply(fsm, At(2000, Create("0099aa", "mnist")))["ok"] == true);

  CHECK(*store.ResolveExperimentId("a1b2c3") == "a1b2c3");
  CHECK(*store.ResolveExperimentId("mnist") == "0099aa");  // the newer of the two
  CHECK(*store.ResolveExperimentId("other") == "a1ff00");
  CHECK(*store.ResolveExperimentId("a1b") == "a1b2c3");
  CHECK(*store.ResolveExperimentId("00") == "0099aa");

  auto amb = store.ResolveExperimentId("a1");
  REQUIRE_FALSE(amb.ok());
  CHECK(amb.status().code() == Status::Code::kFailedPrecondition);
  CHECK(amb.status().message().find("ambiguous") != std::string::npos);
  CHECK(amb.status().message().find("a1b2c3") != std::string::npos);
  CHECK(amb.status().message().find("a1ff00") != std::string::npos);

  for (const char* ref : {"zz", "ff", "", "mnis", "a1b2c3d"}) {
    INFO(ref);
    auto r = store.ResolveExperimentId(ref);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Status::Code::kNotFound);
  }
  CHECK(store.ResolveExperimentId("zz").status().message() == "no experiment zz");
}

TEST_CASE("ListExperiments: newest first, running only, a limit") {
  StateStore store;
  Fsm fsm(&store);
  REQUIRE(Apply(fsm, At(1000, Create("e1", "a")))["ok"] == true);
  REQUIRE(Apply(fsm, At(3000, Create("e3", "c")))["ok"] == true);
  REQUIRE(Apply(fsm, At(2000, Create("e2", "b")))["ok"] == true);
  REQUIRE(Apply(fsm, At(4000, Update("e3", kJobStopped, "stopped by user")))["ok"] == true);

  auto ids = [](const std::vector<ExperimentRecord>& es) {
    std::vector<std::string> out;
    for (const auto& e : es) out.push_back(e.id);
    return out;
  };
  CHECK(ids(store.ListExperiments(false)) == std::vector<std::string>{"e3", "e2", "e1"});
  CHECK(ids(store.ListExperiments(true)) == std::vector<std::string>{"e2", "e1"});
  CHECK(ids(store.ListExperiments(false, 2)) == std::vector<std::string>{"e3", "e2"});
  CHECK(ids(store.ListExperiments(true, 1)) == std::vector<std::string>{"e2"});
  auto all = store.ListExperiments(false);
  CHECK(all[0].state == kJobStopped);
  CHECK(all[0].message == "stopped by user");
  CHECK(all[1].name == "b");
}

TEST_CASE("ListTrials by index, TrialOfJob, CountMetrics") {
  WithExperiment w;
  REQUIRE(Apply(w.fsm, At(1100, Create("e2", "second")))["ok"] == true);
  REQUIRE(Apply(w.fsm, At(2000, Submit("j2", Link("e1", 2, json::object()))))["ok"] == true);
  REQUIRE(Apply(w.fsm, At(2001, Submit("j0", Link("e1", 0, json::object()))))["ok"] == true);
  REQUIRE(Apply(w.fsm, At(2002, Submit("j1", Link("e1", 1, json::object()))))["ok"] == true);
  REQUIRE(Apply(w.fsm, At(2003, Submit("k0", Link("e2", 0, json::object()))))["ok"] == true);

  auto t = w.store.ListTrials("e1");
  REQUIRE(t.size() == 3);
  CHECK(t[0].index == 0);
  CHECK(t[0].job_id == "j0");
  CHECK(t[1].index == 1);
  CHECK(t[1].job_id == "j1");
  CHECK(t[2].index == 2);
  CHECK(t[2].job_id == "j2");
  auto t2 = w.store.ListTrials("e2");
  REQUIRE(t2.size() == 1);
  CHECK(t2[0].job_id == "k0");
  CHECK(w.store.ListTrials("zz").empty());

  auto of = w.store.TrialOfJob("k0");
  REQUIRE(of);
  CHECK(of->experiment_id == "e2");
  CHECK(of->index == 0);
  CHECK(w.store.TrialOfJob("j2")->index == 2);
  CHECK_FALSE(w.store.TrialOfJob("nope"));

  REQUIRE(Apply(w.fsm, commands::StartAttempt("j1", 1, ""))["ok"] == true);
  for (int seq = 0; seq < 3; ++seq)
    REQUIRE(Apply(w.fsm, commands::Report("j1", 1, seq, {{"loss", seq}}))["ok"] == true);
  // A report sent again (same attempt and seq) replaces the stored one.
  REQUIRE(Apply(w.fsm, commands::Report("j1", 1, 2, {{"loss", 9}}))["ok"] == true);
  CHECK(w.store.CountMetrics("j1") == 3);
  CHECK(w.store.CountMetrics("j0") == 0);
  CHECK(w.store.CountMetrics("nope") == 0);
}

TEST_CASE("delete_experiment forgets the experiment, its trials and every job they ran") {
  WithExperiment w;
  REQUIRE(Apply(w.fsm, At(1100, Create("e2", "other")))["ok"] == true);
  // Trial 0 ran as j1, then continued as j2; trial 1 as j3; e2's trial as k1.
  REQUIRE(Apply(w.fsm, At(2000, Submit("j1", Link("e1", 0, json::object()))))["ok"] == true);
  REQUIRE(Apply(w.fsm, At(2001, Submit("j3", Link("e1", 1, json::object()))))["ok"] == true);
  REQUIRE(Apply(w.fsm, At(2002, Submit("k1", Link("e2", 0, json::object()))))["ok"] == true);
  REQUIRE(Apply(w.fsm, commands::StartAttempt("j1", 1, ""))["ok"] == true);
  REQUIRE(Apply(w.fsm, commands::Report("j1", 1, 0, {{"loss", 1}}))["ok"] == true);
  REQUIRE(Apply(w.fsm, commands::CommitCheckpoint("j1", 1, 0, "/data/tune/exp/t0/ck", {}))["ok"] ==
          true);
  commands::AttemptOutcome stopped;
  stopped.state = kJobStopped;
  REQUIRE(Apply(w.fsm, commands::EndAttempt("j1", 1, stopped))["ok"] == true);
  REQUIRE(Apply(w.fsm, At(3000, Submit("j2", Link("e1", 0, json::object()))))["ok"] == true);
  // A job that is not part of any experiment stays whatever happens.
  REQUIRE(Apply(w.fsm, commands::SubmitJob(MakeJob("solo"), ""))["ok"] == true);

  // RUNNING: refused.
  json r = Apply(w.fsm, At(4000, cmd::DeleteExperiment{"e1"}));
  CHECK(r["ok"] == false);
  CHECK(r["error"].get<std::string>().find("RUNNING") != std::string::npos);
  REQUIRE(Apply(w.fsm, At(4001, Update("e1", kJobStopped, "stopped by user")))["ok"] == true);
  // Stopped, but trial 0's job j2 and trial 1's j3 are still PENDING (their stop is under
  // way): refused, and nothing is gone.
  r = Apply(w.fsm, At(4002, cmd::DeleteExperiment{"e1"}));
  CHECK(r["ok"] == false);
  CHECK(r["error"].get<std::string>().find("wait for it to end") != std::string::npos);
  CHECK(w.store.GetExperiment("e1"));
  CHECK(w.store.GetJob("j1"));
  REQUIRE(Apply(w.fsm, commands::StopJob("j2"))["ok"] == true);
  REQUIRE(Apply(w.fsm, commands::StopJob("j3"))["ok"] == true);
  REQUIRE(w.store.GetJob("j2")->state == kJobStopped);
  // A trial job a user deleted already is skipped.
  REQUIRE(Apply(w.fsm, commands::DeleteJob("j3"))["ok"] == true);

  r = Apply(w.fsm, At(4003, cmd::DeleteExperiment{"e1"}));
  INFO(r.dump());
  REQUIRE(r["ok"] == true);
  CHECK(r["exp_dir"] == "/data/tune/exp");
  CHECK(r["job_ids"] == json::array({"j1", "j2"}));
  CHECK_FALSE(w.store.GetExperiment("e1"));
  CHECK(w.store.ListTrials("e1").empty());
  for (const char* id : {"j1", "j2"}) {
    CHECK_FALSE(w.store.GetJob(id));
    CHECK(w.store.ListAttempts(id).empty());
    CHECK(w.store.ListCheckpoints(id).empty());
    CHECK(w.store.CountMetrics(id) == 0);
  }
  // The other experiment and the job of none are untouched.
  CHECK(w.store.GetExperiment("e2"));
  CHECK(w.store.ListTrials("e2").size() == 1);
  CHECK(w.store.GetJob("k1"));
  CHECK(w.store.GetJob("solo"));
  CHECK(w.store.ListExperiments(false).size() == 1);
  // Gone: a second delete is refused.
  r = Apply(w.fsm, At(4004, cmd::DeleteExperiment{"e1"}));
  CHECK(r["ok"] == false);
  CHECK(r["error"] == "no experiment e1");
}

TEST_CASE("experiments and trials survive a snapshot") {
  WithExperiment w;
  REQUIRE(Apply(w.fsm, At(1500, Create("f00d", "named", "sub-7")))["ok"] == true);
  REQUIRE(Apply(w.fsm, At(2000, Submit("j0", Link("e1", 0, {{"lr", 0.5}}))))["ok"] == true);
  REQUIRE(Apply(w.fsm, At(2100, Submit("j1", Link("e1", 0, {{"lr", 0.25}}))))["ok"] == true);
  auto u = Update("e1", kJobStopped, "stopped by user");
  u.scheduler_state = R"({"t":[1]})";
  u.trials = {TrialUp(0, "PAUSED", "why", R"({"p":1})")};
  REQUIRE(Apply(w.fsm, At(3000, u))["ok"] == true);
  auto image = w.fsm.Snapshot();
  REQUIRE(image.ok());

  StateStore other;
  Fsm fsm2(&other);
  REQUIRE(fsm2.Restore(*image).ok());
  auto e = other.GetExperiment("e1");
  REQUIRE(e);
  CHECK(e->name == "exp");
  CHECK(e->state == kJobStopped);
  CHECK(e->message == "stopped by user");
  CHECK(e->created_at == 1000);
  CHECK(e->ended_at == std::optional<int64_t>(3000));
  CHECK(e->budget_used_ms == 2000);
  CHECK(e->scheduler_state == R"({"t":[1]})");
  CHECK(e->trials_created == 1);
  CHECK(e->seed == 77);
  auto t = other.ListTrials("e1");
  REQUIRE(t.size() == 1);
  CHECK(t[0].name == "exp_00000");
  CHECK(json::parse(t[0].config) == json{{"lr", 0.25}});
  CHECK(t[0].job_id == "j1");
  CHECK(json::parse(t[0].jobs) == json::array({"j0", "j1"}));
  CHECK(t[0].status == "PAUSED");
  CHECK(t[0].reason == "why");
  CHECK(t[0].pending == R"({"p":1})");
  CHECK(t[0].created_at == 2000);
  CHECK(other.TrialOfJob("j1")->index == 0);
  CHECK(*other.ResolveExperimentId("named") == "f00d");
  CHECK(*other.ResolveExperimentId("f0") == "f00d");
  CHECK(other.ListExperiments(false).size() == 2);

  // The restored store goes on: the submission id is still known, a resume applies.
  CHECK(Apply(fsm2, At(4000, Create("beef", "again", "sub-7")))["experiment_id"] == "f00d");
  CHECK_FALSE(other.GetExperiment("beef"));
  REQUIRE(Apply(fsm2, At(5000, Update("e1", kExperimentRunning)))["ok"] == true);
  REQUIRE(Apply(fsm2, At(5500, Submit("j2", Link("e1", 0, json::object()))))["ok"] == true);
  CHECK(json::parse(other.ListTrials("e1")[0].jobs) == json::array({"j0", "j1", "j2"}));
}

TEST_CASE("a snapshot of a release before tuning gains empty experiment tables") {
  // A schema-2 database (before experiments existed), as its snapshot carries it.
  std::ifstream in(std::string(TRAINTL_STATE_TESTDATA) + "/schema_v2.sql");
  REQUIRE(in.good());
  std::stringstream sql;
  sql << in.rdbuf();
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(":memory:", &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, sql.str().c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_int64 size = 0;
  unsigned char* p = sqlite3_serialize(db, "main", &size, 0);
  REQUIRE(p != nullptr);
  const std::string image(reinterpret_cast<const char*>(p), static_cast<size_t>(size));
  sqlite3_free(p);
  sqlite3_close(db);

  StateStore store;
  Fsm fsm(&store);
  REQUIRE(fsm.Restore(image).ok());
  CHECK(store.ListExperiments(false).empty());
  CHECK(store.ResolveExperimentId("e1").status().code() == Status::Code::kNotFound);
  CHECK_FALSE(store.TrialOfJob("aa01"));
  REQUIRE(Apply(fsm, At(1000, Create("e1", "exp", "sub-1")))["ok"] == true);
  REQUIRE(Apply(fsm, At(2000, Submit("t0", Link("e1", 0, json::object()))))["ok"] == true);
  CHECK(store.ListTrials("e1").size() == 1);
}
