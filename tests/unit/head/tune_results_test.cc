// A tuning trial's results (daemon/head/tune_results.h), built from a store the FSM
// filled as the head would (submit_job with a trial link, start_attempt, report,
// end_attempt), and the files written into the trial dir.
#include "daemon/head/tune_results.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "common/file_util.h"
#include "daemon/state/commands.h"
#include "daemon/state/fsm.h"

using namespace traintl;
using nlohmann::json;

namespace {

constexpr int64_t kT0 = 1700000000000;  // ms since the epoch

std::string TempDir() {
  char tmpl[] = "/tmp/traintl-tune-results-XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  return tmpl;
}

// `c` as the proposer at kT0 + `ms` would encode it, with a request id of its own.
std::string At(int64_t ms, cmd::Command c) {
  static int n = 0;
  char rid[32];
  std::snprintf(rid, sizeof rid, "%024d", ++n);
  return cmd::Encode(cmd::Envelope{rid, kT0 + ms, std::move(c)});
}

void MustApply(Fsm& fsm, const std::string& command) {
  const json r = json::parse(fsm.Apply(command));
  INFO(r.dump());
  REQUIRE(r["ok"] == true);
}

cmd::SubmitJob Submit(const std::string& id, const json& config) {
  JobRecord j;
  j.id = id;
  j.name = "exp_00000";
  j.spec = json{{"name", "exp_00000"}}.dump();
  j.library_path = "/lib.so";
  j.trial_dir = "/tmp/exp/exp_00000";
  j.submitted_at = kT0;
  j.policy.max_failures = 1;
  auto e = cmd::Decode(commands::SubmitJob(j, ""));
  REQUIRE(e.ok());
  cmd::SubmitJob c = std::get<cmd::SubmitJob>(e->body);
  c.trial = cmd::TrialLink{"e1", 0, "exp_00000", config};
  return c;
}

cmd::Report Report(const std::string& job, int attempt, int seq, const json& metrics) {
  return cmd::Report{job, attempt, seq, metrics};
}

cmd::EndAttempt End(const std::string& job, int attempt, const std::string& state) {
  cmd::EndAttempt e;
  e.job_id = job;
  e.attempt = attempt;
  e.outcome.state = state;
  e.outcome.reason = state == kJobFailed ? "rank 0 exited with code 1" : "";
  return e;
}

// Trial 0 of experiment e1 ran as job j1 (two attempts: the first failed and restarted,
// then the scheduler paused it: STOPPED 5 s after its start), continued as job j2 (still
// running). Reports: j1 at +2 s (attempt 1) and +4 s (attempt 2); j2 at +1 s and +3.5 s.
void FillTrial(Fsm& fsm) {
  cmd::CreateExperiment c;
  c.experiment_id = "e1";
  c.name = "exp";
  c.spec = json::object();
  c.exp_dir = "/tmp/exp";
  MustApply(fsm, At(0, c));
  MustApply(fsm, At(1000, Submit("j1", {{"lr", 0.1}})));
  MustApply(fsm, At(10000, cmd::StartAttempt{"j1", 1, "", "", "", {}, {}}));
  MustApply(fsm, At(10100, cmd::JobRunning{"j1", 1}));
  MustApply(fsm, At(12000, Report("j1", 1, 0, {{"loss", 0.9}})));
  MustApply(fsm, At(13000, End("j1", 1, kJobFailed)));
  MustApply(fsm, At(13500, cmd::StartAttempt{"j1", 2, "", "", "", {}, {}}));
  MustApply(fsm, At(14000, Report("j1", 2, 0, {{"loss", 0.7}})));
  MustApply(fsm, At(15000, End("j1", 2, kJobStopped)));
  MustApply(fsm, At(16000, Submit("j2", {{"lr", 0.2}})));
  MustApply(fsm, At(20000, cmd::StartAttempt{"j2", 1, "", "", "", {}, {}}));
  MustApply(fsm, At(21000, Report("j2", 1, 0, {{"loss", 0.5}})));
  MustApply(fsm, At(23500, Report("j2", 1, 1, {{"loss", 0.4}, {"acc", 0.8}})));
}

TrialRecord TheTrial(const StateStore& store) {
  auto trials = store.ListTrials("e1");
  REQUIRE(trials.size() == 1);
  return trials[0];
}

std::string Read(const std::string& path) {
  auto r = ReadFile(path);
  REQUIRE(r.ok());
  return *r;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// A result as TrialResults makes them, for the files' tests.
json MakeResult(int it, const json& metrics) {
  json r = metrics;
  r["training_iteration"] = it;
  r["time_total_s"] = 1.5 * it;
  r["timestamp"] = 1700000000 + it;
  r["trial_id"] = "exp_00000";
  r["job_id"] = "j1";
  return r;
}

}  // namespace

TEST_CASE("a trial's results run across its jobs: iterations, running time, ids") {
  StateStore store;
  Fsm fsm(&store);
  FillTrial(fsm);
  const TrialRecord trial = TheTrial(store);
  REQUIRE(json::parse(trial.jobs) == json::array({"j1", "j2"}));

  auto results = TrialResults(store, trial);
  REQUIRE(results.size() == 4);
  const std::vector<double> losses{0.9, 0.7, 0.5, 0.4};
  // j1's reports count from its (first) start; j2's add j1's 5 s of running time.
  const std::vector<double> times{2.0, 4.0, 6.0, 8.5};
  const std::vector<int64_t> stamps{1700000012, 1700000014, 1700000021, 1700000023};
  const std::vector<std::string> jobs{"j1", "j1", "j2", "j2"};
  for (size_t i = 0; i < results.size(); ++i) {
    INFO("result " << i << ": " << results[i].dump());
    CHECK(results[i]["training_iteration"] == static_cast<int64_t>(i) + 1);
    CHECK(results[i]["time_total_s"].get<double>() == Approx(times[i]));
    CHECK(results[i]["timestamp"] == stamps[i]);
    CHECK(results[i]["trial_id"] == "exp_00000");
    CHECK(results[i]["job_id"] == jobs[i]);
    CHECK(results[i]["loss"].get<double>() == losses[i]);
  }
  CHECK_FALSE(results[2].contains("acc"));
  CHECK(results[3]["acc"] == 0.8);
  CHECK(results[3].size() == 7);  // loss, acc and the five bookkeeping fields

  CHECK(CountTrialResults(store, trial) == 4);
  CHECK(store.CountMetrics("j1") == 2);
  CHECK(store.CountMetrics("j2") == 2);
}

TEST_CASE("a trial's results after the first `skip`: the tail of all of them, across jobs") {
  StateStore store;
  Fsm fsm(&store);
  FillTrial(fsm);
  const TrialRecord trial = TheTrial(store);
  const auto all = TrialResults(store, trial);
  REQUIRE(all.size() == 4);
  for (int64_t skip = 0; skip <= 6; ++skip) {
    INFO("skip " << skip);
    const auto tail = TrialResults(store, trial, skip);
    REQUIRE(tail.size() == static_cast<size_t>(std::max<int64_t>(0, 4 - skip)));
    for (size_t i = 0; i < tail.size(); ++i) CHECK(tail[i] == all[skip + i]);
  }
  // The store's own: skip within one job's reports, in (attempt, seq) order.
  auto j1 = store.ListMetrics("j1", 0, 1);
  REQUIRE(j1.size() == 1);
  CHECK(j1[0].attempt == 2);
  CHECK(store.ListMetrics("j1", 0, 2).empty());
}

TEST_CASE("progress.csv has at most kMaxProgressCsvColumns of the user's keys") {
  std::vector<json> results;
  for (int i = 0; i < 3; ++i) {
    json m = json::object();
    for (size_t k = 0; k < kMaxProgressCsvColumns; ++k)
      m["k" + std::to_string(i) + "_" + std::to_string(k)] = k;
    results.push_back(MakeResult(i + 1, m));
  }
  const std::string top = TempDir();
  REQUIRE(WriteTrialFiles(top + "/t", results, json::object()).ok());
  const auto lines = Lines(Read(top + "/t/progress.csv"));
  REQUIRE(lines.size() == 4);
  CHECK(std::count(lines[0].begin(), lines[0].end(), ',') ==
        static_cast<long>(kMaxProgressCsvColumns + 5 - 1));
  // result.json keeps every key.
  CHECK(json::parse(Lines(Read(top + "/t/result.json"))[2]).size() ==
        kMaxProgressCsvColumns + 5 + 1);
  std::filesystem::remove_all(top);
}

TEST_CASE("a trial's results: the current job stands for an empty job list, missing jobs skip") {
  StateStore store;
  Fsm fsm(&store);
  FillTrial(fsm);
  TrialRecord only_current = TheTrial(store);
  only_current.jobs = "[]";  // as a trial whose list is empty
  CHECK(CountTrialResults(store, only_current) == 2);
  auto results = TrialResults(store, only_current);
  REQUIRE(results.size() == 2);
  CHECK(results[0]["job_id"] == "j2");
  CHECK(results[0]["training_iteration"] == 1);
  CHECK(results[0]["time_total_s"].get<double>() == Approx(1.0));  // j1's time not counted

  TrialRecord gone = TheTrial(store);
  gone.jobs = R"(["deleted","j2"])";
  CHECK(CountTrialResults(store, gone) == 2);
  results = TrialResults(store, gone);
  REQUIRE(results.size() == 2);
  CHECK(results[1]["training_iteration"] == 2);

  TrialRecord none;
  CHECK(CountTrialResults(store, none) == 0);
  CHECK(TrialResults(store, none).empty());
}

// A job stopped while PENDING (a trial's job when its experiment stops before the job got
// resources; the resumed experiment continues the trial in a new job) ran for no time: its
// time in the queue must not count in time_total_s of later reports.
TEST_CASE("a trial's job that never ran adds no time to time_total_s") {
  StateStore store;
  Fsm fsm(&store);
  cmd::CreateExperiment c;
  c.experiment_id = "e1";
  c.name = "exp";
  c.spec = json::object();
  MustApply(fsm, At(0, c));
  MustApply(fsm, At(0, Submit("j1", {{"lr", 0.1}})));  // submitted_at = kT0
  MustApply(fsm, At(60000, cmd::StopJob{"j1", "stopped with its experiment"}));
  REQUIRE(store.GetJob("j1")->state == kJobStopped);
  REQUIRE_FALSE(store.GetJob("j1")->started_at);
  MustApply(fsm, At(65000, Submit("j2", {{"lr", 0.1}})));
  MustApply(fsm, At(70000, cmd::StartAttempt{"j2", 1, "", "", "", {}, {}}));
  MustApply(fsm, At(72000, Report("j2", 1, 0, {{"loss", 0.5}})));

  auto results = TrialResults(store, TheTrial(store));
  REQUIRE(results.size() == 1);
  CHECK(results[0]["training_iteration"] == 1);
  CHECK(results[0]["job_id"] == "j2");
  CHECK(results[0]["time_total_s"].get<double>() == Approx(2.0));
}

TEST_CASE("WriteTrialFiles writes progress.csv, result.json and params.json") {
  StateStore store;
  Fsm fsm(&store);
  FillTrial(fsm);
  const TrialRecord trial = TheTrial(store);
  const json config = json::parse(trial.config);
  REQUIRE(config == json{{"lr", 0.2}});
  const auto results = TrialResults(store, trial);

  const std::string top = TempDir();
  const std::string dir = top + "/exp_00000";  // created when missing
  REQUIRE(WriteTrialFiles(dir, results, config).ok());
  CHECK(IsDirectory(dir));

  CHECK(Read(dir + "/progress.csv") ==
        "acc,loss,training_iteration,time_total_s,timestamp,trial_id,job_id\n"
        ",0.9,1,2.0,1700000012,exp_00000,j1\n"
        ",0.7,2,4.0,1700000014,exp_00000,j1\n"
        ",0.5,3,6.0,1700000021,exp_00000,j2\n"
        "0.8,0.4,4,8.5,1700000023,exp_00000,j2\n");

  auto lines = Lines(Read(dir + "/result.json"));
  REQUIRE(lines.size() == 4);
  for (size_t i = 0; i < lines.size(); ++i) {
    INFO(lines[i]);
    json want = results[i];
    want["config"] = config;
    CHECK(json::parse(lines[i]) == want);
  }
  CHECK(json::parse(Read(dir + "/params.json")) == config);

  // Again, with fewer results and another config: every file is replaced.
  const json config2 = {{"lr", 0.05}, {"layers", {{"n", 2}}}};
  REQUIRE(WriteTrialFiles(dir, {MakeResult(1, {{"acc", 0.5}})}, config2).ok());
  CHECK(Read(dir + "/progress.csv") ==
        "acc,training_iteration,time_total_s,timestamp,trial_id,job_id\n"
        "0.5,1,1.5,1700000001,exp_00000,j1\n");
  lines = Lines(Read(dir + "/result.json"));
  REQUIRE(lines.size() == 1);
  CHECK(json::parse(lines[0])["config"] == config2);
  CHECK(json::parse(Read(dir + "/params.json")) == config2);

  // No results yet: the header of the bookkeeping columns only, an empty result.json.
  REQUIRE(WriteTrialFiles(dir, {}, config2).ok());
  CHECK(Read(dir + "/progress.csv") ==
        "training_iteration,time_total_s,timestamp,trial_id,job_id\n");
  CHECK(Read(dir + "/result.json").empty());
  std::filesystem::remove_all(top);
}

TEST_CASE("progress.csv quotes commas, quotes and newlines, leaves nulls and gaps empty") {
  const std::string top = TempDir();
  std::vector<json> results = {
      MakeResult(1, {{"note", "a,b"}, {"say", "say \"hi\""}, {"gone", nullptr}, {"x,y", 1}}),
      MakeResult(2, {{"note", "two\nlines"}, {"say", "plain"}, {"flag", true}, {"v", {1, 2}}}),
  };
  REQUIRE(WriteTrialFiles(top + "/t", results, json::object()).ok());
  CHECK(Read(top + "/t/progress.csv") ==
        "flag,gone,note,say,v,\"x,y\",training_iteration,time_total_s,timestamp,trial_id,job_id\n"
        ",,\"a,b\",\"say \"\"hi\"\"\",,1,1,1.5,1700000001,exp_00000,j1\n"
        "true,,\"two\nlines\",plain,\"[1,2]\",,2,3.0,1700000002,exp_00000,j1\n");
  CHECK(json::parse(Read(top + "/t/params.json")) == json::object());
  auto lines = Lines(Read(top + "/t/result.json"));
  REQUIRE(lines.size() == 2);
  CHECK(json::parse(lines[0])["say"] == "say \"hi\"");
  CHECK(json::parse(lines[0])["gone"].is_null());
  CHECK(json::parse(lines[0])["config"] == json::object());
  std::filesystem::remove_all(top);
}

TEST_CASE("WriteTrialFiles never writes through a symlink") {
  const std::string top = TempDir();
  const std::string elsewhere = top + "/elsewhere";
  REQUIRE(MakeDirs(elsewhere).ok());
  // A symlink planted at the trial dir is refused, and nothing is written behind it.
  REQUIRE(symlink(elsewhere.c_str(), (top + "/exp_00000").c_str()) == 0);
  Status st = WriteTrialFiles(top + "/exp_00000", {MakeResult(1, {{"loss", 1}})}, json::object());
  REQUIRE_FALSE(st.ok());
  CHECK(st.code() == Status::Code::kPermissionDenied);
  CHECK(st.message().find("symlink") != std::string::npos);
  CHECK_FALSE(PathExists(elsewhere + "/progress.csv"));
  CHECK_FALSE(PathExists(elsewhere + "/result.json"));
  CHECK_FALSE(PathExists(elsewhere + "/params.json"));

  // A symlink planted at one of the files is replaced, its target left alone.
  const std::string trial = top + "/exp_00001";
  REQUIRE(MakeDirs(trial).ok());
  REQUIRE(WriteFileAtomic(top + "/victim", "secret").ok());
  REQUIRE(symlink((top + "/victim").c_str(), (trial + "/params.json").c_str()) == 0);
  REQUIRE(WriteTrialFiles(trial, {MakeResult(1, {{"loss", 1}})}, json{{"lr", 1}}).ok());
  CHECK(Read(top + "/victim") == "secret");
  struct stat sb {};
  REQUIRE(lstat((trial + "/params.json").c_str(), &sb) == 0);
  CHECK(S_ISREG(sb.st_mode));
  CHECK(json::parse(Read(trial + "/params.json")) == json{{"lr", 1}});
  std::filesystem::remove_all(top);
}
