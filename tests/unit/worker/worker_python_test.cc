// traintl-worker running a python entry point: the worker loads the Python shim from
// <prefix>/lib/traintl beside itself, and a Python function's outcomes map onto the
// protocol as a C++ library's do (a crash is the worker's crash; an import error is exit
// code 4, not retryable; an exception is exit 1 with the traceback in done).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>

#include <string>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "tests/unit/worker/worker_run.h"

using nlohmann::json;
using namespace traintl;
using namespace traintl::worker_test;

namespace {

// A context running `entry` from a working_dir holding train.py = `source`.
json PythonContext(const Fixture& f, const std::string& entry, const std::string& source) {
  const std::string wd = f.dir() + "/wd";
  REQUIRE(MakeDirs(wd, 0755).ok());
  REQUIRE(WriteFileAtomic(wd + "/train.py", source, 0644).ok());
  json c = f.Context("", "", {{"epochs", 2}});
  c.erase("library");
  c["entry_kind"] = "python";
  c["python"] = entry;
  c["working_dir"] = wd;
  return c;
}

}  // namespace

TEST_CASE("a python function runs with its config and reports through the same channel") {
  Fixture f;
  WorkerRun& run = f.Start(PythonContext(f, "train:fn",
                                         "import os\n"
                                         "from traintl import train\n"
                                         "def fn(config):\n"
                                         "    for e in range(config['epochs']):\n"
                                         "        train.report({'epoch': e, 'cwd': os.getcwd(),\n"
                                         "                      'rank': os.environ['RANK']})\n"));
  ExpectHello(run, 0);
  for (int seq = 0; seq < 2; ++seq) {
    json report = ExpectMessage(run, "report");
    CHECK(report["seq"] == seq);
    CHECK(report["metrics"]["epoch"] == seq);
    CHECK(report["metrics"]["cwd"] == f.dir() + "/wd");
    CHECK(report["metrics"]["rank"] == "0");
    // Metrics alone do not wait for an ack (the worker may be gone before one is sent).
  }
  CHECK(ExpectMessage(run, "done")["ok"] == true);
  CHECK(run.WaitExitCode() == 0);
}

TEST_CASE("python failures: exception, crash, sys.exit, import errors") {
  Fixture f;
  SECTION("an exception: retryable, the traceback in done, its last line logged") {
    WorkerRun& run =
        f.Start(PythonContext(f, "train:fn", "def fn(config):\n    raise ValueError('bad lr')\n"));
    ExpectHello(run, 0);
    std::string error = ExpectFailedDone(run, true);
    CHECK_THAT(error, Catch::StartsWith("train:fn failed:") && Catch::Contains("Traceback") &&
                          Catch::Contains("ValueError: bad lr"));
    CHECK(run.WaitExitCode() == 1);
    CHECK(run.LastLogLine() == "traintl-worker: train:fn failed: ValueError: bad lr");
  }
  SECTION("a segfault kills the worker as a C++ library's would") {
    WorkerRun& run = f.Start(
        PythonContext(f, "train:fn", "import ctypes\ndef fn(config):\n    ctypes.string_at(0)\n"));
    ExpectHello(run, 0);
    int status = run.Wait();
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGSEGV);
  }
  SECTION("sys.exit(3) fails the attempt; sys.exit(0) succeeds") {
    WorkerRun& run =
        f.Start(PythonContext(f, "train:fn", "import sys\ndef fn(config):\n    sys.exit(3)\n"));
    ExpectHello(run, 0);
    CHECK_THAT(ExpectFailedDone(run, true), Catch::Contains("sys.exit(3)"));
    CHECK(run.WaitExitCode() == 1);
  }
  SECTION("a missing function: exit code 4, not retryable") {
    WorkerRun& run = f.Start(PythonContext(f, "train:nope", "def fn(config):\n    pass\n"));
    // The module is imported by the shim's entry point, after hello.
    ExpectHello(run, 0);
    CHECK_THAT(ExpectFailedDone(run, false), Catch::Contains("nope"));
    CHECK(run.WaitExitCode() == 4);
  }
  SECTION("a module that does not import: exit code 4, naming the error") {
    WorkerRun& run = f.Start(PythonContext(f, "train:fn", "import no_such_module_xyz\n"));
    ExpectHello(run, 0);
    CHECK_THAT(ExpectFailedDone(run, false), Catch::Contains("no_such_module_xyz"));
    CHECK(run.WaitExitCode() == 4);
  }
}

TEST_CASE("a warm worker's Python sees the rank's environment, not the warm start's") {
  Fixture f;
  json ctx = PythonContext(f, "train:fn",
                           "import os, sys\n"
                           "from traintl import train\n"
                           "def fn(config):\n"
                           "    import torch\n"  // imported at the warm start already
                           "    train.report({'probe': os.environ.get('TRAINTL_WARM_PROBE'),\n"
                           "                  'rank': os.environ.get('RANK'),\n"
                           "                  'home': os.environ.get('HOME'),\n"
                           "                  'argv0': sys.argv[0], 'cwd': os.getcwd(),\n"
                           "                  'threads': torch.get_num_threads()})\n");
  const std::string context_path = f.dir() + "/rank.context.json";
  REQUIRE(WriteFileAtomic(context_path, ctx.dump(), 0600).ok());
  WorkerRun& run = f.StartWithArgs({"--warm"});
  const std::string rank_log = f.dir() + "/launched.log";
  int log = ::open(rank_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  REQUIRE(log >= 0);
  json launch = {
      {"type", "launch"},
      {"context", context_path},
      {"workdir", f.dir()},
      {"env", {"TRAINTL_WARM_PROBE=launched", "PATH=/usr/bin:/bin", "OMP_NUM_THREADS=1"}}};
  run.SendWithFd(launch.dump() + "\n", log);
  ::close(log);
  ExpectHello(run, 0);
  json report = ExpectMessage(run, "report");
  INFO(report.dump());
  CHECK(report["metrics"]["probe"] == "launched");
  CHECK(report["metrics"]["rank"] == "0");  // set by the worker from the context
  CHECK(report["metrics"]["home"].is_null());
  CHECK(report["metrics"]["argv0"] == "train");
  CHECK(report["metrics"]["cwd"] == f.dir() + "/wd");
  // torch (and its OpenMP) loaded before OMP_NUM_THREADS existed; the rank's value holds.
  CHECK(report["metrics"]["threads"] == 1);
  CHECK(ExpectMessage(run, "done")["ok"] == true);
  CHECK(run.WaitExitCode() == 0);
}

TEST_CASE("python: report(async_upload=True) snapshots, queues later reports, the end waits") {
  Fixture f;
  ::setenv("TEST_TRAINTL_UPLOAD_DELAY_MS_PER_MIB", "200", 1);
  WorkerRun& run = f.Start(PythonContext(
      f, "train:fn",
      "import os, tempfile\n"
      "from traintl import train\n"
      "def fn(config):\n"
      "    d = tempfile.mkdtemp()\n"
      "    for e in range(config['epochs']):\n"
      "        with open(os.path.join(d, 'model.bin'), 'wb') as f:\n"
      "            f.write(bytes([65 + e]) * (2 << 20))\n"
      "        train.report({'epoch': e}, checkpoint=train.Checkpoint.from_directory(d),\n"
      "                     async_upload=True)\n"
      "        train.report({'between': e})\n"));
  ::unsetenv("TEST_TRAINTL_UPLOAD_DELAY_MS_PER_MIB");
  ExpectHello(run, 0);
  for (int seq = 0; seq < 4; ++seq) {
    json report = ExpectMessage(run, "report");
    CHECK(report["seq"] == seq);
    if (seq % 2 == 0) {
      const std::string staged = f.staging() + "/seq_" + std::to_string(seq) + "/rank_0";
      REQUIRE(report["checkpoint"] == staged);
      CHECK(*ReadFile(staged + "/model.bin") ==
            std::string(2 << 20, static_cast<char>('A' + seq / 2)));
    } else {
      CHECK(report["metrics"]["between"] == seq / 2);
    }
  }
  CHECK(ExpectMessage(run, "done")["ok"] == true);
  CHECK(run.WaitExitCode() == 0);
}
