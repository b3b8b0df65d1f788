// Helpers of the RaftNode tests (raft_node_test.cc, raft_lifecycle_test.cc,
// raft_cluster_test.cc): a toy StateMachine that records what it applies, temp dirs,
// options for loopback nodes and synchronous wrappers of the callback API.
//
// Thread-safety: RecordingStateMachine is used on the node's loop thread only; the
// functions may be called from any test thread.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/file_util.h"
#include "daemon/consensus/raft_node.h"
#include "daemon/consensus/state_machine.h"

namespace traintl::raft_testing {

// Generous bounds so that a wedged node fails the test instead of hanging it; they are
// not timing assertions.
inline constexpr auto kWait = std::chrono::seconds(30);

// Records applied commands in order. Apply's result is "applied:<n>" (n = 1-based count);
// a command "fail" yields a result that says so, as a real FSM reports invalid commands;
// "disk-full" throws StateWriteError, as the real store does when its disk is full.
class RecordingStateMachine : public StateMachine {
 public:
  std::string Apply(const std::string& command) override {
    if (command == "disk-full") throw StateWriteError("sqlite: database or disk is full");
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

inline std::string TempDir() {
  char tmpl[] = "/tmp/traintl-consensus-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  return tmpl;
}

// Removes the directory when the test ends, however it ends.
struct DirGuard {
  std::string path;
  ~DirGuard() { RemoveAll(path).IgnoreError(); }
};

// "127.a.b.c:port": a random address of 127.0.0.0/8 outside 127.0.0.0/16 and a port free
// on it now, for a cluster member to bind later. A port picked on 127.0.0.1 could be taken
// before then by the connections and listeners of tests running beside this one (ctest
// -j); none of them binds this address.
inline std::string FreeLoopbackAddress() {
  static std::mt19937 rng(std::random_device{}());
  const uint32_t host = (127u << 24) |
                        (std::uniform_int_distribution<uint32_t>(1, 0xfe)(rng) << 16) |
                        (std::uniform_int_distribution<uint32_t>(0, 0xff)(rng) << 8) |
                        std::uniform_int_distribution<uint32_t>(1, 0xfe)(rng);
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(host);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  socklen_t len = sizeof sa;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0);
  ::close(fd);
  char ip[INET_ADDRSTRLEN] = {};
  REQUIRE(::inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip) != nullptr);
  return std::string(ip) + ":" + std::to_string(ntohs(sa.sin_port));
}

inline RaftOptions Options(const std::string& dir, uint64_t id = 1) {
  RaftOptions o;
  o.node_id = id;
  o.data_dir = dir;
  o.raft_address = "127.0.0.1:0";
  return o;
}

inline bool WaitFor(const std::function<bool()>& pred) {
  auto deadline = std::chrono::steady_clock::now() + kWait;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

inline Result<std::string> ProposeSync(RaftNode& node, std::string command) {
  auto promise = std::make_shared<std::promise<Result<std::string>>>();
  auto future = promise->get_future();
  node.Propose(std::move(command), [promise](Result<std::string> r) { promise->set_value(r); });
  if (future.wait_for(kWait) != std::future_status::ready) {
    return Status::Internal("test: proposal never completed");
  }
  return future.get();
}

inline Status StatusSync(const std::function<void(RaftNode::StatusCallback)>& op) {
  auto promise = std::make_shared<std::promise<Status>>();
  auto future = promise->get_future();
  op([promise](Status st) { promise->set_value(st); });
  if (future.wait_for(kWait) != std::future_status::ready) {
    return Status::Internal("test: operation never completed");
  }
  return future.get();
}

inline std::vector<std::string> Applied(RaftNode& node, RecordingStateMachine& sm) {
  auto r = node.Call([&sm] { return sm.applied; }).get();
  REQUIRE(r.ok());
  return *r;
}

}  // namespace traintl::raft_testing
