// Runs the real traintl-worker against the test libraries, playing the agent's side of the
// channel (docs/WORKER_PROTOCOL.md) over a socketpair.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "common/lease_clock.h"
#include "proto/rank_context.h"
#include "worker/library_loader.h"
#include "worker/worker_host.h"

using nlohmann::json;
using namespace traintl;

namespace {

// Guards against a hung worker; never a measure of speed.
constexpr int kHangGuardMs = 60000;

std::string TempDir() {
  char tmpl[] = "/tmp/traintl-worker-test-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  return tmpl;
}

// One traintl-worker process and the agent's end of its channel.
class WorkerRun {
 public:
  // `lease_fd` >= 0 is handed to the worker as fd 4 (the daemon's lease clock).
  explicit WorkerRun(const std::vector<std::string>& args, const std::string& log_path,
                     int lease_fd = -1)
      : log_path_(log_path) {
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    std::vector<std::string> argv_s{TRAINTL_WORKER_BIN};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::setpgid(0, 0);
      struct rlimit no_core = {0, 0};
      ::setrlimit(RLIMIT_CORE, &no_core);  // the crash tests must not leave core files
      // Out of the way first: either may already sit on 3 or 4.
      const int channel = ::fcntl(sv[1], F_DUPFD, 10);
      const int lease = lease_fd >= 0 ? ::fcntl(lease_fd, F_DUPFD, 10) : -1;
      ::dup2(channel, 3);
      if (lease >= 0) ::dup2(lease, 4);
      int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      ::dup2(log, 1);
      ::dup2(log, 2);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(sv[1]);
    fd_ = sv[0];
  }

  ~WorkerRun() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    CloseChannel();
  }

  pid_t pid() const { return pid_; }

  // The next message from the worker; nullopt at end of file or after `timeout_ms`.
  std::optional<json> Next(int timeout_ms = kHangGuardMs) {
    for (;;) {
      size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return json::parse(line);
      }
      if (fd_ < 0) return std::nullopt;
      struct pollfd p = {fd_, POLLIN, 0};
      int r = ::poll(&p, 1, timeout_ms);
      if (r <= 0) return std::nullopt;
      char chunk[4096];
      ssize_t n = ::read(fd_, chunk, sizeof chunk);
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  void Send(const json& message) {
    std::string line = message.dump() + "\n";
    REQUIRE(::send(fd_, line.data(), line.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(line.size()));
  }

  void CloseChannel() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // The raw wait status; kills the worker and fails when it does not end.
  int Wait() {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kHangGuardMs);
    int status = 0;
    for (;;) {
      pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) break;
      if (std::chrono::steady_clock::now() > deadline) {
        FAIL("traintl-worker did not exit; log:\n" << Log());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
    return status;
  }

  int WaitExitCode() {
    int status = Wait();
    INFO("log:\n" << Log());
    REQUIRE(WIFEXITED(status));
    return WEXITSTATUS(status);
  }

  std::string Log() const {
    auto text = ReadFile(log_path_);
    return text.ok() ? *text : "";
  }

  std::string LastLogLine() const {
    std::string log = Log();
    while (!log.empty() && log.back() == '\n') log.pop_back();
    size_t nl = log.rfind('\n');
    return nl == std::string::npos ? log : log.substr(nl + 1);
  }

 private:
  std::string log_path_;
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string buffer_;
};

// A temp dir holding a context file, and the worker started with it.
class Fixture {
 public:
  Fixture() : dir_(TempDir()) {}
  ~Fixture() {
    run_.reset();
    (void)RemoveAll(dir_);
  }

  const std::string& dir() const { return dir_; }
  std::string staging() const { return dir_ + "/trial/.staging/attempt_1"; }

  json Context(const std::string& library, const std::string& function,
               json config = json::object()) const {
    // Checkpoints of a worker killed mid-report must not pile up in /tmp.
    if (library == TEST_TRAIN_LIB) config["tmp_dir"] = dir_;
    return {{"job_id", "3f9c2a1b7d4e"},
            {"job_name", "unit"},
            {"attempt", 1},
            {"world_rank", 0},
            {"world_size", 1},
            {"local_rank", 0},
            {"local_world_size", 1},
            {"node_rank", 0},
            {"library", library},
            {"function", function},
            {"config", config},
            {"checkpoint_dir", nullptr},
            {"trial_dir", dir_ + "/trial"},
            {"staging_dir", staging()},
            {"master_addr", "127.0.0.1"},
            {"master_port", 29517},
            {"collective_timeout_s", 300},
            {"use_gpu", false},
            {"datasets", json::object()}};
  }

  WorkerRun& Start(const json& context, int lease_fd = -1) {
    const std::string path = dir_ + "/rank.context.json";
    REQUIRE(WriteFileAtomic(path, context.dump(), 0600).ok());
    return StartWithArgs({"--context", path}, lease_fd);
  }

  WorkerRun& StartWithArgs(const std::vector<std::string>& args, int lease_fd = -1) {
    run_ = std::make_unique<WorkerRun>(args, dir_ + "/rank.log", lease_fd);
    return *run_;
  }

 private:
  std::string dir_;
  std::unique_ptr<WorkerRun> run_;
};

json ExpectMessage(WorkerRun& run, const std::string& type) {
  auto m = run.Next();
  INFO("log:\n" << run.Log());
  REQUIRE(m.has_value());
  INFO("message: " << m->dump());
  REQUIRE(m->value("type", "") == type);
  return *m;
}

void ExpectHello(WorkerRun& run, int rank) {
  json hello = ExpectMessage(run, "hello");
  CHECK(hello["rank"] == rank);
  CHECK(hello["pid"] == run.pid());
}

// Expects a failed `done` and returns its error.
std::string ExpectFailedDone(WorkerRun& run, bool retryable) {
  json done = ExpectMessage(run, "done");
  CHECK(done["ok"] == false);
  CHECK(done["retryable"] == retryable);
  REQUIRE(done["error"].is_string());
  return done["error"].get<std::string>();
}

}  // namespace

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
    run.Send({{"type", "ack"}, {"seq", k}});
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
  run.Send({{"type", "ack"}, {"seq", 0}});
  CHECK(ExpectMessage(run, "done")["ok"] == true);
  CHECK(run.WaitExitCode() == 0);
}

TEST_CASE("an exception fails the run with its message") {
  Fixture f;
  WorkerRun& run = f.Start(
      f.Context(TEST_TRAIN_LIB, "",
                {{"epochs", 3}, {"sleep_ms", 0}, {"fail_at_epoch", 1}, {"fail_mode", "throw"}}));
  ExpectHello(run, 0);
  CHECK(ExpectMessage(run, "report")["seq"] == 0);
  run.Send({{"type", "ack"}, {"seq", 0}});
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
  run.Send({{"type", "ack"}, {"seq", 0}});
  CHECK(ExpectMessage(run, "done")["ok"] == true);
  CHECK(run.WaitExitCode() == 0);
}

TEST_CASE("crashes and exits of the training code") {
  Fixture f;
  json config = {{"epochs", 3}, {"sleep_ms", 0}, {"fail_at_epoch", 0}};
  SECTION("segfault") {
    config["fail_mode"] = "segfault";
    WorkerRun& run = f.Start(f.Context(TEST_TRAIN_LIB, "", config));
    ExpectHello(run, 0);
    CHECK_FALSE(run.Next().has_value());  // no done: the process is gone
    int status = run.Wait();
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGSEGV);
  }
  SECTION("abort") {
    config["fail_mode"] = "abort";
    WorkerRun& run = f.Start(f.Context(TEST_TRAIN_LIB, "", config));
    ExpectHello(run, 0);
    CHECK_FALSE(run.Next().has_value());
    int status = run.Wait();
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGABRT);
  }
  SECTION("exit") {
    config["fail_mode"] = "exit";
    WorkerRun& run = f.Start(f.Context(TEST_TRAIN_LIB, "", config));
    ExpectHello(run, 0);
    CHECK_FALSE(run.Next().has_value());
    CHECK(run.WaitExitCode() == 7);
  }
}

TEST_CASE("a stop message makes should_stop() true") {
  Fixture f;
  WorkerRun& run = f.Start(f.Context(
      TEST_TRAIN_LIB, "", {{"epochs", 100000}, {"sleep_ms", 10}, {"checkpoint_every", 0}}));
  ExpectHello(run, 0);
  CHECK(ExpectMessage(run, "report")["seq"] == 0);
  // The stop is read before the ack, so the loop sees it right after report() returns.
  run.Send({{"type", "stop"}});
  run.Send({{"type", "ack"}, {"seq", 0}});
  CHECK(ExpectMessage(run, "done")["ok"] == true);
  CHECK(run.WaitExitCode() == 0);
  CHECK(run.Log().find("rank 0 stopping after epoch 0") != std::string::npos);
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

TEST_CASE("the entry point is chosen by name") {
  Fixture f;
  SECTION("train_b") {
    WorkerRun& run = f.Start(f.Context(TEST_MULTI_LIB, "train_b", {{"x", 1}}));
    ExpectHello(run, 0);
    json report = ExpectMessage(run, "report");
    CHECK(report["metrics"]["fn"] == "train_b");
    CHECK(report["metrics"]["config"] == json{{"x", 1}});
    run.Send({{"type", "ack"}, {"seq", 0}});
    CHECK(ExpectMessage(run, "done")["ok"] == true);
    CHECK(run.WaitExitCode() == 0);
    CHECK(run.Log().find("train_b running") != std::string::npos);  // the log callback
  }
  SECTION("train_a") {
    WorkerRun& run = f.Start(f.Context(TEST_MULTI_LIB, "train_a"));
    ExpectHello(run, 0);
    CHECK(ExpectMessage(run, "report")["metrics"]["fn"] == "train_a");
    run.Send({{"type", "ack"}, {"seq", 0}});
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
    run.Send({{"type", "ack"}, {"seq", 0}});
    CHECK(ExpectMessage(run, "done")["ok"] == true);
    CHECK(run.WaitExitCode() == 0);
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
    expected = "cannot load the library: ";
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
  run.Send({{"type", "ack"}, {"seq", 0}});
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
