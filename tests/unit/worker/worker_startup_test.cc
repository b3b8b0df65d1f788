// What traintl-worker sets up before and around the entry point: choosing the entry point,
// the TRAINTL_ environment, reading the context (ParseRankContext), listing a library's
// exports, and staging checkpoint files.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "proto/rank_context.h"
#include "worker/library_loader.h"
#include "worker/worker_host.h"

#include "tests/unit/worker/worker_run.h"

using nlohmann::json;
using namespace traintl;
using namespace traintl::worker_test;

TEST_CASE("the entry point is chosen by name") {
  Fixture f;
  SECTION("train_b") {
    WorkerRun& run = f.Start(f.Context(TEST_MULTI_LIB, "train_b", {{"x", 1}}));
    ExpectHello(run, 0);
    json report = ExpectMessage(run, "report");
    CHECK(report["metrics"]["fn"] == "train_b");
    CHECK(report["metrics"]["config"] == json{{"x", 1}});
    run.Ack(0);
    CHECK(ExpectMessage(run, "done")["ok"] == true);
    CHECK(run.WaitExitCode() == 0);
    CHECK(run.Log().find("train_b running") != std::string::npos);  // the log callback
  }
  SECTION("train_a") {
    WorkerRun& run = f.Start(f.Context(TEST_MULTI_LIB, "train_a"));
    ExpectHello(run, 0);
    CHECK(ExpectMessage(run, "report")["metrics"]["fn"] == "train_a");
    run.Ack(0);
    CHECK(ExpectMessage(run, "done")["ok"] == true);
    CHECK(run.WaitExitCode() == 0);
  }
  SECTION("none named in a library with several") {
    WorkerRun& run = f.Start(f.Context(TEST_MULTI_LIB, ""));
    std::string error = ExpectFailedDone(run, /*retryable=*/false);
    CHECK(error.find("several entry points (train_a, train_b)") != std::string::npos);
    CHECK(run.WaitExitCode() == 3);
    CHECK(run.LastLogLine() == "traintl-worker: " + error);
  }
  SECTION("a name the library does not export") {
    WorkerRun& run = f.Start(f.Context(TEST_MULTI_LIB, "train_c"));
    std::string error = ExpectFailedDone(run, /*retryable=*/false);
    CHECK(error.find("entry point \"train_c\" not found") != std::string::npos);
    CHECK(error.find("it exports: train_a, train_b") != std::string::npos);
    CHECK(run.WaitExitCode() == 3);
  }
  SECTION("the function field may be absent") {
    json ctx = f.Context(TEST_TRAIN_LIB, "", {{"epochs", 1}, {"sleep_ms", 0}});
    ctx.erase("function");
    WorkerRun& run = f.Start(ctx);
    ExpectHello(run, 0);
    ExpectMessage(run, "report");
    run.Ack(0);
    CHECK(ExpectMessage(run, "done")["ok"] == true);
    CHECK(run.WaitExitCode() == 0);
  }
}

TEST_CASE("the worker sets the TRAINTL_ environment") {
  Fixture f;
  json ctx = f.Context(TEST_TRAIN_LIB, "",
                       {{"epochs", 1},
                        {"sleep_ms", 0},
                        {"echo_env",
                         {"TRAINTL_WORLD_RANK", "TRAINTL_WORLD_SIZE", "TRAINTL_JOB_ID",
                          "TRAINTL_MASTER_ADDR", "TRAINTL_MASTER_PORT", "TRAINTL_ATTEMPT"}}});
  ctx["world_rank"] = 2;
  ctx["world_size"] = 3;
  WorkerRun& run = f.Start(ctx);
  ExpectHello(run, 2);
  json env = ExpectMessage(run, "report")["metrics"]["env"];
  CHECK(env == json{{"TRAINTL_WORLD_RANK", "2"},
                    {"TRAINTL_WORLD_SIZE", "3"},
                    {"TRAINTL_JOB_ID", "3f9c2a1b7d4e"},
                    {"TRAINTL_MASTER_ADDR", "127.0.0.1"},
                    {"TRAINTL_MASTER_PORT", "29517"},
                    {"TRAINTL_ATTEMPT", "1"}});
  run.Ack(0);
  CHECK(ExpectMessage(run, "done")["ok"] == true);
  CHECK(run.WaitExitCode() == 0);
}

TEST_CASE("the worker ignores SIGPIPE: a write to a closed socket or pipe is an error") {
  // Gloo writes to its peers with writev(2): without this a survivor whose peer died was
  // killed by SIGPIPE instead of seeing the error, and peer recovery turned into a restart.
  Fixture f;
  WorkerRun& run = f.Start(
      f.Context(TEST_TRAIN_LIB, "", {{"epochs", 1}, {"sleep_ms", 0}, {"write_closed_pipe", true}}));
  ExpectHello(run, 0);
  CHECK(ExpectMessage(run, "report")["metrics"]["closed_pipe_errno"] == EPIPE);
  run.Ack(0);
  CHECK(ExpectMessage(run, "done")["ok"] == true);
  CHECK(run.WaitExitCode() == 0);
}

TEST_CASE("ListExportedFunctions reads the dynamic symbol table") {
  auto multi = worker::ListExportedFunctions(TEST_MULTI_LIB, "traintl_entry_");
  REQUIRE(multi.ok());
  CHECK(*multi == std::vector<std::string>{"traintl_entry_train_a", "traintl_entry_train_b"});
  auto train = worker::ListExportedFunctions(TEST_TRAIN_LIB, "traintl_");
  REQUIRE(train.ok());
  CHECK(*train == std::vector<std::string>{"traintl_abi_version", "traintl_entry_train_loop"});
  auto none = worker::ListExportedFunctions(TEST_NOENTRY_LIB, "traintl_entry_");
  REQUIRE(none.ok());
  CHECK(none->empty());
  CHECK_FALSE(worker::ListExportedFunctions(TEST_NOT_A_LIBRARY, "traintl_entry_").ok());
  CHECK_FALSE(worker::ListExportedFunctions("/nonexistent.so", "traintl_entry_").ok());
}

TEST_CASE("ParseRankContext checks the fields") {
  json base = {{"world_rank", 0},
               {"world_size", 1},
               {"library", "/x.so"},
               {"staging_dir", "/s"},
               {"checkpoint_dir", nullptr}};
  auto ok = ParseRankContext(base.dump());
  REQUIRE(ok.ok());
  CHECK(ok->attempt == 1);
  CHECK_FALSE(ok->checkpoint_dir.has_value());
  CHECK(ok->function.empty());

  json bad = base;
  bad["world_rank"] = 1;
  CHECK(ParseRankContext(bad.dump()).status().message().find("world_rank 1") != std::string::npos);
  bad = base;
  bad["use_gpu"] = "yes";
  CHECK_FALSE(ParseRankContext(bad.dump()).ok());
  bad = base;
  bad["config"] = json::array();
  CHECK_FALSE(ParseRankContext(bad.dump()).ok());
  CHECK_FALSE(ParseRankContext("{not json").ok());
  CHECK_FALSE(ParseRankContext("[]").ok());
}

TEST_CASE("StageCheckpoint copies a nested tree into seq_K/rank_R") {
  const std::string dir = TempDir();
  REQUIRE(MakeDirs(dir + "/src/a/b").ok());
  REQUIRE(WriteFileAtomic(dir + "/src/a/b/w.bin", "weights").ok());
  REQUIRE(WriteFileAtomic(dir + "/src/top.json", "{}").ok());
  auto staged = worker::WorkerHost::StageCheckpoint(dir + "/src", dir + "/staging", 4, 3);
  REQUIRE(staged.ok());
  CHECK(*staged == dir + "/staging/seq_4/rank_3");
  auto files = ListFilesRecursive(*staged);
  REQUIRE(files.ok());
  CHECK(*files == std::vector<std::string>{"a/b/w.bin", "top.json"});
  CHECK(*ReadFile(*staged + "/a/b/w.bin") == "weights");
  CHECK_FALSE(worker::WorkerHost::StageCheckpoint(dir + "/none", dir + "/staging", 5, 0).ok());
  REQUIRE(RemoveAll(dir).ok());
}
