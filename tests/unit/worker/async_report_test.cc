// WorkerHost's asynchronous reports (report_async, report_deferred): the order of queued
// reports, at most one upload in flight, the sticky error of a failed upload, the
// synchronous fallback when memory lacks room, and the bounded wait at a stop. In process:
// the test plays the agent on the other end of a socketpair.
#include <catch2/catch.hpp>

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "proto/rank_context.h"
#include "proto/worker_events.h"
#include "worker/agent_channel.h"
#include "worker/worker_host.h"

using nlohmann::json;
using namespace traintl;
using namespace std::chrono_literals;

namespace {

std::string TempDir() {
  char tmpl[] = "/tmp/traintl-async-report-test-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  return tmpl;
}

// The agent's end of a channel. Never closed: the AgentChannel's reader ends the process
// when its peer goes (both are leaked on purpose, as in the worker).
class FakeAgent {
 public:
  FakeAgent() {
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    fd_ = sv[0];
    channel_ = new worker::AgentChannel(sv[1]);
    channel_->Start();
  }
  worker::AgentChannel* channel() { return channel_; }

  // The next report, or nullopt after `ms` without one.
  std::optional<json> Next(int ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    for (;;) {
      if (auto nl = buffer_.find('\n'); nl != std::string::npos) {
        json m = json::parse(buffer_.substr(0, nl));
        buffer_.erase(0, nl + 1);
        return m;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      struct pollfd p = {fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[4096];
      const ssize_t n = ::read(fd_, chunk, sizeof chunk);
      REQUIRE(n > 0);
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }
  json Expect(int ms = 10000) {
    auto m = Next(ms);
    REQUIRE(m.has_value());
    return *m;
  }
  void Send(const std::string& line) {
    REQUIRE(::write(fd_, line.data(), line.size()) == static_cast<ssize_t>(line.size()));
  }
  void Ack(int64_t seq) {
    Send(events::Encode(events::AgentMessage{events::Ack{static_cast<int>(seq)}}));
  }
  void Stop() { Send(events::Encode(events::AgentMessage{events::Stop{}})); }
  void Regroup(int generation) {
    Send(events::Encode(events::AgentMessage{events::Regroup{generation, {}, "", 0}}));
  }

 private:
  int fd_ = -1;
  worker::AgentChannel* channel_ = nullptr;
  std::string buffer_;
};

struct Setup {
  Setup() : root(TempDir()) {
    context.staging_dir = root + "/staging";
    context.world_rank = 1;
    context.world_size = 2;
    REQUIRE(MakeDirs(root + "/src").ok());
    REQUIRE(WriteFileAtomic(root + "/src/state.bin", std::string(1 << 20, 's')).ok());
    REQUIRE(MakeDirs(root + "/mem").ok());
    host = new worker::WorkerHost(context, agent.channel());  // leaked: see FakeAgent
    worker::SnapshotOptions options;
    options.memory_dir = root + "/mem";
    options.memory_reserve_bytes = 0;
    host->set_snapshot_options(options);
  }
  ~Setup() { (void)RemoveAll(root); }
  std::string staged(int seq) const {
    return worker::WorkerHost::StagedPath(context.staging_dir, seq, 1);
  }

  std::string root;
  RankContext context;
  FakeAgent agent;
  worker::WorkerHost* host = nullptr;
};

json Metrics(int i) { return json{{"i", i}}; }

}  // namespace

TEST_CASE("reports issued behind a deferred checkpoint queue in order and go out after it") {
  Setup s;
  auto deferred = s.host->ReportDeferred(Metrics(0).dump().c_str(), nullptr);
  REQUIRE(deferred.ok());
  CHECK(deferred->first == 0);
  CHECK(deferred->second == s.staged(0));
  CHECK(IsDirectory(deferred->second));
  // Metrics alone return at once, queued behind it: nothing is sent before its files.
  for (int i = 1; i <= 3; ++i) REQUIRE(s.host->Report(Metrics(i).dump().c_str(), nullptr).ok());
  CHECK_FALSE(s.agent.Next(200).has_value());
  // A checkpoint report waits for the upload in flight.
  std::atomic<bool> returned{false};
  auto second = std::async(std::launch::async, [&] {
    Status st = s.host->ReportAsync(Metrics(4).dump().c_str(), (s.root + "/src").c_str(), nullptr);
    returned = true;
    return st;
  });
  std::this_thread::sleep_for(200ms);
  CHECK_FALSE(returned.load());
  REQUIRE(WriteFileAtomic(deferred->second + "/model.bin", "weights").ok());
  REQUIRE(s.host->ReportDeferredDone(deferred->first, nullptr).ok());
  for (int i = 0; i <= 4; ++i) {
    json m = s.agent.Expect();
    CHECK(m["type"] == "report");
    CHECK(m["seq"] == i);
    CHECK(m["metrics"] == Metrics(i));
    if (i == 0) CHECK(m["checkpoint"] == s.staged(0));
    if (i == 4) CHECK(m["checkpoint"] == s.staged(4));
    if (i > 0 && i < 4) CHECK(m["checkpoint"].is_null());
  }
  REQUIRE(second.get().ok());
  CHECK(*ReadFile(s.staged(4) + "/state.bin") == std::string(1 << 20, 's'));
  REQUIRE(s.host->WaitReports().ok());
  CHECK(s.host->FinishReports().ok());
}

TEST_CASE("an asynchronous checkpoint returns before it is sent, and holds its snapshot") {
  Setup s;
  worker::SnapshotOptions options;
  options.memory_dir = s.root + "/mem";
  options.memory_reserve_bytes = 0;
  options.persist_delay_ms_per_mib = 400;  // the upload takes 0.4 s
  s.host->set_snapshot_options(options);
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(s.host->ReportAsync(Metrics(0).dump().c_str(), (s.root + "/src").c_str(), nullptr).ok());
  CHECK(std::chrono::steady_clock::now() - t0 < 300ms);
  // The loop overwrites its directory at once.
  REQUIRE(WriteFileAtomic(s.root + "/src/state.bin", "changed").ok());
  REQUIRE(s.host->Report(Metrics(1).dump().c_str(), nullptr).ok());
  json first = s.agent.Expect();
  CHECK(first["seq"] == 0);
  CHECK(std::chrono::steady_clock::now() - t0 >= 300ms);
  CHECK(*ReadFile(s.staged(0) + "/state.bin") == std::string(1 << 20, 's'));
  CHECK(s.agent.Expect()["seq"] == 1);
  REQUIRE(s.host->FinishReports().ok());
}

TEST_CASE("a failed upload fails every later report and the end, and sends nothing after it") {
  Setup s;
  REQUIRE(s.host->Report(Metrics(0).dump().c_str(), nullptr).ok());
  CHECK(s.agent.Expect()["seq"] == 0);
  auto deferred = s.host->ReportDeferred(Metrics(1).dump().c_str(), nullptr);
  REQUIRE(deferred.ok());
  REQUIRE(s.host->Report(Metrics(2).dump().c_str(), nullptr).ok());  // queued behind it
  REQUIRE(s.host->ReportDeferredDone(deferred->first, "disk full").ok());
  // Nothing of seq 1 or after goes out: the head never sees a gap or a half checkpoint.
  CHECK_FALSE(s.agent.Next(300).has_value());
  CHECK_FALSE(PathExists(s.staged(1)));
  Status next = s.host->Report(Metrics(3).dump().c_str(), nullptr);
  REQUIRE_FALSE(next.ok());
  CHECK(next.message().find("report 1") != std::string::npos);
  CHECK(next.message().find("disk full") != std::string::npos);
  CHECK_FALSE(
      s.host->ReportAsync(Metrics(3).dump().c_str(), (s.root + "/src").c_str(), nullptr).ok());
  CHECK_FALSE(s.host->WaitReports().ok());
  CHECK_FALSE(s.host->FinishReports().ok());
  CHECK_FALSE(s.agent.Next(100).has_value());
}

TEST_CASE("without room in memory an asynchronous checkpoint is copied synchronously") {
  Setup s;
  worker::SnapshotOptions options;
  options.memory_dir = s.root + "/mem";
  options.memory_reserve_bytes = uint64_t{1} << 62;
  options.clone = [](int, int) {
    errno = EOPNOTSUPP;
    return -1;
  };
  s.host->set_snapshot_options(options);
  auto report = std::async(std::launch::async, [&] {
    return s.host->ReportAsync(Metrics(0).dump().c_str(), (s.root + "/src").c_str(), nullptr);
  });
  // Sent from the caller's thread, staged already, and waiting for its ack as report() does.
  json m = s.agent.Expect();
  CHECK(m["seq"] == 0);
  CHECK(*ReadFile(s.staged(0) + "/state.bin") == std::string(1 << 20, 's'));
  CHECK(report.wait_for(200ms) == std::future_status::timeout);
  s.agent.Ack(0);
  REQUIRE(report.get().ok());
}

TEST_CASE("after a stop the end waits at most kStopDrain for an upload, then abandons it") {
  Setup s;
  auto deferred = s.host->ReportDeferred(Metrics(0).dump().c_str(), nullptr);
  REQUIRE(deferred.ok());
  s.agent.Stop();
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(s.host->FinishReports().ok());
  const auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(waited >= worker::WorkerHost::kStopDrain - 100ms);
  CHECK(waited < worker::WorkerHost::kStopDrain + 1s);
  // Its files may still arrive: nothing is sent, nothing fails.
  CHECK(s.host->ReportDeferredDone(deferred->first, nullptr).ok());
  CHECK_FALSE(s.agent.Next(200).has_value());
}

TEST_CASE("report options: unknown keys are refused, a bad ticket is an error") {
  Setup s;
  Status st = s.host->ReportAsync(Metrics(0).dump().c_str(), (s.root + "/src").c_str(),
                                  R"({"compress": true})");
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("compress") != std::string::npos);
  CHECK_FALSE(s.host->ReportDeferredDone(42, nullptr).ok());
  // A refused report used up no seq.
  REQUIRE(s.host->Report(Metrics(0).dump().c_str(), nullptr).ok());
  CHECK(s.agent.Expect()["seq"] == 0);
}

TEST_CASE("metrics that are not a JSON object are refused with the parser's reason") {
  Setup s;
  Status st = s.host->Report(R"({"a": 1e309})", nullptr);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.message(), Catch::Contains("metrics are not valid JSON"));
  CHECK_THAT(st.message(), Catch::Contains("number overflow parsing '1e309'"));
  st = s.host->Report("[1]", nullptr);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.message(), Catch::Contains("metrics must be a JSON object, not array"));
  st = s.host->Report((std::string(200, '[') + std::string(200, ']')).c_str(), nullptr);
  CHECK_THAT(st.message(), Catch::Contains("nested at most 128 levels"));
  REQUIRE(s.host->Report(Metrics(0).dump().c_str(), nullptr).ok());
  CHECK(s.agent.Expect()["seq"] == 0);
}

TEST_CASE("metrics over kMaxReportMetricsBytes are refused by every report call, seq unused") {
  Setup s;
  // Exactly the limit as encoded: {"m":"xx..."} is 8 bytes of syntax around the string.
  const std::string at_limit =
      json{{"m", std::string(events::kMaxReportMetricsBytes - 8, 'x')}}.dump();
  REQUIRE(at_limit.size() == events::kMaxReportMetricsBytes);
  const std::string over = json{{"m", std::string(events::kMaxReportMetricsBytes - 7, 'x')}}.dump();
  for (Status st : {s.host->Report(over.c_str(), nullptr),
                    s.host->ReportAsync(over.c_str(), (s.root + "/src").c_str(), nullptr)}) {
    REQUIRE_FALSE(st.ok());
    CHECK(st.message().find("65537 bytes as JSON, over the 64 KiB") != std::string::npos);
  }
  REQUIRE(s.host->Report(at_limit.c_str(), nullptr).ok());
  CHECK(s.agent.Expect()["seq"] == 0);
}

TEST_CASE("peer recovery: the host waits for the agent's regroup and skips report seqs") {
  Setup s;
  const traintl_host_api* api = s.host->api();
  REQUIRE(TRAINTL_HOST_API_HAS(api, skip_report_seq));
  // Nothing announced: a timeout.
  CHECK(api->regroup_wait(api->host, 1, 50) == 0);
  auto waiting =
      std::async(std::launch::async, [&] { return api->regroup_wait(api->host, 1, 10000); });
  std::this_thread::sleep_for(100ms);
  s.agent.Regroup(2);
  CHECK(waiting.get() == 2);
  CHECK(api->regroup_wait(api->host, 2, 0) == 2);  // the latest, without waiting
  CHECK(api->regroup_wait(api->host, 3, 0) == 0);
  // The report sequence moves forward only.
  REQUIRE(s.host->Report(Metrics(0).dump().c_str(), nullptr).ok());
  CHECK(s.agent.Expect()["seq"] == 0);
  CHECK(api->next_report_seq(api->host) == 1);
  char err[256] = {0};
  CHECK(api->skip_report_seq(api->host, 5, err, sizeof err) == 0);
  CHECK(api->skip_report_seq(api->host, 3, err, sizeof err) == 0);
  CHECK(api->next_report_seq(api->host) == 5);
  REQUIRE(s.host->Report(Metrics(5).dump().c_str(), nullptr).ok());
  CHECK(s.agent.Expect()["seq"] == 5);
  // A stop ends a wait for a regroup that will not come.
  auto stopped =
      std::async(std::launch::async, [&] { return api->regroup_wait(api->host, 3, 10000); });
  std::this_thread::sleep_for(100ms);
  s.agent.Stop();
  CHECK(stopped.get() == -1);
  s.agent.Ack(0);
  s.agent.Ack(5);
  CHECK(s.host->FinishReports().ok());
}
