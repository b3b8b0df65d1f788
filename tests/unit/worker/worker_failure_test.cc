// How traintl-worker fails: exceptions and crashes of the training code, libraries it cannot
// use (exit code 3), bad invocations and context files (exit code 2), a failing report().
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <string>

#include <nlohmann/json.hpp>

#include "tests/unit/worker/worker_run.h"

using nlohmann::json;
using namespace traintl;
using namespace traintl::worker_test;

TEST_CASE("an exception fails the run with its message") {
  Fixture f;
  WorkerRun& run = f.Start(
      f.Context(TEST_TRAIN_LIB, "",
                {{"epochs", 3}, {"sleep_ms", 0}, {"fail_at_epoch", 1}, {"fail_mode", "throw"}}));
  ExpectHello(run, 0);
  CHECK(ExpectMessage(run, "report")["seq"] == 0);
  run.Ack(0);
  std::string error = ExpectFailedDone(run, /*retryable=*/true);
  CHECK(error.find("injected failure at epoch 1 on rank 0") != std::string::npos);
  CHECK(run.WaitExitCode() == 1);
  CHECK(run.LastLogLine().rfind("traintl-worker: ", 0) == 0);
  CHECK(run.LastLogLine().find("injected failure") != std::string::npos);
}

TEST_CASE("a failure injected for attempt 1 does not happen in attempt 2") {
  Fixture f;
  json ctx =
      f.Context(TEST_TRAIN_LIB, "",
                {{"epochs", 1}, {"sleep_ms", 0}, {"fail_at_epoch", 0}, {"fail_mode", "exit"}});
  ctx["attempt"] = 2;
  WorkerRun& run = f.Start(ctx);
  ExpectHello(run, 0);
  CHECK(ExpectMessage(run, "report")["seq"] == 0);
  run.Ack(0);
  CHECK(ExpectMessage(run, "done")["ok"] == true);
  CHECK(run.WaitExitCode() == 0);
}

TEST_CASE("crashes and exits of the training code") {
  Fixture f;
  json config = {{"epochs", 3}, {"sleep_ms", 0}, {"fail_at_epoch", 0}};
  int signal = 0;     // the signal that ends it, or
  int exit_code = 0;  // its exit code
  SECTION("segfault") {
    config["fail_mode"] = "segfault";
    signal = SIGSEGV;
  }
  SECTION("abort") {
    config["fail_mode"] = "abort";
    signal = SIGABRT;
  }
  SECTION("exit") {
    config["fail_mode"] = "exit";
    exit_code = 7;
  }
  WorkerRun& run = f.Start(f.Context(TEST_TRAIN_LIB, "", config));
  ExpectHello(run, 0);
  CHECK_FALSE(run.Next().has_value());  // no done: the process is gone
  if (signal != 0) {
    int status = run.Wait();
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == signal);
  } else {
    CHECK(run.WaitExitCode() == exit_code);
  }
}

TEST_CASE("an unusable library ends the worker with exit code 3 and the reason") {
  Fixture f;
  std::string library;
  std::string expected;
  SECTION("missing file") {
    library = f.dir() + "/missing/libnothing.so";
    expected = "library not found: " + library;
  }
  SECTION("not a shared object") {
    library = TEST_NOT_A_LIBRARY;
    expected = "cannot load the library " + library + ": ";
  }
  SECTION("no traintl symbols") {
    library = TEST_NOENTRY_LIB;
    expected = "not a traintl training library";
  }
  SECTION("another ABI version") {
    library = TEST_BADABI_LIB;
    expected = "library was built for traintl ABI version 999, this worker supports 1";
  }
  SECTION("a FIFO (dlopen would block on it forever)") {
    library = f.dir() + "/lib.fifo";
    REQUIRE(::mkfifo(library.c_str(), 0644) == 0);
    expected = "library is not a regular file: " + library;
  }
  WorkerRun& run = f.Start(f.Context(library, ""));
  std::string error = ExpectFailedDone(run, /*retryable=*/false);  // no hello before it
  CHECK(error.find(expected) != std::string::npos);
  CHECK(error.find('\n') == std::string::npos);
  CHECK(run.WaitExitCode() == 3);
  CHECK(run.LastLogLine() == "traintl-worker: " + error);
}

TEST_CASE("load errors name the library as the user submitted it, not the daemon's copy") {
  Fixture f;
  json context = f.Context(TEST_NOT_A_LIBRARY, "");
  context["library_name"] = "build/libmine.so";
  WorkerRun& run = f.Start(context);
  std::string error = ExpectFailedDone(run, /*retryable=*/false);
  CHECK(error.find("cannot load the library build/libmine.so: ") != std::string::npos);
  CHECK(error.find(TEST_NOT_A_LIBRARY) == std::string::npos);
  CHECK(run.WaitExitCode() == 3);
}

TEST_CASE("a library that never finishes loading fails the attempt at the load deadline") {
  Fixture f;
  json ctx = f.Context(TEST_SLOWLOAD_LIB, "");
  ctx["library_load_timeout_s"] = 1;
  WorkerRun& run = f.Start(ctx);
  std::string error = ExpectFailedDone(run, /*retryable=*/false);
  CHECK(error == "loading the library took longer than 1 s");
  CHECK(run.WaitExitCode() == 3);
}

TEST_CASE("a bad invocation or context file exits with code 2") {
  Fixture f;
  SECTION("no arguments") {
    WorkerRun& run = f.StartWithArgs({});
    CHECK(run.WaitExitCode() == 2);
    CHECK(run.LastLogLine() == "traintl-worker: missing --context FILE");
  }
  SECTION("missing context file") {
    WorkerRun& run = f.StartWithArgs({"--context", f.dir() + "/nope.json"});
    CHECK(ExpectFailedDone(run, false).find("cannot read the context file") != std::string::npos);
    CHECK(run.WaitExitCode() == 2);
  }
  SECTION("context without a library") {
    json ctx = f.Context(TEST_TRAIN_LIB, "");
    ctx.erase("library");
    WorkerRun& run = f.Start(ctx);
    CHECK(ExpectFailedDone(run, false).find("missing \"library\"") != std::string::npos);
    CHECK(run.WaitExitCode() == 2);
  }
}

TEST_CASE("report() with a missing checkpoint directory throws into the training code") {
  Fixture f;
  WorkerRun& run =
      f.Start(f.Context(TEST_TRAIN_LIB, "", {{"sleep_ms", 0}, {"bad_checkpoint", true}}));
  ExpectHello(run, 0);
  std::string error = ExpectFailedDone(run, /*retryable=*/true);
  CHECK(error.find("traintl::report failed") != std::string::npos);
  CHECK(error.find("/nonexistent/traintl-ckpt") != std::string::npos);
  CHECK(run.WaitExitCode() == 1);
}
