// Tests of a one-voter RaftNode on loopback with real C-Raft and real disks (temp dirs):
// proposals are applied in order and come back byte-identical.

#include <sys/mount.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/file_util.h"
#include "daemon/consensus/raft_node.h"
#include "tests/unit/consensus/raft_test_util.h"

using namespace traintl;
using namespace traintl::raft_testing;

TEST_CASE("single voter on port 0 leads and applies commands in order") {
  DirGuard dir{TempDir()};
  RecordingStateMachine sm;
  RaftNode node(Options(dir.path), &sm);
  std::mutex mu;
  std::vector<bool> transitions;
  bool callback_off_loop = false;  // Catch2 assertions are not thread-safe: check later
  node.SetLeadershipCallback([&](bool is_leader) {
    std::lock_guard<std::mutex> l(mu);
    callback_off_loop |= !node.InLoopThread();
    transitions.push_back(is_leader);
  });
  CHECK(!node.IsLeader());
  CHECK(!node.Post([] {}));  // not started yet
  REQUIRE(node.Start().ok());
  CHECK(!node.Start().ok());  // one start per RaftNode

  // The chosen port is persisted, and it is in the configuration.
  std::string address = node.address();
  CHECK(address.rfind("127.0.0.1:", 0) == 0);
  CHECK(address != "127.0.0.1:0");
  auto saved = ReadFile(dir.path + "/raft_address");
  REQUIRE(saved.ok());
  CHECK(*saved == address + "\n");

  REQUIRE(WaitFor([&] { return node.IsLeader(); }));
  CHECK(node.Leader().id == 1);
  CHECK(node.Leader().address == address);
  auto conf = node.Configuration();
  REQUIRE(conf.ok());
  REQUIRE(conf->size() == 1);
  CHECK((*conf)[0].id == 1);
  CHECK((*conf)[0].address == address);
  CHECK((*conf)[0].role == RaftMember::Role::kVoter);

  // Sequential proposals return the state machine's results.
  for (int i = 1; i <= 5; i++) {
    auto r = ProposeSync(node, "cmd-" + std::to_string(i));
    REQUIRE(r.ok());
    CHECK(*r == "applied:" + std::to_string(i));
  }
  auto r = ProposeSync(node, "fail");
  REQUIRE(r.ok());
  CHECK(*r == "error: rejected");

  // Many in flight at once: every callback runs once, on the loop thread, in log order.
  constexpr int kBurst = 200;
  std::vector<std::promise<Result<std::string>>> promises(kBurst);
  std::atomic<int> off_loop{0};
  for (int i = 0; i < kBurst; i++) {
    node.Propose("burst-" + std::to_string(i), [&, i](Result<std::string> res) {
      if (!node.InLoopThread()) off_loop++;
      promises[i].set_value(std::move(res));
    });
  }
  for (int i = 0; i < kBurst; i++) {
    auto f = promises[i].get_future();
    REQUIRE(f.wait_for(kWait) == std::future_status::ready);
    auto res = f.get();
    REQUIRE(res.ok());
    CHECK(*res == "applied:" + std::to_string(7 + i));
  }
  CHECK(off_loop == 0);
  auto applied = Applied(node, sm);
  REQUIRE(applied.size() == 6 + kBurst);
  CHECK(applied[0] == "cmd-1");
  CHECK(applied[5] == "fail");
  for (int i = 0; i < kBurst; i++) CHECK(applied[6 + i] == "burst-" + std::to_string(i));

  // Post and Call run on the loop thread.
  auto on_loop = node.Call([&] { return node.InLoopThread(); }).get();
  REQUIRE(on_loop.ok());
  CHECK(*on_loop);
  CHECK(!node.InLoopThread());

  node.Stop();
  node.Stop();  // idempotent
  CHECK(!node.IsLeader());
  {
    std::lock_guard<std::mutex> l(mu);
    CHECK(transitions == std::vector<bool>{true, false});
    CHECK(!callback_off_loop);
  }
  // After Stop: Post refuses, Propose fails inline with "shutting down".
  CHECK(!node.Post([] {}));
  auto after = ProposeSync(node, "late");
  REQUIRE(!after.ok());
  CHECK(after.status().code() == Status::Code::kUnavailable);
  CHECK(after.status().message() == "shutting down");
  auto call_after = node.Call([] { return 1; }).get();
  CHECK(!call_after.ok());
  CHECK(!node.Configuration().ok());
}

TEST_CASE("odd-length and binary commands come back byte-identical") {
  DirGuard dir{TempDir()};
  RecordingStateMachine sm;
  RaftNode node(Options(dir.path), &sm);
  REQUIRE(node.Start().ok());
  REQUIRE(WaitFor([&] { return node.IsLeader(); }));

  std::vector<std::string> commands = {"",
                                       "a",
                                       "1234567",
                                       "12345678",
                                       "123456789",
                                       std::string(1000, 'x'),
                                       std::string("\0\0\0", 3),
                                       std::string("a\0b\0\0c\xff\x01", 8),
                                       std::string("\0", 1)};
  std::string binary;
  for (int i = 0; i < 4099; i++) binary.push_back(static_cast<char>((i * 7919) & 0xff));
  commands.push_back(binary);
  commands.push_back(std::string(1 << 20, '\0') + "tail");
  for (const std::string& c : commands) REQUIRE(ProposeSync(node, c).ok());
  CHECK(Applied(node, sm) == commands);
  node.Stop();

  // The same bytes come back from disk after a restart.
  RecordingStateMachine sm2;
  RaftNode again(Options(dir.path), &sm2);
  REQUIRE(again.Start().ok());
  REQUIRE(WaitFor([&] { return again.IsLeader(); }));
  CHECK(Applied(again, sm2) == commands);

  auto too_big = ProposeSync(again, std::string(RaftNode::kMaxCommandBytes + 1, 'x'));
  CHECK(too_big.status().code() == Status::Code::kInvalidArgument);
}

namespace {

// What a node's fatal callback was called with (on the loop thread; read from the test's).
class FatalCalls {
 public:
  explicit FatalCalls(RaftNode& node) {
    node.SetFatalCallback([this](Status why) {
      std::lock_guard<std::mutex> l(mu_);
      calls_.push_back(why.message());
    });
  }
  std::vector<std::string> calls() const {
    std::lock_guard<std::mutex> l(mu_);
    return calls_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> calls_;
};

}  // namespace

TEST_CASE("an entry the state cannot store stops the node: fatal callback, nothing applied after") {
  DirGuard dir{TempDir()};
  RecordingStateMachine sm;
  RaftOptions options = Options(dir.path);
  RaftNode node(options, &sm);
  FatalCalls fatal(node);
  REQUIRE(node.Start().ok());
  REQUIRE(WaitFor([&] { return node.IsLeader(); }));
  REQUIRE(ProposeSync(node, "a").ok());
  // Two entries in the log at once (almost always): the second commits after the first
  // failed, and its proposer cannot know what the other replicas made of it.
  auto first = std::make_shared<std::promise<Result<std::string>>>();
  auto second = std::make_shared<std::promise<Result<std::string>>>();
  node.Propose("disk-full", [first](Result<std::string> r) { first->set_value(r); });
  node.Propose("c", [second](Result<std::string> r) { second->set_value(r); });
  auto full = first->get_future().get();
  REQUIRE_FALSE(full.ok());
  CHECK(full.status().code() == Status::Code::kUnavailable);
  CHECK_THAT(full.status().message(), Catch::Contains("database or disk is full"));
  auto c = second->get_future().get();
  REQUIRE_FALSE(c.ok());
  const std::string why = c.status().message();
  CHECK((why.find("outcome unknown") != std::string::npos ||
         why.find("it is stopping") != std::string::npos));
  // Refused once the node failed: it could not tell the outcome.
  auto after = ProposeSync(node, "b");
  REQUIRE_FALSE(after.ok());
  CHECK_THAT(after.status().message(), Catch::Contains("it is stopping"));
  CHECK_THAT(after.status().message(), Catch::Contains("database or disk is full"));
  CHECK(Applied(node, sm) == std::vector<std::string>{"a"});
  node.Stop();
  const std::vector<std::string> calls = fatal.calls();
  REQUIRE(calls.size() == 1);
  CHECK_THAT(calls[0], Catch::Contains("storing a committed entry failed"));
}

TEST_CASE("a log write that fails (a full disk) stops the node through the fatal callback") {
  // A small tmpfs holds one preallocated 8 MiB segment of the log, not two. Needs root
  // (CI runs as root); skipped elsewhere.
  DirGuard dir{TempDir()};
  if (::mount("tmpfs", dir.path.c_str(), "tmpfs", 0, "size=12m") != 0) {
    WARN("skipped: cannot mount a tmpfs here (" << std::strerror(errno) << ")");
    return;
  }
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{dir.path};
  RecordingStateMachine sm;
  RaftOptions options = Options(dir.path);
  options.min_free_bytes = 0;  // no guard: the write itself must fail
  RaftNode node(options, &sm);
  FatalCalls fatal(node);
  REQUIRE(node.Start().ok());
  REQUIRE(WaitFor([&] { return node.IsLeader(); }));
  const std::string mib(1 << 20, 'x');
  bool refused = false;
  for (int i = 0; i < 24 && !refused; ++i) refused = !ProposeSync(node, mib).ok();
  CHECK(refused);
  REQUIRE(WaitFor([&] { return !fatal.calls().empty(); }));
  node.Stop();
  const std::vector<std::string> calls = fatal.calls();
  CHECK(calls.size() == 1);
  CHECK_THAT(calls[0], Catch::Contains("writing the replicated log failed"));
}
