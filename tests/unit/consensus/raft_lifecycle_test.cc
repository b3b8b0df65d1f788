// Tests of RaftNode's life cycle: restart from the log and from a snapshot, the data
// dir lock, failed starts, and Stop with work pending or from a callback.

#include <atomic>
#include <catch2/catch.hpp>
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

TEST_CASE("restart on the same dir replays the log into a new state machine") {
  DirGuard dir{TempDir()};
  std::vector<std::string> expected;
  std::string address;
  {
    RecordingStateMachine sm;
    RaftNode node(Options(dir.path), &sm);
    REQUIRE(node.Start().ok());
    address = node.address();
    REQUIRE(WaitFor([&] { return node.IsLeader(); }));
    for (int i = 0; i < 30; i++) {
      expected.push_back("entry-" + std::to_string(i));
      REQUIRE(ProposeSync(node, expected.back()).ok());
    }
  }  // the destructor stops the node

  RecordingStateMachine sm;
  RaftNode node(Options(dir.path), &sm);
  REQUIRE(node.Start().ok());
  CHECK(node.address() == address);  // reused from <data_dir>/raft_address
  REQUIRE(WaitFor([&] { return node.IsLeader(); }));
  // IsLeader implies the barrier was applied, so every earlier entry was too.
  CHECK(Applied(node, sm) == expected);
  CHECK(sm.restores == 0);
  auto r = ProposeSync(node, "after-restart");
  REQUIRE(r.ok());
  CHECK(*r == "applied:31");
}

TEST_CASE("restart restores from a snapshot plus trailing entries") {
  DirGuard dir{TempDir()};
  std::vector<std::string> expected;
  int snapshots = 0;
  auto options = [&] {
    RaftOptions o = Options(dir.path);
    o.snapshot_threshold = 16;
    o.snapshot_trailing = 4;
    return o;
  };
  {
    RecordingStateMachine sm;
    RaftNode node(options(), &sm);
    REQUIRE(node.Start().ok());
    REQUIRE(WaitFor([&] { return node.IsLeader(); }));
    for (int i = 0; i < 100; i++) {
      expected.push_back("snap-" + std::to_string(i) + std::string(i % 9, '#'));
      REQUIRE(ProposeSync(node, expected.back()).ok());
    }
    auto taken = node.Call([&] { return sm.snapshots; }).get();
    REQUIRE(taken.ok());
    snapshots = *taken;
    node.Stop();
  }
  CHECK(snapshots >= 1);
  auto files = ListFilesRecursive(dir.path);
  REQUIRE(files.ok());
  bool has_snapshot = false;
  for (const std::string& f : *files) has_snapshot |= f.rfind("snapshot-", 0) == 0;
  CHECK(has_snapshot);

  RecordingStateMachine sm;
  RaftNode node(options(), &sm);
  REQUIRE(node.Start().ok());
  REQUIRE(WaitFor([&] { return node.IsLeader(); }));
  auto restores = node.Call([&] { return sm.restores; }).get();
  REQUIRE(restores.ok());
  CHECK(*restores == 1);
  CHECK(Applied(node, sm) == expected);
  auto r = ProposeSync(node, "more");
  REQUIRE(r.ok());
  CHECK(*r == "applied:101");
}

TEST_CASE("a second node on the same data_dir fails to start") {
  DirGuard dir{TempDir()};
  RecordingStateMachine sm1, sm2, sm3;
  RaftNode first(Options(dir.path), &sm1);
  REQUIRE(first.Start().ok());
  RaftNode second(Options(dir.path), &sm2);
  Status st = second.Start();
  REQUIRE(!st.ok());
  CHECK(st.code() == Status::Code::kFailedPrecondition);
  CHECK(st.message().find("in use") != std::string::npos);
  CHECK(st.message().find("LOCK") != std::string::npos);
  second.Stop();  // harmless after a failed Start
  first.Stop();
  // The lock goes with the node that held it.
  RaftNode third(Options(dir.path), &sm3);
  REQUIRE(third.Start().ok());
}

TEST_CASE("Start fails cleanly on bad options or a port in use") {
  DirGuard dir{TempDir()};
  RecordingStateMachine sm;
  {
    RaftOptions o = Options(dir.path + "/a");
    o.node_id = 0;
    RaftNode node(o, &sm);
    CHECK(node.Start().code() == Status::Code::kInvalidArgument);
  }
  {
    RaftOptions o = Options(dir.path + "/b");
    o.bootstrap_peers = {{2, "127.0.0.1:1"}};  // does not list this node
    RaftNode node(o, &sm);
    CHECK(node.Start().code() == Status::Code::kInvalidArgument);
  }
  {
    // Someone else listens on the port.
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
    REQUIRE(::listen(fd, 1) == 0);
    socklen_t len = sizeof sa;
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0);
    RaftOptions o = Options(dir.path + "/c");
    o.raft_address = "127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
    RaftNode node(o, &sm);
    Status st = node.Start();
    ::close(fd);
    CHECK(!st.ok());
    CHECK(st.message().find(o.raft_address) != std::string::npos);
    CHECK(st.message().find("address already in use") != std::string::npos);
    // The lock was released: the dir is usable again.
    o.raft_address = "127.0.0.1:0";
    RaftNode retry(o, &sm);
    CHECK(retry.Start().ok());
  }
}

TEST_CASE("Stop completes every pending callback exactly once") {
  DirGuard dir{TempDir()};
  RecordingStateMachine sm;
  RaftNode node(Options(dir.path), &sm);
  REQUIRE(node.Start().ok());
  REQUIRE(WaitFor([&] { return node.IsLeader(); }));

  constexpr int kInFlight = 300;
  std::atomic<int> calls{0}, ok{0}, unavailable{0}, other{0};
  for (int i = 0; i < kInFlight; i++) {
    node.Propose("p" + std::to_string(i), [&](Result<std::string> r) {
      calls++;
      if (r.ok()) {
        ok++;
      } else if (r.status().code() == Status::Code::kUnavailable) {
        unavailable++;
      } else {
        other++;
      }
    });
  }
  std::atomic<int> membership_calls{0};
  node.AddVoter(9, "127.0.0.1:1", [&](Status) { membership_calls++; });
  node.Remove(9, [&](Status) { membership_calls++; });
  node.Stop();
  CHECK(calls == kInFlight);
  CHECK(ok + unavailable == kInFlight);
  CHECK(other == 0);
  CHECK(membership_calls == 2);
}

TEST_CASE("Stop called from a callback on the loop thread") {
  DirGuard dir{TempDir()};
  RecordingStateMachine sm;
  RaftNode node(Options(dir.path), &sm);
  std::promise<void> stopped_from_callback;
  node.SetLeadershipCallback([&](bool is_leader) {
    if (is_leader) {
      node.Stop();  // only requests the shutdown; must not deadlock
      stopped_from_callback.set_value();
    }
  });
  REQUIRE(node.Start().ok());
  auto f = stopped_from_callback.get_future();
  REQUIRE(f.wait_for(kWait) == std::future_status::ready);
  REQUIRE(WaitFor([&] { return !node.Post([] {}); }));
  node.Stop();  // joins the loop thread
  CHECK(!node.IsLeader());
}
