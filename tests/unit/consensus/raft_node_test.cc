// Tests of RaftNode on loopback with real C-Raft, real disks (temp dirs) and a toy
// StateMachine that records every applied command.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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

using namespace traintl;

namespace {

// Generous bounds so that a wedged node fails the test instead of hanging it; they are
// not timing assertions.
constexpr auto kWait = std::chrono::seconds(30);

// Records applied commands in order. Apply's result is "applied:<n>" (n = 1-based count);
// a command "fail" yields a result that says so, as a real FSM reports invalid commands.
class RecordingStateMachine : public StateMachine {
 public:
  std::string Apply(const std::string& command) override {
    applied.push_back(command);
    if (command == "fail") return "error: rejected";
    return "applied:" + std::to_string(applied.size());
  }
  Result<std::string> Snapshot() override {
    snapshots++;
    std::string out;
    for (const std::string& c : applied) {
      uint32_t n = static_cast<uint32_t>(c.size());
      out.append(reinterpret_cast<const char*>(&n), 4);
      out += c;
    }
    return out;
  }
  Status Restore(const std::string& snapshot) override {
    restores++;
    std::vector<std::string> parsed;
    size_t pos = 0;
    while (pos < snapshot.size()) {
      if (snapshot.size() - pos < 4) return Status::Internal("truncated snapshot");
      uint32_t n = 0;
      std::memcpy(&n, snapshot.data() + pos, 4);
      pos += 4;
      if (snapshot.size() - pos < n) return Status::Internal("truncated snapshot");
      parsed.push_back(snapshot.substr(pos, n));
      pos += n;
    }
    applied = std::move(parsed);
    return Status::Ok();
  }

  // Loop thread only (read through RaftNode::Call).
  std::vector<std::string> applied;
  int snapshots = 0;
  int restores = 0;
};

std::string TempDir() {
  char tmpl[] = "/tmp/traintl-consensus-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  return tmpl;
}

// Removes the directory when the test ends, however it ends.
struct DirGuard {
  std::string path;
  ~DirGuard() { RemoveAll(path); }
};

int FreeLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  socklen_t len = sizeof sa;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0);
  ::close(fd);
  return ntohs(sa.sin_port);
}

RaftOptions Options(const std::string& dir, uint64_t id = 1) {
  RaftOptions o;
  o.node_id = id;
  o.data_dir = dir;
  o.raft_address = "127.0.0.1:0";
  return o;
}

bool WaitFor(const std::function<bool()>& pred) {
  auto deadline = std::chrono::steady_clock::now() + kWait;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

Result<std::string> ProposeSync(RaftNode& node, std::string command) {
  auto promise = std::make_shared<std::promise<Result<std::string>>>();
  auto future = promise->get_future();
  node.Propose(std::move(command), [promise](Result<std::string> r) { promise->set_value(r); });
  if (future.wait_for(kWait) != std::future_status::ready) {
    return Status::Internal("test: proposal never completed");
  }
  return future.get();
}

Status StatusSync(const std::function<void(RaftNode::StatusCallback)>& op) {
  auto promise = std::make_shared<std::promise<Status>>();
  auto future = promise->get_future();
  op([promise](Status st) { promise->set_value(st); });
  if (future.wait_for(kWait) != std::future_status::ready) {
    return Status::Internal("test: operation never completed");
  }
  return future.get();
}

std::vector<std::string> Applied(RaftNode& node, RecordingStateMachine& sm) {
  auto r = node.Call([&sm] { return sm.applied; }).get();
  REQUIRE(r.ok());
  return *r;
}

}  // namespace

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

TEST_CASE("three voters elect a leader, replicate, redirect and fail over") {
  DirGuard dir{TempDir()};
  std::vector<RaftPeer> peers;
  for (uint64_t id = 1; id <= 3; id++) {
    peers.push_back({id, "127.0.0.1:" + std::to_string(FreeLoopbackPort())});
  }
  RecordingStateMachine sms[3];
  std::vector<std::unique_ptr<RaftNode>> nodes;
  for (uint64_t id = 1; id <= 3; id++) {
    RaftOptions o = Options(dir.path + "/n" + std::to_string(id), id);
    o.raft_address = peers[id - 1].address;
    o.bootstrap_peers = peers;
    nodes.push_back(std::make_unique<RaftNode>(o, &sms[id - 1]));
  }
  for (auto& n : nodes) REQUIRE(n->Start().ok());

  auto leader_index = [&](int excluded) {
    int found = -1;
    for (int i = 0; i < 3; i++) {
      if (i == excluded || !nodes[i]->IsLeader()) continue;
      if (found != -1) return -2;  // two ready leaders at once (only transiently possible)
      found = i;
    }
    return found;
  };
  int leader = -1;
  REQUIRE(WaitFor([&] {
    leader = leader_index(-1);
    return leader >= 0;
  }));

  // Pipelined odd-length commands: followers receive multi-entry AppendEntries.
  std::vector<std::string> commands;
  for (int i = 0; i < 40; i++)
    commands.push_back(std::string(i % 13, 'a' + i % 26) + "#" + std::to_string(i));
  std::vector<std::promise<Result<std::string>>> promises(commands.size());
  for (size_t i = 0; i < commands.size(); i++) {
    nodes[leader]->Propose(commands[i],
                           [&, i](Result<std::string> r) { promises[i].set_value(r); });
  }
  for (auto& p : promises) {
    auto f = p.get_future();
    REQUIRE(f.wait_for(kWait) == std::future_status::ready);
    REQUIRE(f.get().ok());
  }
  for (int i = 0; i < 3; i++) {
    CHECK(WaitFor([&] { return Applied(*nodes[i], sms[i]) == commands; }));
  }

  // A follower does not forward; it names the leader.
  int follower = (leader + 1) % 3;
  REQUIRE(WaitFor([&] { return nodes[follower]->Leader().id == uint64_t(leader + 1); }));
  auto redirected = ProposeSync(*nodes[follower], "on-follower");
  REQUIRE(!redirected.ok());
  CHECK(redirected.status().code() == Status::Code::kUnavailable);
  CHECK(redirected.status().message() ==
        "not leader; leader is " + std::to_string(leader + 1) + " at " + peers[leader].address);

  // Fail-over: the old leader stops, one of the other two takes over.
  nodes[leader]->Stop();
  int old_leader = leader;
  REQUIRE(WaitFor([&] {
    leader = leader_index(old_leader);
    return leader >= 0;
  }));
  CHECK(leader != old_leader);
  // The new leader may still be confirming its term; retry "not leader" answers.
  Result<std::string> r = Status::Unavailable("not tried");
  REQUIRE(WaitFor([&] {
    r = ProposeSync(*nodes[leader], "after-failover");
    return r.ok();
  }));
  CHECK(*r == "applied:" + std::to_string(commands.size() + 1));
  commands.push_back("after-failover");
  for (int i = 0; i < 3; i++) {
    if (i == old_leader) continue;
    CHECK(WaitFor([&] { return Applied(*nodes[i], sms[i]) == commands; }));
  }
  for (auto& n : nodes) n->Stop();
}

TEST_CASE("membership: add a joining voter, transfer leadership, remove") {
  DirGuard dir{TempDir()};
  RecordingStateMachine sm1, sm2;
  RaftNode n1(Options(dir.path + "/n1", 1), &sm1);
  RaftOptions o2 = Options(dir.path + "/n2", 2);
  o2.join = true;
  RaftNode n2(o2, &sm2);
  REQUIRE(n1.Start().ok());
  REQUIRE(n2.Start().ok());
  REQUIRE(WaitFor([&] { return n1.IsLeader(); }));
  REQUIRE(ProposeSync(n1, "before-join").ok());

  // Only the leader changes membership.
  Status st = StatusSync([&](auto done) { n2.AddVoter(3, "127.0.0.1:1", done); });
  CHECK(st.code() == Status::Code::kUnavailable);
  CHECK(st.message().rfind("not leader", 0) == 0);

  REQUIRE(StatusSync([&](auto done) { n1.AddVoter(2, n2.address(), done); }).ok());
  // Adding it again is a no-op; another address for the same id is refused.
  CHECK(StatusSync([&](auto done) { n1.AddVoter(2, n2.address(), done); }).ok());
  CHECK(StatusSync([&](auto done) { n1.AddVoter(2, "127.0.0.1:1", done); }).code() ==
        Status::Code::kAlreadyExists);
  auto conf = n1.Configuration();
  REQUIRE(conf.ok());
  REQUIRE(conf->size() == 2);
  for (const RaftMember& m : *conf) CHECK(m.role == RaftMember::Role::kVoter);

  REQUIRE(ProposeSync(n1, "after-join").ok());
  std::vector<std::string> expected = {"before-join", "after-join"};
  CHECK(WaitFor([&] { return Applied(n2, sm2) == expected; }));

  REQUIRE(StatusSync([&](auto done) { n1.TransferLeadership(2, done); }).ok());
  REQUIRE(WaitFor([&] { return n2.IsLeader(); }));
  CHECK(WaitFor([&] { return !n1.IsLeader() && n1.Leader().id == 2; }));
  REQUIRE(ProposeSync(n2, "on-new-leader").ok());

  CHECK(StatusSync([&](auto done) { n2.Remove(7, done); }).code() == Status::Code::kNotFound);
  REQUIRE(StatusSync([&](auto done) { n2.Remove(1, done); }).ok());
  conf = n2.Configuration();
  REQUIRE(conf.ok());
  REQUIRE(conf->size() == 1);
  CHECK((*conf)[0].id == 2);
  REQUIRE(ProposeSync(n2, "alone").ok());
  n1.Stop();
  n2.Stop();
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

TEST_CASE("a follower that fell behind catches up through a snapshot") {
  DirGuard dir{TempDir()};
  std::vector<RaftPeer> peers;
  for (uint64_t id = 1; id <= 3; id++) {
    peers.push_back({id, "127.0.0.1:" + std::to_string(FreeLoopbackPort())});
  }
  auto options = [&](uint64_t id) {
    RaftOptions o = Options(dir.path + "/n" + std::to_string(id), id);
    o.raft_address = peers[id - 1].address;
    o.bootstrap_peers = peers;
    o.snapshot_threshold = 16;
    o.snapshot_trailing = 4;
    return o;
  };
  RecordingStateMachine sms[3];
  std::vector<std::unique_ptr<RaftNode>> nodes;
  for (uint64_t id = 1; id <= 3; id++) {
    nodes.push_back(std::make_unique<RaftNode>(options(id), &sms[id - 1]));
    REQUIRE(nodes.back()->Start().ok());
  }
  int leader = -1;
  REQUIRE(WaitFor([&] {
    for (int i = 0; i < 3; i++) {
      if (nodes[i]->IsLeader()) leader = i;
    }
    return leader >= 0;
  }));
  std::vector<std::string> commands;
  auto propose_batch = [&](int n) {
    std::vector<std::promise<Result<std::string>>> promises(n);
    for (int i = 0; i < n; i++) {
      commands.push_back("c" + std::to_string(commands.size()) + std::string(i % 5, '.'));
      nodes[leader]->Propose(commands.back(),
                             [&promises, i](Result<std::string> r) { promises[i].set_value(r); });
    }
    for (auto& p : promises) {
      auto f = p.get_future();
      REQUIRE(f.wait_for(kWait) == std::future_status::ready);
      REQUIRE(f.get().ok());
    }
  };
  propose_batch(10);
  int lagging = (leader + 1) % 3;
  REQUIRE(WaitFor([&] { return Applied(*nodes[lagging], sms[lagging]) == commands; }));
  nodes[lagging]->Stop();
  propose_batch(80);
  // C-Raft snapshots at most one at a time, after each batch of applied entries; a second
  // snapshot proves that the first (at index >= 90) was stored and the log before it
  // compacted, so the lagging node's next entry (13) is gone from the leader.
  for (int i = 0; i < 20; i++) REQUIRE(ProposeSync(*nodes[leader], "seq" + std::to_string(i)).ok());
  for (int i = 0; i < 20; i++) commands.push_back("seq" + std::to_string(i));
  REQUIRE(WaitFor([&] {
    auto taken = nodes[leader]->Call([&] { return sms[leader].snapshots; }).get();
    return taken.ok() && *taken >= 2;
  }));

  // A fresh state machine on the old dir: restored from its own snapshot/log, then from the
  // leader's snapshot and entries.
  RecordingStateMachine rejoined;
  RaftNode again(options(lagging + 1), &rejoined);
  REQUIRE(again.Start().ok());
  CHECK(WaitFor([&] { return Applied(again, rejoined) == commands; }));
  auto restores = again.Call([&] { return rejoined.restores; }).get();
  REQUIRE(restores.ok());
  CHECK(*restores >= 1);
  again.Stop();
  for (auto& n : nodes) n->Stop();
}
