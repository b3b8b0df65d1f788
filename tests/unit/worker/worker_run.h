// The harness of the traintl-worker tests: runs the real traintl-worker against the test
// libraries (tests/libs), playing the agent's side of the channel (docs/WORKER_PROTOCOL.md)
// over a socketpair. Used by worker_channel_test.cc, worker_failure_test.cc and
// worker_startup_test.cc.
//
// Thread-safety: test code, one thread.
#pragma once

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/fd_passing.h"
#include "common/file_util.h"

namespace traintl::worker_test {

using nlohmann::json;

// Guards against a hung worker; never a measure of speed.
inline constexpr int kHangGuardMs = 60000;

inline std::string TempDir() {
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

  // `line` with `fd` attached (SCM_RIGHTS), as the agent sends a warm worker its launch.
  void SendWithFd(const std::string& line, int fd) {
    REQUIRE(traintl::SendWithFd(fd_, line, fd).ok());
  }

  // An ack of report `seq`. A report of metrics alone does not wait for its ack, so the
  // worker may have finished and closed its end already: that is not an error here.
  void Ack(int64_t seq) {
    std::string line = json{{"type", "ack"}, {"seq", seq}}.dump() + "\n";
    ssize_t n = ::send(fd_, line.data(), line.size(), MSG_NOSIGNAL);
    if (n < 0) REQUIRE((errno == EPIPE || errno == ECONNRESET));
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

inline json ExpectMessage(WorkerRun& run, const std::string& type) {
  auto m = run.Next();
  INFO("log:\n" << run.Log());
  REQUIRE(m.has_value());
  INFO("message: " << m->dump());
  REQUIRE(m->value("type", "") == type);
  return *m;
}

inline void ExpectHello(WorkerRun& run, int rank) {
  json hello = ExpectMessage(run, "hello");
  CHECK(hello["rank"] == rank);
  CHECK(hello["pid"] == run.pid());
}

// Expects a failed `done` and returns its error.
inline std::string ExpectFailedDone(WorkerRun& run, bool retryable) {
  json done = ExpectMessage(run, "done");
  CHECK(done["ok"] == false);
  CHECK(done["retryable"] == retryable);
  REQUIRE(done["error"].is_string());
  return done["error"].get<std::string>();
}
}  // namespace traintl::worker_test
