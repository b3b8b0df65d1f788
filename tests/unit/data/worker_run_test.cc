// The real traintl-worker running libtest_data.so against datasets, with this test as the
// agent (docs/WORKER_PROTOCOL.md): shards reach the library, and bad data ends the attempt
// as not retryable while an unreachable server stays retryable.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "data_test_util.h"

using nlohmann::json;
using namespace traintl::data::testing;

namespace {

// Guards against a hung worker; never a measure of speed.
constexpr int kHangGuardMs = 60000;

struct RunResult {
  std::vector<json> reports;  // metrics of each report
  json done;
  int exit_code = -1;
  std::string log;
};

// Runs one rank to completion, acknowledging its reports.
RunResult RunWorker(const TempDir& dir, const json& datasets, const json& config, int rank,
                    int world) {
  const std::string tag = "rank" + std::to_string(rank);
  json ctx = {{"job_id", "datatest"},
              {"job_name", "data"},
              {"attempt", 1},
              {"world_rank", rank},
              {"world_size", world},
              {"local_rank", rank},
              {"local_world_size", world},
              {"library", TEST_DATA_LIB},
              {"function", "train_loop"},
              {"config", config},
              {"trial_dir", dir.path()},
              {"staging_dir", dir / ("staging_" + tag)},
              {"datasets", datasets}};
  const std::string ctx_path = dir / (tag + ".context.json");
  const std::string log_path = dir / (tag + ".log");
  Write(ctx_path, ctx.dump());

  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(sv[1], 3);
    int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ::dup2(log, 1);
    ::dup2(log, 2);
    ::execl(TRAINTL_WORKER_BIN, TRAINTL_WORKER_BIN, "--context", ctx_path.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(sv[1]);
  const int fd = sv[0];
  RunResult out;
  std::string buffer;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kHangGuardMs);
  for (bool eof = false; !eof && std::chrono::steady_clock::now() < deadline;) {
    struct pollfd p = {fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char chunk[4096];
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n <= 0) {
      eof = true;
      break;
    }
    buffer.append(chunk, static_cast<size_t>(n));
    for (size_t nl; (nl = buffer.find('\n')) != std::string::npos;) {
      json m = json::parse(buffer.substr(0, nl));
      buffer.erase(0, nl + 1);
      if (m["type"] == "report") {
        out.reports.push_back(m["metrics"]);
        const std::string ack = json{{"type", "ack"}, {"seq", m["seq"]}}.dump() + "\n";
        // Metrics alone do not wait for the ack: the worker may be gone already.
        const ssize_t sent = ::send(fd, ack.data(), ack.size(), MSG_NOSIGNAL);
        REQUIRE(
            (sent == static_cast<ssize_t>(ack.size()) || errno == EPIPE || errno == ECONNRESET));
      } else if (m["type"] == "done") {
        out.done = m;
      }
    }
  }
  ::close(fd);
  int status = 0;
  for (;;) {
    if (::waitpid(pid, &status, WNOHANG) == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      FAIL("traintl-worker did not exit");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  auto log = traintl::ReadFile(log_path);
  out.log = log.ok() ? *log : "";
  return out;
}

// A loopback port nothing listens on.
int ClosedPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace

TEST_CASE("traintl-worker serves split shards to the library") {
  TempDir dir;
  WriteIdCsv(dir / "train-0.csv", 0, 40);
  WriteIdCsv(dir / "train-1.csv", 40, 3);
  json datasets = {{"train", {{"uri", "file://" + dir.path() + "/train-*.csv"}, {"split", true}}}};
  std::set<int64_t> seen;
  for (int rank = 0; rank < 3; ++rank) {
    RunResult r =
        RunWorker(dir, datasets, {{"batch_size", 4}, {"epochs", 2}, {"shuffle", true}}, rank, 3);
    INFO(r.log);
    REQUIRE(r.exit_code == 0);
    CHECK(r.done["ok"] == true);
    REQUIRE(r.reports.size() == 2);
    for (const auto& m : r.reports) {
      CHECK(m["rows"] == 15);  // ceil(43 / 3)
      CHECK(m["batches"] == 4);
      CHECK(m["num_rows"] == 15);
    }
    for (int64_t id : r.reports[0]["ids"]) seen.insert(id);
  }
  CHECK(seen.size() == 43);
}

TEST_CASE("traintl-worker: bad data fails the attempt as not retryable") {
  TempDir dir;
  Write(dir / "bad.csv", "id,x\n1,2\n2,3,4\n");
  json datasets = {{"train", {{"uri", "file://" + dir.path() + "/bad.csv"}}}};
  RunResult r = RunWorker(dir, datasets, json::object(), 0, 1);
  INFO(r.log);
  CHECK(r.exit_code == 1);
  CHECK(r.done["ok"] == false);
  CHECK(r.done["retryable"] == false);
  CHECK_THAT(r.done["error"].get<std::string>(), Catch::Contains(dir / "bad.csv:3"));
  CHECK_THAT(r.log, Catch::Contains("bad.csv:3"));

  // A missing dataset name, too.
  RunResult missing = RunWorker(dir, datasets, {{"dataset", "val"}}, 0, 1);
  CHECK(missing.done["retryable"] == false);
  CHECK_THAT(missing.done["error"].get<std::string>(), Catch::Contains("no dataset 'val'"));
}

TEST_CASE("traintl-worker: an unreachable server is retryable") {
  TempDir dir;
  json datasets = {
      {"train", {{"uri", "http://127.0.0.1:" + std::to_string(ClosedPort()) + "/data.csv"}}}};
  RunResult r = RunWorker(dir, datasets, json::object(), 0, 1);
  INFO(r.log);
  CHECK(r.exit_code == 1);
  CHECK(r.done["ok"] == false);
  CHECK(r.done["retryable"] == true);
  CHECK_THAT(r.done["error"].get<std::string>(), Catch::Contains("data.csv"));

  RunResult caught = RunWorker(dir, datasets, {{"catch", true}}, 0, 1);
  REQUIRE(caught.reports.size() == 1);
  CHECK(caught.reports[0]["retryable"] == true);
}
