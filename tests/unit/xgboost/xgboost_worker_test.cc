// traintl::xgboost through the real traintl-worker (this test plays the agent): how its
// errors end an attempt, checkpoints staged by the worker and a restarted attempt, and two
// ranks training one model. traintld's rabit tracker is another component; here XGBoost's
// own Python tracker (python3-xgboost's xgboost.tracker.RabitTracker) joins the ranks, and
// the DMLC_* environment is set as the daemon sets it. This tests the SDK, not a tracker.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "tests/unit/worker/worker_run.h"
#include "tests/unit/xgboost/test_data.h"

namespace {

using nlohmann::json;
using traintl::worker_test::WorkerRun;
using traintl::xgboost_test::MakeTempDir;
using traintl::xgboost_test::WriteClassificationCsv;

// What one rank did: its reports (the worker's messages), its `done`, its log.
struct RankResult {
  std::vector<json> reports;
  json done;
  int exit_code = -1;
  std::string log;
};

using Env = std::map<std::string, std::string>;

json RankContext(const std::string& dir, const std::string& library, const std::string& function,
                 const json& config, const json& datasets, int rank, int world, int attempt = 1,
                 const std::string& checkpoint = "") {
  return {{"job_id", "xgbworker"},
          {"job_name", "xgb"},
          {"attempt", attempt},
          {"world_rank", rank},
          {"world_size", world},
          {"local_rank", rank},
          {"local_world_size", world},
          {"node_rank", 0},
          {"library", library},
          {"function", function},
          {"config", config},
          {"checkpoint_dir", checkpoint.empty() ? json() : json(checkpoint)},
          {"trial_dir", dir + "/trial"},
          {"staging_dir", dir + "/trial/.staging/attempt_" + std::to_string(attempt)},
          {"master_addr", "127.0.0.1"},
          {"master_port", 29517},
          {"collective_timeout_s", 60},
          {"use_gpu", false},
          {"datasets", datasets}};
}

// Runs one traintl-worker per context (rank r with the environment envs[r] added) and
// acknowledges every report until each has sent `done` or exited.
std::vector<RankResult> RunRanks(const std::string& dir, const std::vector<json>& contexts,
                                 const std::vector<Env>& envs = {}) {
  std::vector<std::unique_ptr<WorkerRun>> runs;
  for (size_t r = 0; r < contexts.size(); ++r) {
    const std::string tag =
        "a" + std::to_string(contexts[r]["attempt"].get<int>()) + "_rank" + std::to_string(r);
    const std::string path = dir + "/" + tag + ".context.json";
    REQUIRE(traintl::WriteFileAtomic(path, contexts[r].dump(), 0600).ok());
    const Env env = r < envs.size() ? envs[r] : Env();
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);  // inherited by fork
    runs.push_back(std::make_unique<WorkerRun>(std::vector<std::string>{"--context", path},
                                               dir + "/" + tag + ".log"));
    for (const auto& [k, v] : env) ::unsetenv(k.c_str());
  }
  std::vector<RankResult> results(contexts.size());
  std::vector<bool> finished(contexts.size(), false);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (size_t left = contexts.size(); left > 0;) {
    if (std::chrono::steady_clock::now() > deadline) {
      for (size_t r = 0; r < runs.size(); ++r) {
        UNSCOPED_INFO("rank " << r << " log:\n" << runs[r]->Log());
      }
      FAIL("the ranks did not finish");
    }
    for (size_t r = 0; r < runs.size(); ++r) {
      if (finished[r]) continue;
      auto m = runs[r]->Next(20);
      if (!m) {
        // Gone without `done` (a crash): look without reaping, WaitExitCode() does that.
        siginfo_t info{};
        if (::waitid(P_PID, static_cast<id_t>(runs[r]->pid()), &info,
                     WEXITED | WNOHANG | WNOWAIT) == 0 &&
            info.si_pid != 0) {
          finished[r] = true;
          --left;
        }
        continue;
      }
      const std::string type = m->value("type", "");
      if (type == "report") {
        results[r].reports.push_back(*m);
        runs[r]->Ack((*m)["seq"].get<int64_t>());
      } else if (type == "done") {
        results[r].done = *m;
        finished[r] = true;
        --left;
      }
    }
  }
  for (size_t r = 0; r < runs.size(); ++r) {
    results[r].exit_code = runs[r]->WaitExitCode();
    results[r].log = runs[r]->Log();
  }
  return results;
}

// XGBoost's Python RabitTracker for `workers` ranks on 127.0.0.1, ranks ordered by
// DMLC_TASK_ID as the daemon's tracker orders them. port() is 0 when it could not start
// (no /usr/bin/python3 with python3-xgboost): the test is then skipped.
class PythonTracker {
 public:
  explicit PythonTracker(int workers, const std::string& log_path) {
    if (::access("/usr/bin/python3", X_OK) != 0) return;
    int out[2];
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
    const std::string script =
        "from xgboost.tracker import RabitTracker\n"
        "t = RabitTracker(host_ip='127.0.0.1', n_workers=" +
        std::to_string(workers) +
        ", port=0, sortby='task')\n"
        "print(t.port, flush=True)\n"
        "t.start(" +
        std::to_string(workers) + ")\nt.join()\n";
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      ::dup2(log, 2);
      ::execl("/usr/bin/python3", "python3", "-c", script.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(out[1]);
    std::string line;
    struct pollfd p = {out[0], POLLIN, 0};
    while (line.find('\n') == std::string::npos && ::poll(&p, 1, 30000) > 0) {
      char buf[64];
      const ssize_t n = ::read(out[0], buf, sizeof buf);
      if (n <= 0) break;
      line.append(buf, static_cast<size_t>(n));
    }
    ::close(out[0]);
    port_ = std::atoi(line.c_str());
  }
  ~PythonTracker() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  PythonTracker(const PythonTracker&) = delete;
  PythonTracker& operator=(const PythonTracker&) = delete;

  int port() const { return port_; }
  // The environment traintld gives rank `rank` of a job with "framework": "xgboost".
  Env RankEnv(int rank, int workers) const {
    return {{"DMLC_TRACKER_URI", "127.0.0.1"},
            {"DMLC_TRACKER_PORT", std::to_string(port_)},
            {"DMLC_NUM_WORKER", std::to_string(workers)},
            {"DMLC_TASK_ID", std::to_string(rank)}};
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

json Csv(const std::string& path, bool split) {
  return {{"uri", "file://" + path}, {"format", "csv"}, {"split", split}};
}

bool HasCheckpoint(const json& report) {
  return report.contains("checkpoint") && report["checkpoint"].is_string();
}

}  // namespace

TEST_CASE("worker: a label column of text fails the attempt as not retryable") {
  const std::string dir = MakeTempDir();
  traintl::xgboost_test::WriteText(dir + "/train.csv", "f0,label\n1.5,M\n2.5,B\n");
  const auto ranks = RunRanks(dir, {RankContext(dir, TEST_XGBOOST_LIB, "train", json::object(),
                                                {{"train", Csv(dir + "/train.csv", true)}}, 0, 1)});
  INFO(ranks[0].log);
  CHECK(ranks[0].exit_code == 1);
  CHECK(ranks[0].done["ok"] == false);
  CHECK(ranks[0].done["retryable"] == false);
  CHECK(ranks[0].done["error"].get<std::string>().find(
            "train failed: traintl::xgboost::FromShard(dataset 'train'): the label column "
            "'label' holds text, not numbers") != std::string::npos);
  (void)traintl::RemoveAll(dir);
}

TEST_CASE("worker: an XGBoost error fails the attempt (retryable) with the call and the round") {
  const std::string dir = MakeTempDir();
  WriteClassificationCsv(dir + "/train.csv", 40, 1);
  const auto ranks = RunRanks(
      dir, {RankContext(dir, TEST_XGBOOST_LIB, "train", {{"params", {{"objective", "nope"}}}},
                        {{"train", Csv(dir + "/train.csv", true)}}, 0, 1)});
  INFO(ranks[0].log);
  CHECK(ranks[0].done["ok"] == false);
  CHECK(ranks[0].done["retryable"] == true);
  const std::string error = ranks[0].done["error"];
  CHECK(error.rfind("train failed: XGBoosterUpdateOneIter (round 0): Unknown objective "
                    "function: `nope`",
                    0) == 0);
  CHECK(error.find("Stack trace") == std::string::npos);
  CHECK(ranks[0].reports.empty());
  (void)traintl::RemoveAll(dir);
}

TEST_CASE("worker: checkpoints staged by the worker and a restarted attempt that resumes") {
  const std::string dir = MakeTempDir();
  WriteClassificationCsv(dir + "/train.csv", 200, 1);
  WriteClassificationCsv(dir + "/valid.csv", 80, 2);
  const json datasets = {{"train", Csv(dir + "/train.csv", true)},
                         {"valid", Csv(dir + "/valid.csv", false)}};
  const json config = {{"rounds", 5}, {"checkpoint_every", 2}};
  const auto first =
      RunRanks(dir, {RankContext(dir, TEST_XGBOOST_LIB, "train", config, datasets, 0, 1)});
  INFO(first[0].log);
  REQUIRE(first[0].done["ok"] == true);
  const auto& reports = first[0].reports;
  REQUIRE(reports.size() == 5);
  for (size_t k = 0; k < reports.size(); ++k) {
    CHECK(reports[k]["metrics"]["training_iteration"] == k + 1);
    CHECK(reports[k]["metrics"].contains("validation-error"));
    CHECK(HasCheckpoint(reports[k]) == (k == 1 || k == 3 || k == 4));
  }
  const std::string staged = reports[1]["checkpoint"];
  CHECK(traintl::PathExists(staged + "/model.ubj"));
  CHECK(traintl::PathExists(staged + "/meta.json"));
  CHECK(traintl::PathExists(dir + "/trial/model.ubj"));

  // Attempt 2, restored from round 2: rounds 3..5, ending where attempt 1 ended.
  const auto second = RunRanks(
      dir, {RankContext(dir, TEST_XGBOOST_LIB, "train", config, datasets, 0, 1, 2, staged)});
  INFO(second[0].log);
  REQUIRE(second[0].done["ok"] == true);
  REQUIRE(second[0].reports.size() == 3);
  CHECK(second[0].reports[0]["metrics"]["training_iteration"] == 3);
  CHECK(second[0].reports.back()["metrics"] == reports.back()["metrics"]);
  CHECK(second[0].log.find("resuming after round 2") != std::string::npos);
  (void)traintl::RemoveAll(dir);
}

TEST_CASE("worker: two ranks without the tracker's environment fail clearly") {
  const std::string dir = MakeTempDir();
  WriteClassificationCsv(dir + "/train.csv", 40, 1);
  for (const char* name : {"DMLC_TRACKER_URI", "DMLC_TRACKER_PORT", "DMLC_NUM_WORKER"}) {
    ::unsetenv(name);
  }
  const json datasets = {{"train", Csv(dir + "/train.csv", true)}};
  const auto ranks =
      RunRanks(dir, {RankContext(dir, TEST_XGBOOST_LIB, "train", json::object(), datasets, 0, 2),
                     RankContext(dir, TEST_XGBOOST_LIB, "train", json::object(), datasets, 1, 2)});
  for (const auto& r : ranks) {
    INFO(r.log);
    CHECK(r.done["ok"] == false);
    CHECK(r.done["error"].get<std::string>().find(
              "the job has 2 ranks but DMLC_TRACKER_URI is not set") != std::string::npos);
  }
  (void)traintl::RemoveAll(dir);
}

TEST_CASE("worker: two ranks joined by XGBoost's tracker train one model") {
  const std::string dir = MakeTempDir();
  // 301 rows split over 2 ranks: 151 each, rank 1's last one wrapped around from the start.
  const auto rows = WriteClassificationCsv(dir + "/train.csv", 301, 1);
  WriteClassificationCsv(dir + "/valid.csv", 100, 2);
  const json datasets = {{"train", Csv(dir + "/train.csv", true)},
                         {"valid", Csv(dir + "/valid.csv", false)}};
  auto run = [&](const std::string& function, const json& config) {
    PythonTracker tracker(2, dir + "/tracker_" + function + ".log");
    if (tracker.port() == 0) return std::vector<RankResult>();
    return RunRanks(dir,
                    {RankContext(dir, TEST_XGBOOST_LIB, function, config, datasets, 0, 2),
                     RankContext(dir, TEST_XGBOOST_LIB, function, config, datasets, 1, 2)},
                    {tracker.RankEnv(0, 2), tracker.RankEnv(1, 2)});
  };

  const auto shards = run("from_shard", json::object());
  if (shards.empty()) {
    WARN("skipped: XGBoost's Python tracker did not start (/usr/bin/python3 with python3-xgboost)");
    return;
  }
  double label_sum = 0;
  for (const auto& r : rows) label_sum += r.label;
  for (const auto& r : shards) {
    INFO(r.log);
    REQUIRE(r.done["ok"] == true);
    REQUIRE(r.reports.size() == 1);
    CHECK(r.reports[0]["metrics"]["cols"] == 4);
    CHECK(r.reports[0]["metrics"]["replicated"] == false);
  }
  // Every row once: the padding row is dropped.
  CHECK(shards[0].reports[0]["metrics"]["rows"] == 151);
  CHECK(shards[1].reports[0]["metrics"]["rows"] == 150);
  CHECK(shards[0].reports[0]["metrics"]["label_sum"].get<double>() +
            shards[1].reports[0]["metrics"]["label_sum"].get<double>() ==
        label_sum);

  const auto ranks = run("train", {{"rounds", 6}, {"checkpoint_every", 3}});
  REQUIRE(ranks.size() == 2);
  for (const auto& r : ranks) {
    INFO(r.log);
    REQUIRE(r.done["ok"] == true);
    REQUIRE(r.reports.size() == 6);
  }
  CHECK(ranks[0].log.find("XGBoost rank 0 of 2") != std::string::npos);
  CHECK(ranks[1].log.find("XGBoost rank 1 of 2") != std::string::npos);
  for (size_t k = 0; k < 6; ++k) {
    // XGBoost combines the ranks' metrics: both see the same.
    CHECK(ranks[0].reports[k]["metrics"] == ranks[1].reports[k]["metrics"]);
    CHECK(HasCheckpoint(ranks[0].reports[k]) == (k == 2 || k == 5));
    CHECK_FALSE(HasCheckpoint(ranks[1].reports[k]));
  }
  CHECK(ranks[0].reports[5]["metrics"]["train-logloss"] <
        ranks[0].reports[0]["metrics"]["train-logloss"]);
  CHECK(traintl::PathExists(dir + "/trial/model.ubj"));
  (void)traintl::RemoveAll(dir);
}

TEST_CASE("worker: when one of two ranks dies the other fails instead of hanging") {
  const std::string dir = MakeTempDir();
  WriteClassificationCsv(dir + "/train.csv", 200, 1);
  const json datasets = {{"train", Csv(dir + "/train.csv", true)}};
  const std::string mode = GENERATE(std::string("throw"), std::string("exit"));
  PythonTracker tracker(2, dir + "/tracker.log");
  if (tracker.port() == 0) {
    WARN("skipped: XGBoost's Python tracker did not start (/usr/bin/python3 with python3-xgboost)");
    return;
  }
  const json config = {{"rounds", 50}, {"fail_rank", 1}, {"fail_at_round", 3}, {"fail_mode", mode}};
  const auto ranks = RunRanks(dir,
                              {RankContext(dir, TEST_XGBOOST_LIB, "train", config, datasets, 0, 2),
                               RankContext(dir, TEST_XGBOOST_LIB, "train", config, datasets, 1, 2)},
                              {tracker.RankEnv(0, 2), tracker.RankEnv(1, 2)});
  INFO("rank 0:\n" << ranks[0].log << "\nrank 1:\n" << ranks[1].log);
  CHECK(ranks[0].done["ok"] == false);
  CHECK(ranks[0].done["retryable"] == true);
  // Rank 0 had trained rounds 1..3 with rank 1; round 4 needs it.
  CHECK(ranks[0].reports.size() == 3);
  CHECK(ranks[0].done["error"].get<std::string>().find("XGBoosterUpdateOneIter (round 3)") !=
        std::string::npos);
  if (mode == "throw") {
    CHECK(ranks[1].done["error"].get<std::string>().find("injected failure after round 3") !=
          std::string::npos);
  } else {
    CHECK(ranks[1].exit_code == 3);
  }
  (void)traintl::RemoveAll(dir);
}

TEST_CASE("worker: the breast cancer example on two ranks and a restarted attempt") {
  const std::string library = TRAINTL_XGBOOST_EXAMPLE;
  const char* installed = "/usr/lib/python3/dist-packages/sklearn/datasets/data/breast_cancer.csv";
  if (library.empty() || ::access(installed, R_OK) != 0) {
    WARN("skipped: no example library, or python3-sklearn is not installed");
    return;
  }
  const std::string dir = MakeTempDir();
  const std::string fetch = std::string(TRAINTL_SOURCE_DIR) + "/examples/xgboost/fetch_data.sh " +
                            dir + "/data > " + dir + "/fetch.log 2>&1";
  REQUIRE(std::system(fetch.c_str()) == 0);
  // As examples/xgboost/job.json has it.
  const json datasets = {{"train", Csv(dir + "/data/train.csv", true)},
                         {"valid", Csv(dir + "/data/valid.csv", false)}};
  const json config = {
      {"num_boost_round", 30}, {"max_depth", 3}, {"eta", 0.1}, {"checkpoint_every", 10}};
  auto run = [&](int attempt, const std::string& checkpoint) {
    PythonTracker tracker(2, dir + "/tracker_" + std::to_string(attempt) + ".log");
    if (tracker.port() == 0) return std::vector<RankResult>();
    std::vector<json> contexts;
    for (int r = 0; r < 2; ++r) {
      contexts.push_back(
          RankContext(dir, library, "train_loop", config, datasets, r, 2, attempt, checkpoint));
    }
    return RunRanks(dir, contexts, {tracker.RankEnv(0, 2), tracker.RankEnv(1, 2)});
  };
  const auto first = run(1, "");
  if (first.empty()) {
    WARN("skipped: XGBoost's Python tracker did not start (/usr/bin/python3 with python3-xgboost)");
    return;
  }
  for (const auto& r : first) {
    INFO(r.log);
    REQUIRE(r.done["ok"] == true);
    REQUIRE(r.reports.size() == 30);
  }
  const json last = first[0].reports.back()["metrics"];
  INFO("final metrics " << last.dump());
  CHECK(last["training_iteration"] == 30);
  CHECK(last["validation-error"].get<double>() < 0.1);
  CHECK(last["validation-logloss"].get<double>() <
        first[0].reports[0]["metrics"]["validation-logloss"].get<double>());
  CHECK(first[0].log.find("validation accuracy") != std::string::npos);

  // The head would restore the checkpoint of round 10 (rank 0's files; rank 1 sent none).
  REQUIRE(HasCheckpoint(first[0].reports[9]));
  const auto second = run(2, first[0].reports[9]["checkpoint"]);
  for (const auto& r : second) {
    INFO(r.log);
    REQUIRE(r.done["ok"] == true);
    REQUIRE(r.reports.size() == 20);
    CHECK(r.reports[0]["metrics"]["training_iteration"] == 11);
  }
  // Two ranks' hist is deterministic too: the restarted job ends where the first ended.
  CHECK(second[0].reports.back()["metrics"] == last);
  (void)traintl::RemoveAll(dir);
}
