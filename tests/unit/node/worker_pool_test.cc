// WorkerPool: the process it starts (exact environment, own process group, parent-death
// signal, optional unprivileged user), ill-typed messages (decoded by
// proto/worker_events.h; tests/unit/proto/worker_events_test.cc), and the limit on message
// size.
#include <fcntl.h>
#include <linux/falloc.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "daemon/node/log_chunk.h"
#include "daemon/node/worker_pool.h"
#include "tests/unit/common/tree_snapshot.h"

using namespace traintl;
using nlohmann::json;

namespace {

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/traintl-pool-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
    ::chmod(path.c_str(), 0755);  // the worker user must reach its files
  }
  ~TempDir() { RemoveAll(path).IgnoreError(); }
  std::string path;
};

class Recorder : public WorkerPoolListener {
 public:
  void OnWorkerHello(const std::string&, int, int) override { ++hellos; }
  void OnWorkerReport(const std::string&, int, int, const events::Report& r) override {
    reports.push_back({{"seq", r.seq}, {"metrics", r.metrics}, {"checkpoint", r.checkpoint}});
  }
  void OnWorkerExit(const WorkerExit& e) override { exits.push_back(e); }
  int hellos = 0;
  std::vector<json> reports;
  std::vector<WorkerExit> exits;
};

WorkerLaunch MakeLaunch(const std::string& dir, const std::string& mode) {
  WorkerLaunch l;
  l.job_id = "abc";
  l.attempt = 1;
  l.rank = 0;
  l.context_path = dir + "/rank_0.context.json";
  REQUIRE(WriteFileAtomic(l.context_path, "{}", 0600).ok());
  l.log_path = dir + "/rank_0.log";
  l.workdir = dir;
  l.env = {{"PATH", "/usr/bin:/bin"},
           {"LANG", "C.UTF-8"},
           {"PROBE_MODE", mode},
           {"TRAINTL_JOB_ID", "abc"}};
  return l;
}

// Runs the pool's io_context until the worker exited (bounded, as a hang guard).
void RunUntilExit(boost::asio::io_context& io, Recorder& rec) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (rec.exits.empty() && std::chrono::steady_clock::now() < deadline) {
    io.run_one_for(std::chrono::milliseconds(50));
  }
  REQUIRE(!rec.exits.empty());
}

json ProbeReport(const std::string& log_path) {
  auto text = ReadFile(log_path);
  REQUIRE(text.ok());
  std::string first = text->substr(0, text->find('\n'));
  return json::parse(first);
}

WorkerPoolOptions PoolOptions() {
  WorkerPoolOptions o;
  o.worker_binary = TRAINTL_WORKER_PROBE;
  o.stop_grace = std::chrono::milliseconds(200);
  o.term_grace = std::chrono::milliseconds(200);
  return o;
}

}  // namespace

TEST_CASE("a worker gets exactly its environment, its own process group and PDEATHSIG") {
  TempDir dir;
  boost::asio::io_context io;
  Recorder rec;
  WorkerPool pool(io, PoolOptions(), &rec);
  WorkerLaunch l = MakeLaunch(dir.path, "exit");
  REQUIRE(pool.Launch(l).ok());
  RunUntilExit(io, rec);
  CHECK(rec.exits[0].exit_code == 0);
  CHECK(rec.exits[0].done_seen);
  CHECK(rec.exits[0].done_ok);
  json probe = ProbeReport(l.log_path);
  std::map<std::string, std::string> env = probe["env"];
  // Sanitizer builds pass their own settings on (see WorkerPool::Launch); nothing else.
  for (const char* name : {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"}) env.erase(name);
  CHECK(env == l.env);
  CHECK(probe["pgid"] == probe["pid"]);
  CHECK(probe["pdeathsig"] == SIGKILL);
  CHECK(probe["uid"] == ::getuid());
  CHECK(probe["cwd"] == dir.path);
}

TEST_CASE("ill-typed worker messages are ignored, not fatal") {
  TempDir dir;
  boost::asio::io_context io;
  Recorder rec;
  WorkerPool pool(io, PoolOptions(), &rec);
  REQUIRE(pool.Launch(MakeLaunch(dir.path, "odd")).ok());
  RunUntilExit(io, rec);
  CHECK(rec.exits[0].exit_code == 0);
  CHECK(rec.exits[0].done_seen);
  CHECK(rec.exits[0].done_ok);  // the last, well-formed done wins
  REQUIRE(rec.reports.size() == 1);
  CHECK(rec.reports[0]["seq"] == 3);
  CHECK(rec.reports[0]["metrics"] == json::object());
}

TEST_CASE("reports go at most max_unacked_reports ahead of the acks") {
  TempDir dir;
  boost::asio::io_context io;
  Recorder rec;
  WorkerPoolOptions o = PoolOptions();
  o.max_unacked_reports = 8;
  o.drain_timeout = std::chrono::seconds(30);  // the probe exits long before it is read
  WorkerPool pool(io, o, &rec);
  REQUIRE(pool.Launch(MakeLaunch(dir.path, "reports")).ok());
  // Without acks, the pool stops at 8: the rest waits in the channel, not in the head.
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  while (std::chrono::steady_clock::now() < until) io.run_one_for(std::chrono::milliseconds(20));
  REQUIRE(rec.reports.size() == 8);
  CHECK(rec.exits.empty());
  // Acking as the head would (the last report taken covers the earlier ones).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  size_t acked = 0;
  while (rec.exits.empty() && std::chrono::steady_clock::now() < deadline) {
    if (rec.reports.size() > acked) {
      acked = rec.reports.size();
      pool.Ack("abc", 1, 0, rec.reports.back()["seq"].get<int>());
    }
    io.run_one_for(std::chrono::milliseconds(20));
  }
  REQUIRE(!rec.exits.empty());
  CHECK(rec.exits[0].done_seen);
  REQUIRE(rec.reports.size() == 200);
  for (int i = 0; i < 200; ++i) CHECK(rec.reports[i]["seq"] == i);
}

TEST_CASE("a report seq that does not count up fails the rank, saying why") {
  TempDir dir;
  boost::asio::io_context io;
  Recorder rec;
  WorkerPool pool(io, PoolOptions(), &rec);
  REQUIRE(pool.Launch(MakeLaunch(dir.path, "repeat-seq")).ok());
  RunUntilExit(io, rec);  // it sleeps: the pool stops it
  CHECK(rec.reports.size() == 2);
  const WorkerExit& e = rec.exits[0];
  CHECK(e.done_seen);
  CHECK_FALSE(e.done_ok);
  CHECK_FALSE(e.retryable);
  CHECK(e.done_error.find("report seq 0 after seq 1") != std::string::npos);
  CHECK(e.signal.has_value());
}

TEST_CASE("a report whose metrics are over kMaxReportMetricsBytes fails the rank") {
  TempDir dir;
  boost::asio::io_context io;
  Recorder rec;
  WorkerPool pool(io, PoolOptions(), &rec);
  REQUIRE(pool.Launch(MakeLaunch(dir.path, "big-report")).ok());
  RunUntilExit(io, rec);       // it sleeps: the pool stops it
  CHECK(rec.reports.empty());  // never forwarded to the head
  const WorkerExit& e = rec.exits[0];
  CHECK_FALSE(e.done_ok);
  CHECK_FALSE(e.retryable);
  CHECK(e.done_error.find("report seq 0: metrics of 65537 bytes, over the 64 KiB") !=
        std::string::npos);
}

TEST_CASE("without cgroups, processes two levels below an exited worker go with it") {
  // A daemon is a child subreaper (daemon.cc): orphans become its children.
  int was = 0;
  REQUIRE(::prctl(PR_GET_CHILD_SUBREAPER, &was) == 0);
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  TempDir dir;
  boost::asio::io_context io;
  Recorder rec;
  WorkerPool pool(io, PoolOptions(), &rec);  // no cgroups
  WorkerLaunch l = MakeLaunch(dir.path, "escape");
  REQUIRE(pool.Launch(l).ok());
  RunUntilExit(io, rec);
  auto text = ReadFile(l.log_path);
  REQUIRE(text.ok());
  const json pids = json::parse(text->substr(text->find("{\"a\"")));
  auto alive = [](int pid) {
    auto stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
    return stat.ok() && stat->substr(stat->rfind(')') + 2, 1) != "Z";
  };
  // A is killed when the worker exits; B, orphaned only then, when A is reaped.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((alive(pids["a"]) || alive(pids["b"])) && std::chrono::steady_clock::now() < deadline)
    io.run_one_for(std::chrono::milliseconds(20));
  CHECK(!alive(pids["a"]));
  CHECK(!alive(pids["b"]));
  ::prctl(PR_SET_CHILD_SUBREAPER, was);
  for (int pid : {pids["a"].get<int>(), pids["b"].get<int>()}) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, WNOHANG);
  }
}

TEST_CASE("a worker's failure message is kept to kMaxDoneErrorBytes, its end included") {
  TempDir dir;
  boost::asio::io_context io;
  Recorder rec;
  WorkerPool pool(io, PoolOptions(), &rec);
  REQUIRE(pool.Launch(MakeLaunch(dir.path, "big-error")).ok());
  RunUntilExit(io, rec);
  const std::string& error = rec.exits[0].done_error;
  CHECK(error.size() <= kMaxDoneErrorBytes + 64);
  CHECK(error.find("bytes left out") != std::string::npos);
  CHECK(error.substr(error.size() - 3) == "END");
}

TEST_CASE("a rank's log uses at most max_log_bytes of disk, and readers start after the hole") {
  TempDir dir;
  {
    // Not every file system can punch holes: the pool then says so and leaves the log.
    UniqueFd probe(::open((dir.path + "/punch").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    REQUIRE(probe.valid());
    REQUIRE(::ftruncate(probe.get(), 1 << 20) == 0);
    if (::fallocate(probe.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096) != 0) {
      WARN("skipped: this file system cannot punch holes");
      return;
    }
  }
  boost::asio::io_context io;
  Recorder rec;
  WorkerPoolOptions o = PoolOptions();
  o.max_log_bytes = 1 << 20;
  WorkerPool pool(io, o, &rec);
  WorkerLaunch l = MakeLaunch(dir.path, "chatty");
  REQUIRE(pool.Launch(l).ok());
  RunUntilExit(io, rec);
  struct stat st;
  REQUIRE(::stat(l.log_path.c_str(), &st) == 0);
  CHECK(st.st_size > (8 << 20));  // every offset stays where it was
  CHECK(static_cast<int64_t>(st.st_blocks) * 512 <= (1 << 20) + (64 << 10));
  const off_t start = LogDataStart(l.log_path);
  CHECK(start > st.st_size - (1 << 20));
  LogChunk c = ReadLogChunk(l.log_path, -1, 2 << 20, 0, 0, false);
  CHECK(c.offset == start);
  REQUIRE(!c.data.empty());
  CHECK(c.data.find('\0') == std::string::npos);
  CHECK(c.data.rfind("line ", 0) == 0);
  CHECK(c.data.find("line 00083887") != std::string::npos);  // the last one
  LogChunk tail = ReadLogChunk(l.log_path, -1, 1 << 20, 3, 0, false);
  CHECK(std::count(tail.data.begin(), tail.data.end(), '\n') == 3);
}

TEST_CASE("a worker that writes without newlines is cut off at max_message_bytes") {
  TempDir dir;
  boost::asio::io_context io;
  Recorder rec;
  WorkerPoolOptions o = PoolOptions();
  o.max_message_bytes = 256 * 1024;
  WorkerPool pool(io, o, &rec);
  REQUIRE(pool.Launch(MakeLaunch(dir.path, "flood")).ok());
  RunUntilExit(io, rec);
  // The agent closed the channel; the probe saw EPIPE and exited by itself.
  CHECK(rec.exits[0].exit_code == 0);
  CHECK(!rec.exits[0].done_seen);
}

TEST_CASE("a worker started by a root daemon runs as the configured user") {
  if (::geteuid() != 0) {
    WARN("skipped: needs root");
    return;
  }
  auto user = LookupWorkerUser("nobody");
  REQUIRE(user.ok());
  CHECK(user->uid != 0);
  TempDir dir;
  boost::asio::io_context io;
  Recorder rec;
  WorkerPool pool(io, PoolOptions(), &rec);
  WorkerLaunch l = MakeLaunch(dir.path, "exit");
  l.user = *user;
  REQUIRE(pool.Launch(l).ok());
  RunUntilExit(io, rec);
  CHECK(rec.exits[0].exit_code == 0);
  json probe = ProbeReport(l.log_path);
  CHECK(probe["uid"] == user->uid);
  CHECK(probe["euid"] == user->uid);
  CHECK(probe["gid"] == user->gid);
  CHECK(probe["egid"] == user->gid);
  for (const auto& g : probe["groups"]) CHECK(g != 0);
  CHECK(probe["context_readable"] == true);
  // Changing credentials clears the parent-death signal; the pool sets it afterwards.
  CHECK(probe["pdeathsig"] == SIGKILL);
  CHECK(probe["pgid"] == probe["pid"]);
  CHECK(probe["env"]["HOME"] == user->home);
  CHECK(probe["env"]["USER"] == user->name);
}

TEST_CASE("LookupWorkerUser refuses root and unknown users") {
  CHECK(LookupWorkerUser("root").status().code() == Status::Code::kInvalidArgument);
  CHECK(LookupWorkerUser("0").status().code() == Status::Code::kInvalidArgument);
  CHECK(LookupWorkerUser("no-such-user-traintl").status().code() == Status::Code::kNotFound);
  auto by_uid = LookupWorkerUser("65534");
  if (by_uid.ok()) CHECK(by_uid->uid == 65534);
}

TEST_CASE("WorkerPoolOptions::worker_user applies to every launch") {
  if (::geteuid() != 0) {
    WARN("skipped: needs root");
    return;
  }
  auto user = LookupWorkerUser("nobody");
  REQUIRE(user.ok());
  TempDir dir;
  boost::asio::io_context io;
  Recorder rec;
  WorkerPoolOptions o = PoolOptions();
  o.worker_user = *user;
  WorkerPool pool(io, o, &rec);
  WorkerLaunch l = MakeLaunch(dir.path, "exit");
  REQUIRE(pool.Launch(l).ok());
  RunUntilExit(io, rec);
  CHECK(rec.exits[0].exit_code == 0);
  json probe = ProbeReport(l.log_path);
  CHECK(probe["uid"] == user->uid);
  CHECK(probe["gid"] == user->gid);
}

TEST_CASE("a symlink, FIFO or hard link planted at the log path fails the launch") {
  TempDir dir;
  const std::string victim = testing::MakeVictim();
  const std::string before = testing::Snapshot(victim);
  boost::asio::io_context io;
  Recorder rec;
  WorkerPool pool(io, PoolOptions(), &rec);
  WorkerLaunch l = MakeLaunch(dir.path, "exit");
  REQUIRE(::symlink((victim + "/id_rsa").c_str(), l.log_path.c_str()) == 0);
  Status st = pool.Launch(l);
  CHECK(st.code() == Status::Code::kPermissionDenied);
  CHECK(st.message().find("refusing to follow a symlink at " + l.log_path) != std::string::npos);
  CHECK(pool.LivePids().empty());
  // A FIFO would have blocked the daemon's only thread in open(2).
  REQUIRE(::unlink(l.log_path.c_str()) == 0);
  REQUIRE(::mkfifo(l.log_path.c_str(), 0600) == 0);
  CHECK(pool.Launch(l).code() == Status::Code::kFailedPrecondition);
  REQUIRE(::unlink(l.log_path.c_str()) == 0);
  if (::link((victim + "/id_rsa").c_str(), l.log_path.c_str()) == 0) {
    CHECK(pool.Launch(l).code() == Status::Code::kPermissionDenied);
    REQUIRE(::unlink(l.log_path.c_str()) == 0);
  }
  CHECK(pool.LivePids().empty());
  CHECK(testing::Snapshot(victim) == before);
  RemoveAll(victim).IgnoreError();
}

TEST_CASE("a root daemon gives no symlinked context file to the worker user") {
  if (::geteuid() != 0) {
    WARN("skipped: needs root");
    return;
  }
  auto user = LookupWorkerUser("nobody");
  REQUIRE(user.ok());
  TempDir dir;
  const std::string victim = testing::MakeVictim();
  const std::string before = testing::Snapshot(victim);
  boost::asio::io_context io;
  Recorder rec;
  WorkerPool pool(io, PoolOptions(), &rec);

  // The context file replaced by a link to a root-only file: the old chown(2) followed it.
  // (The directories a worker writes are the agent's to give: agent_test.cc.)
  WorkerLaunch l = MakeLaunch(dir.path, "exit");
  l.user = *user;
  REQUIRE(::unlink(l.context_path.c_str()) == 0);
  REQUIRE(::symlink((victim + "/id_rsa").c_str(), l.context_path.c_str()) == 0);
  CHECK(pool.Launch(l).code() == Status::Code::kPermissionDenied);
  CHECK(testing::Snapshot(victim) == before);
  CHECK(pool.LivePids().empty());
  RemoveAll(victim).IgnoreError();
}
