// traintl-worker and its agent: reports and their acks, checkpoint staging and restore, the
// stop message, the end of the channel, and the lease that fences a worker of a frozen daemon.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "common/lease_clock.h"
#include "proto/rank_context.h"

#include "tests/unit/worker/worker_run.h"

using nlohmann::json;
using namespace traintl;
using namespace traintl::worker_test;

TEST_CASE("reports arrive in order, wait for acks, and stage checkpoints") {
  Fixture f;
  json ctx = f.Context(TEST_TRAIN_LIB, "", {{"epochs", 3}, {"sleep_ms", 0}});
  ctx["world_rank"] = 1;
  ctx["world_size"] = 2;
  WorkerRun& run = f.Start(ctx);
  ExpectHello(run, 1);
  for (int k = 0; k < 3; ++k) {
    json report = ExpectMessage(run, "report");
    CHECK(report["seq"] == k);
    CHECK(report["metrics"]["epoch"] == k);
    CHECK(report["metrics"]["rank"] == 1);
    CHECK(report["metrics"]["world_size"] == 2);
    CHECK(report["metrics"]["restored_epoch"] == -1);
    CHECK(report["metrics"]["loss"].get<double>() == Approx(1.0 / (k + 1)));
    const std::string staged = f.staging() + "/seq_" + std::to_string(k) + "/rank_1";
    REQUIRE(report["checkpoint"] == staged);
    auto state = ReadFile(staged + "/state.json");
    REQUIRE(state.ok());
    CHECK(json::parse(*state) == json{{"epoch", k}, {"rank", 1}});
    auto files = ListFilesRecursive(staged);
    REQUIRE(files.ok());
    CHECK(*files == std::vector<std::string>{"rank_1.json", "state.json"});
    if (k == 0) {
      // Blocked in report() until the ack: nothing more may arrive (epochs take no time).
      CHECK_FALSE(run.Next(300).has_value());
    }
    run.Ack(k);
  }
  json done = ExpectMessage(run, "done");
  CHECK(done["ok"] == true);
  CHECK(run.WaitExitCode() == 0);
  CHECK(run.Log().find("epoch 2 rank 1 loss") != std::string::npos);
}

TEST_CASE("get_checkpoint returns the context's checkpoint_dir") {
  Fixture f;
  const std::string ckpt = f.dir() + "/restore";
  REQUIRE(MakeDirs(ckpt).ok());
  REQUIRE(WriteFileAtomic(ckpt + "/state.json", R"({"epoch": 1, "rank": 0})").ok());
  json ctx = f.Context(TEST_TRAIN_LIB, "train_loop",
                       {{"epochs", 3}, {"sleep_ms", 0}, {"checkpoint_every", 0}});
  ctx["checkpoint_dir"] = ckpt;
  ctx["attempt"] = 2;
  WorkerRun& run = f.Start(ctx);
  ExpectHello(run, 0);
  json report = ExpectMessage(run, "report");
  CHECK(report["seq"] == 0);  // the counter is per attempt
  CHECK(report["metrics"]["epoch"] == 2);
  CHECK(report["metrics"]["attempt"] == 2);
  CHECK(report["metrics"]["restored_epoch"] == 1);
  CHECK(report["metrics"]["restored_path"] == ckpt);
  CHECK(report["checkpoint"].is_null());
  run.Ack(0);
  CHECK(ExpectMessage(run, "done")["ok"] == true);
  CHECK(run.WaitExitCode() == 0);
}

TEST_CASE("a stop message makes should_stop() true") {
  Fixture f;
  WorkerRun& run = f.Start(f.Context(
      TEST_TRAIN_LIB, "", {{"epochs", 100000}, {"sleep_ms", 10}, {"checkpoint_every", 0}}));
  ExpectHello(run, 0);
  CHECK(ExpectMessage(run, "report")["seq"] == 0);
  run.Send({{"type", "stop"}});
  // Metrics alone do not wait for acks: a few more epochs may be reported before the loop
  // sees the stop.
  json m;
  int reports = 1;
  for (;;) {
    auto next = run.Next();
    REQUIRE(next.has_value());
    m = *next;
    if (m.value("type", "") != "report") break;
    run.Ack(m["seq"].get<int64_t>());
    ++reports;
  }
  INFO("log:\n" << run.Log());
  REQUIRE(m.value("type", "") == "done");
  CHECK(m["ok"] == true);
  CHECK(reports < 50);  // 10 ms an epoch: it stopped soon after the stop message
  CHECK(run.WaitExitCode() == 0);
  CHECK(run.Log().find("rank 0 stopping after epoch " + std::to_string(reports - 1)) !=
        std::string::npos);
}

TEST_CASE("reports of metrics alone do not wait for acks, up to 16 in flight") {
  Fixture f;
  WorkerRun& run = f.Start(
      f.Context(TEST_TRAIN_LIB, "", {{"epochs", 40}, {"sleep_ms", 0}, {"checkpoint_every", 0}}));
  ExpectHello(run, 0);
  // Seq 0..15 return at once; seq 16 is sent and then waits for seq 0's ack.
  for (int k = 0; k <= 16; ++k) CHECK(ExpectMessage(run, "report")["seq"] == k);
  CHECK_FALSE(run.Next(300).has_value());
  run.Ack(0);
  CHECK(ExpectMessage(run, "report")["seq"] == 17);
  CHECK_FALSE(run.Next(300).has_value());
  for (int k = 1; k < 40; ++k) run.Ack(k);
  for (int k = 18; k < 40; ++k) CHECK(ExpectMessage(run, "report")["seq"] == k);
  CHECK(ExpectMessage(run, "done")["ok"] == true);
  CHECK(run.WaitExitCode() == 0);
}

TEST_CASE("held reports wait for each ack, and a stop ends the wait with no further epoch") {
  Fixture f;
  json ctx =
      f.Context(TEST_TRAIN_LIB, "", {{"epochs", 100000}, {"sleep_ms", 0}, {"checkpoint_every", 0}});
  ctx["hold_reports"] = true;
  WorkerRun& run = f.Start(ctx);
  ExpectHello(run, 0);
  for (int k = 0; k < 3; ++k) {
    json r = ExpectMessage(run, "report");
    CHECK(r["seq"] == k);
    CHECK(r["held"] == true);
    // Blocked in report() until its ack, however fast the epochs are.
    CHECK_FALSE(run.Next(300).has_value());
    run.Ack(k);
  }
  CHECK(ExpectMessage(run, "report")["seq"] == 3);
  // The head decided to stop the trial: it never acks seq 3, and the stop ends the wait.
  run.Send({{"type", "stop"}});
  json m = ExpectMessage(run, "done");
  CHECK(m["ok"] == true);
  CHECK(run.WaitExitCode() == 0);
  INFO("log:\n" << run.Log());
  CHECK(run.Log().find("rank 0 stopping after epoch 3") != std::string::npos);
}

TEST_CASE("the worker exits when the agent's end closes") {
  Fixture f;
  WorkerRun& run = f.Start(f.Context(
      TEST_TRAIN_LIB, "", {{"sleep_ms", 0}, {"fail_at_epoch", 0}, {"fail_mode", "hang"}}));
  ExpectHello(run, 0);
  run.CloseChannel();
  int status = run.Wait();
  INFO("log:\n" << run.Log());
  CHECK(WIFEXITED(status));
  CHECK(run.Log().find("the agent closed the channel") != std::string::npos);
}

TEST_CASE("the worker exits when the agent closes while a report waits for its ack") {
  Fixture f;
  WorkerRun& run = f.Start(f.Context(TEST_TRAIN_LIB, "", {{"sleep_ms", 0}}));
  ExpectHello(run, 0);
  ExpectMessage(run, "report");
  run.CloseChannel();
  CHECK(WIFEXITED(run.Wait()));
}

// A stopped daemon (SIGSTOP) keeps the channel open but cannot fence its workers: without
// the lease they outlived it and overlapped the next head's attempt.
TEST_CASE("the worker ends its process group when the daemon's lease clock stops") {
  LeaseClock clock;
  REQUIRE(clock.Start().ok());
  Fixture f;
  json ctx = f.Context(
      TEST_TRAIN_LIB, "",
      {{"sleep_ms", 0}, {"fail_at_epoch", 0}, {"fail_mode", "hang"}, {"spawn_child", "group"}});
  ctx["lease"] = {{"fd", 4}, {"ms", 300}, {"cgroup_kill", nullptr}};
  WorkerRun& run = f.Start(ctx, clock.read_only_fd());
  ExpectHello(run, 0);
  // The clock ticks: it lives on, well past the lease.
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  REQUIRE(::waitpid(run.pid(), nullptr, WNOHANG) == 0);
  std::optional<pid_t> child;
  for (int i = 0; i < 500 && !child; ++i) {
    auto text = ReadFile(f.dir() + "/child_a1_r0.pid");
    if (text.ok() && !text->empty()) child = std::stoi(*text);
    if (!child) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(child);
  clock.Pause();  // the daemon froze
  int status = run.Wait();
  INFO("log:\n" << run.Log());
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  CHECK(run.Log().find("lease lapsed") != std::string::npos);
  bool child_gone = false;
  for (int i = 0; i < 500 && !child_gone; ++i) {
    auto stat = ReadFile("/proc/" + std::to_string(*child) + "/stat");
    child_gone = !stat.ok() || stat->find(") Z") != std::string::npos;
    if (!child_gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(child_gone);
}

TEST_CASE("a lease in the context must name an fd and a positive time") {
  Fixture f;
  json ctx = f.Context(TEST_TRAIN_LIB, "");
  ctx["lease"] = {{"fd", 4}, {"ms", 0}};
  CHECK_FALSE(ParseRankContext(ctx.dump()).ok());
  ctx["lease"] = {{"fd", 4}, {"ms", 2000}, {"cgroup_kill", "/sys/fs/cgroup/x/cgroup.kill"}};
  auto parsed = ParseRankContext(ctx.dump());
  REQUIRE(parsed.ok());
  CHECK(parsed->lease_fd == 4);
  CHECK(parsed->lease_ms == 2000);
  CHECK(parsed->cgroup_kill == "/sys/fs/cgroup/x/cgroup.kill");
}

TEST_CASE("async checkpoints: the loop goes on during the upload, order holds, the end waits") {
  Fixture f;
  // 4 MiB at 100 ms per MiB: each upload takes about 0.4 s; the loop takes no time.
  ::setenv("TEST_TRAINTL_UPLOAD_DELAY_MS_PER_MIB", "100", 1);
  WorkerRun& run = f.Start(f.Context(TEST_TRAIN_LIB, "",
                                     {{"epochs", 2},
                                      {"sleep_ms", 0},
                                      {"ckpt_mb", 4},
                                      {"async_checkpoint", true},
                                      {"metrics_between", 2},
                                      {"ckpt_manifest", true}}));
  ::unsetenv("TEST_TRAINTL_UPLOAD_DELAY_MS_PER_MIB");
  ExpectHello(run, 0);
  for (int k = 0; k < 6; ++k) {
    json report = ExpectMessage(run, "report");
    CHECK(report["seq"] == k);
    const int epoch = k / 3;
    CHECK(report["metrics"]["epoch"] == epoch);
    if (k == 0) {
      // Sent after its upload, by which time the loop had gone on to epoch 1.
      CHECK(run.Log().find("epoch 1 rank 0 loss") != std::string::npos);
    }
    if (k % 3 == 0) {
      const std::string staged = f.staging() + "/seq_" + std::to_string(k) + "/rank_0";
      REQUIRE(report["checkpoint"] == staged);
      // What the loop wrote before report(), not what it clobbered the directory with after.
      CHECK(json::parse(*ReadFile(staged + "/state.json")) == json{{"epoch", epoch}, {"rank", 0}});
      CHECK(ReadFile(staged + "/blob_r0_0")->size() == (4u << 20));
    } else {
      CHECK(report["checkpoint"].is_null());
      CHECK(report["metrics"]["between"] == k % 3 - 1);
    }
  }
  // The last checkpoint (seq 3) was uploaded before done: the end waited for it.
  json done = ExpectMessage(run, "done");
  CHECK(done["ok"] == true);
  CHECK(run.WaitExitCode() == 0);
}

TEST_CASE("a deferred checkpoint whose files fail fails the rank, sending nothing after it") {
  Fixture f;
  WorkerRun& run = f.Start(f.Context(TEST_TRAIN_LIB, "",
                                     {{"epochs", 4},
                                      {"sleep_ms", 50},
                                      {"deferred_checkpoint", true},
                                      {"deferred_fail_epoch", 1}}));
  ExpectHello(run, 0);
  json first = ExpectMessage(run, "report");
  CHECK(first["seq"] == 0);
  CHECK(json::parse(*ReadFile(first["checkpoint"].get<std::string>() + "/state.json"))["epoch"] ==
        0);
  run.Ack(0);
  json done = ExpectMessage(run, "done");
  CHECK(done["ok"] == false);
  CHECK(done["error"].get<std::string>().find("report 1") != std::string::npos);
  CHECK(done["error"].get<std::string>().find("injected: the files cannot be written") !=
        std::string::npos);
  CHECK(run.WaitExitCode() == 1);
}
