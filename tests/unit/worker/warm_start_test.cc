// Warm workers (worker/warm_start.h): a real traintl-worker started with --warm, handed a
// rank by a launch message, runs it as a worker started with --context would; the launch
// parser refuses what is not a launch.
#include "worker/warm_start.h"

#include "common/fd_passing.h"
#include "worker/agent_channel.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/unit/worker/worker_run.h"

using nlohmann::json;
using namespace traintl;
using namespace traintl::worker;
using namespace traintl::worker_test;

TEST_CASE("a warm worker runs the rank of its launch with that log, environment and cwd") {
  Fixture f;
  json ctx = f.Context(TEST_TRAIN_LIB, "",
                       {{"epochs", 2},
                        {"sleep_ms", 0},
                        {"checkpoint_every", 1},
                        {"echo_env", {"TRAINTL_WARM_PROBE", "HOME"}}});
  const std::string context_path = f.dir() + "/rank.context.json";
  REQUIRE(WriteFileAtomic(context_path, ctx.dump(), 0600).ok());
  // The blank argument is the room the agent leaves for the launched command line.
  WorkerRun& run = f.StartWithArgs({"--warm", std::string(512, ' ')});
  // It waits: nothing is said before the launch.
  CHECK_FALSE(run.Next(300).has_value());

  const std::string rank_log = f.dir() + "/launched.log";
  int log = ::open(rank_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  REQUIRE(log >= 0);
  const std::string workdir = f.dir() + "/cwd";
  REQUIRE(MakeDirs(workdir).ok());
  WarmLaunch launch;
  launch.context_path = context_path;
  launch.workdir = workdir;
  launch.env = {"TRAINTL_WARM_PROBE=launched", "PATH=/usr/bin:/bin"};
  run.SendWithFd(EncodeWarmLaunch(launch), log);
  ::close(log);

  ExpectHello(run, 0);
  json report = ExpectMessage(run, "report");
  // The launch's environment, and only it: HOME of the warm start is gone.
  CHECK(report["metrics"]["env"]["TRAINTL_WARM_PROBE"] == "launched");
  CHECK(report["metrics"]["env"]["HOME"].is_null());
  // Blocked until the ack (a checkpoint): its command line names the rank's context now.
  auto cmdline = ReadFile("/proc/" + std::to_string(run.pid()) + "/cmdline");
  REQUIRE(cmdline.ok());
  CHECK(cmdline->find(std::string("--context") + '\0' + context_path + '\0') != std::string::npos);
  CHECK(cmdline->find("--warm") == std::string::npos);
  run.Ack(0);
  CHECK(ExpectMessage(run, "report")["seq"] == 1);
  run.Ack(1);
  CHECK(ExpectMessage(run, "done")["ok"] == true);
  CHECK(run.WaitExitCode() == 0);
  auto text = ReadFile(rank_log);
  REQUIRE(text.ok());
  CHECK(text->find("epoch 1 rank 0 loss") != std::string::npos);
  CHECK(run.Log().find("epoch") == std::string::npos);  // the warm start's own log
}

TEST_CASE("a warm worker whose agent goes away before the launch exits") {
  Fixture f;
  WorkerRun& run = f.StartWithArgs({"--warm"});
  run.CloseChannel();
  CHECK(run.WaitExitCode() == AgentChannel::kAgentGoneExitCode);
}

TEST_CASE("ReceiveWarmLaunch refuses what is not a launch with a log descriptor") {
  auto send_and_receive = [](const std::string& line, bool with_fd) {
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    if (with_fd) {
      REQUIRE(SendWithFd(sv[0], line, STDERR_FILENO).ok());
    } else {
      REQUIRE(::write(sv[0], line.data(), line.size()) == static_cast<ssize_t>(line.size()));
    }
    ::close(sv[0]);
    auto r = ReceiveWarmLaunch(sv[1]);
    ::close(sv[1]);
    if (r.ok()) ::close(r->log_fd);
    return r.ok() ? Status::Ok() : r.status();
  };
  WarmLaunch good;
  good.context_path = "/x/rank.context.json";
  good.workdir = "/";
  good.env = {"A=1"};
  CHECK(send_and_receive(EncodeWarmLaunch(good), true).ok());
  CHECK(send_and_receive(EncodeWarmLaunch(good), false).message().find("no log descriptor") !=
        std::string::npos);
  CHECK(send_and_receive("{\"type\":\"stop\"}\n", true).message().find("not a launch") !=
        std::string::npos);
  CHECK(send_and_receive("{\"type\":7}\n", true).message().find("not a launch") !=
        std::string::npos);
  CHECK(send_and_receive("{\"type\":\"launch\",\"context\":\"/c\",\"workdir\":\"/\","
                         "\"env\":[\"NOEQUALS\"]}\n",
                         true)
            .message()
            .find("env") != std::string::npos);
  CHECK(send_and_receive("", false).code() == Status::Code::kUnavailable);
}
