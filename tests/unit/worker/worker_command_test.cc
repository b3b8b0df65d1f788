// traintl-worker running a command entry point (worker/command_runner.h): the program runs
// as the worker's child with torchrun's environment and the channel; the worker says hello
// and done; exits, signals and a missing program are reported as the protocol says.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <string>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "tests/unit/worker/worker_run.h"
#include "worker/command_runner.h"

using nlohmann::json;
using namespace traintl;
using namespace traintl::worker_test;

namespace {

json CommandContext(const Fixture& f, std::vector<std::string> command,
                    const std::string& working_dir = "") {
  json c = f.Context("", "");
  c.erase("library");
  c["entry_kind"] = "command";
  c["command"] = std::move(command);
  c["working_dir"] = working_dir;
  return c;
}

}  // namespace

TEST_CASE("a command that exits 0 succeeds, the worker says hello and done") {
  Fixture f;
  WorkerRun& run = f.Start(CommandContext(f, {"sh", "-c", "echo from the command"}));
  ExpectHello(run, 0);
  CHECK(ExpectMessage(run, "done")["ok"] == true);
  CHECK(run.WaitExitCode() == 0);
  CHECK(run.Log().find("from the command") != std::string::npos);
}

TEST_CASE("the command gets torchrun's environment and the channel") {
  Fixture f;
  const std::string check =
      "test \"$RANK\" = 0 && test \"$WORLD_SIZE\" = 1 && test \"$LOCAL_RANK\" = 0 && "
      "test \"$LOCAL_WORLD_SIZE\" = 1 && test \"$GROUP_RANK\" = 0 && "
      "test \"$MASTER_ADDR\" = 127.0.0.1 && test \"$MASTER_PORT\" = 29517 && "
      "test \"$TORCHELASTIC_RESTART_COUNT\" = 0 && test \"$TRAINTL_CHANNEL_FD\" = 3 && "
      "test -r \"$TRAINTL_CONTEXT_FILE\" && "
      "case \"$PYTHONPATH\" in */lib/traintl/python*) ;; *) exit 9;; esac && "
      // The child owns the channel: a report it writes reaches the agent.
      "printf '{\"type\":\"report\",\"seq\":0,\"metrics\":{\"x\":1},\"checkpoint\":null}\\n' >&3";
  WorkerRun& run = f.Start(CommandContext(f, {"/bin/sh", "-c", check}));
  ExpectHello(run, 0);
  json report = ExpectMessage(run, "report");
  CHECK(report["metrics"]["x"] == 1);
  CHECK(ExpectMessage(run, "done")["ok"] == true);
  CHECK(run.WaitExitCode() == 0);
}

TEST_CASE("a failing command fails the attempt as retryable, saying how it ended") {
  Fixture f;
  SECTION("exit code") {
    WorkerRun& run = f.Start(CommandContext(f, {"sh", "-c", "exit 7"}));
    ExpectHello(run, 0);
    json done = ExpectMessage(run, "done");
    CHECK(done["ok"] == false);
    CHECK(done["retryable"] == true);
    CHECK(done["error"] == "the command exited with code 7");
    CHECK(done["command_exit_code"] == 7);  // what the attempt records
    CHECK_FALSE(done.contains("command_signal"));
    CHECK(run.WaitExitCode() == 1);
  }
  SECTION("killed by a signal, in the middle of a line") {
    WorkerRun& run =
        f.Start(CommandContext(f, {"sh", "-c", "printf '{\"type\":\"rep' >&3; kill -9 $$"}));
    ExpectHello(run, 0);
    // The half line is ended (the agent drops it as malformed), so that "done" arrives
    // whole after it.
    CHECK_THROWS(run.Next());
    json done = ExpectMessage(run, "done");
    CHECK(done["retryable"] == true);
    CHECK_THAT(done["error"].get<std::string>(), Catch::Contains("killed by signal 9"));
    CHECK(done["command_signal"] == 9);
    CHECK_FALSE(done.contains("command_exit_code"));
    CHECK(run.WaitExitCode() == 1);
  }
}

TEST_CASE("a command that cannot start is not retryable (exit code 4)") {
  Fixture f;
  WorkerRun& run = f.Start(CommandContext(f, {"no-such-program-xyz", "--flag"}));
  std::string error = ExpectFailedDone(run, false);
  CHECK(error.find("command not found: no-such-program-xyz") != std::string::npos);
  CHECK(run.WaitExitCode() == 4);
}

TEST_CASE("the command runs in the working_dir, where a relative program is found") {
  Fixture f;
  const std::string wd = f.dir() + "/wd";
  REQUIRE(MakeDirs(wd, 0755).ok());
  REQUIRE(WriteFileAtomic(wd + "/run.sh", "#!/bin/sh\npwd > " + f.dir() + "/cwd\n", 0755).ok());
  WorkerRun& run = f.Start(CommandContext(f, {"./run.sh"}, wd));
  ExpectHello(run, 0);
  CHECK(ExpectMessage(run, "done")["ok"] == true);
  CHECK(run.WaitExitCode() == 0);
  auto cwd = ReadFile(f.dir() + "/cwd");
  REQUIRE(cwd.ok());
  CHECK(*cwd == wd + "\n");
}

TEST_CASE("ResolveProgram: PATH, then the working_dir, errors name the program") {
  const std::string dir = TempDir();
  REQUIRE(WriteFileAtomic(dir + "/tool", "#!/bin/sh\n", 0755).ok());
  REQUIRE(WriteFileAtomic(dir + "/data.txt", "x", 0644).ok());
  CHECK(*worker::ResolveProgram("sh", "/nonexistent:/bin", dir) == "/bin/sh");
  CHECK(*worker::ResolveProgram("tool", "/nonexistent", dir) == dir + "/tool");
  CHECK(*worker::ResolveProgram("./tool", "", dir) == dir + "/./tool");
  auto missing = worker::ResolveProgram("nope", "/bin", dir);
  REQUIRE(!missing.ok());
  CHECK_THAT(missing.status().message(), Catch::Contains("command not found: nope"));
  auto not_exec = worker::ResolveProgram("./data.txt", "", dir);
  REQUIRE(!not_exec.ok());
  CHECK_THAT(not_exec.status().message(), Catch::Contains("not an executable file"));
  (void)RemoveAll(dir);
}
