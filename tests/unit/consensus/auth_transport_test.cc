// Tests of the authenticated Raft transport (daemon/consensus/auth_transport.h), through
// RaftNode on loopback and through raw sockets speaking (or failing to speak) its
// handshake.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/file_util.h"
#include "daemon/consensus/raft_node.h"
#include "tests/unit/consensus/raft_test_util.h"

using namespace traintl;

namespace {

constexpr auto kWait = std::chrono::seconds(30);
const std::string kSecret = "0123456789abcdef-cluster-secret";
const std::string kOtherSecret = "fedcba9876543210-another-secret";

class CountingStateMachine : public StateMachine {
 public:
  std::string Apply(const std::string& command) override {
    applied.push_back(command);
    return "ok";
  }
  Result<std::string> Snapshot() override { return std::string(); }
  Status Restore(const std::string&) override { return Status::Ok(); }
  std::vector<std::string> applied;  // loop thread only
};

struct DirGuard {
  std::string path;
  ~DirGuard() { RemoveAll(path).IgnoreError(); }
};

std::string TempDir() {
  char tmpl[] = "/tmp/traintl-raftauth-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  return tmpl;
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

size_t AppliedCount(RaftNode& node, CountingStateMachine& sm) {
  auto r = node.Call([&sm] { return sm.applied.size(); }).get();
  REQUIRE(r.ok());
  return *r;
}

RaftTransportStats Stats(RaftNode& node) {
  auto r = node.TransportStats();
  REQUIRE(r.ok());
  return *r;
}

RaftOptions Options(const std::string& dir, uint64_t id, const std::string& secret) {
  RaftOptions o;
  o.node_id = id;
  o.data_dir = dir;
  o.raft_address = "127.0.0.1:0";
  o.cluster_secret = secret;
  return o;
}

int PortOf(const std::string& address) { return std::stoi(address.substr(address.rfind(':') + 1)); }

// ---- a raw client of the handshake (the test's own encoding of the documented format) ----

int ConnectTo(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  return fd;
}

// Reads exactly n bytes; "" on EOF/error/timeout first.
std::string ReadN(int fd, size_t n) {
  std::string out;
  auto deadline = std::chrono::steady_clock::now() + kWait;
  while (out.size() < n && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    ssize_t r = ::read(fd, buf, std::min(sizeof buf, n - out.size()));
    if (r <= 0) return "";
    out.append(buf, static_cast<size_t>(r));
  }
  return out.size() == n ? out : "";
}

// True when the peer closes the connection (EOF or reset) within kWait.
bool ClosedByPeer(int fd) {
  auto deadline = std::chrono::steady_clock::now() + kWait;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    ssize_t r = ::read(fd, buf, sizeof buf);
    if (r <= 0) return true;
  }
  return false;
}

void WriteAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t w = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (w <= 0) return;  // the peer may already have closed: that is what some tests expect
    off += static_cast<size_t>(w);
  }
}

void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; i++) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::string Hmac(const std::string& key, const std::string& label, const std::string& data) {
  std::string msg = label;
  msg.push_back('\0');
  msg += data;
  unsigned char out[32];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

// The connector's claim for the acceptor's hello `hello` (magic + nonce_a).
std::string Claim(const std::string& secret, const std::string& hello, const std::string& nonce_c,
                  uint64_t id, const std::string& address) {
  std::string nonce_a = hello.substr(8, 32);
  std::string mac_input = nonce_a + nonce_c;
  PutU64(&mac_input, id);
  PutU64(&mac_input, address.size());
  mac_input += address;
  std::string out = nonce_c;
  PutU64(&out, id);
  PutU64(&out, address.size());
  out += address;
  out += Hmac(secret, "traintl raft auth v1 connector", mac_input);
  return out;
}

}  // namespace

TEST_CASE("raft auth: voters sharing the secret elect, replicate and authenticate") {
  DirGuard dir{TempDir()};
  std::vector<RaftPeer> peers;
  for (uint64_t id = 1; id <= 3; id++) peers.push_back({id, raft_testing::FreeLoopbackAddress()});
  CountingStateMachine sms[3];
  std::vector<std::unique_ptr<RaftNode>> nodes;
  for (uint64_t id = 1; id <= 3; id++) {
    RaftOptions o = Options(dir.path + "/n" + std::to_string(id), id, kSecret);
    o.raft_address = peers[id - 1].address;
    o.bootstrap_peers = peers;
    nodes.push_back(std::make_unique<RaftNode>(o, &sms[id - 1]));
  }
  for (auto& n : nodes) REQUIRE(n->Start().ok());
  int leader = -1;
  REQUIRE(WaitFor([&] {
    for (int i = 0; i < 3; i++)
      if (nodes[i]->IsLeader()) leader = i;
    return leader >= 0;
  }));
  for (int i = 0; i < 10; i++) REQUIRE(ProposeSync(*nodes[leader], "c" + std::to_string(i)).ok());
  for (int i = 0; i < 3; i++) CHECK(WaitFor([&] { return AppliedCount(*nodes[i], sms[i]) == 10; }));
  RaftTransportStats s = Stats(*nodes[leader]);
  CHECK(s.connected >= 2);
  CHECK(s.rejected == 0);
  for (auto& n : nodes) n->Stop();
}

TEST_CASE("raft auth: a node with another secret cannot join") {
  DirGuard dir{TempDir()};
  CountingStateMachine leader_sm, intruder_sm;
  RaftNode leader(Options(dir.path + "/leader", 1, kSecret), &leader_sm);
  REQUIRE(leader.Start().ok());
  REQUIRE(WaitFor([&] { return leader.IsLeader(); }));
  RaftOptions io = Options(dir.path + "/intruder", 2, kOtherSecret);
  io.join = true;
  RaftNode intruder(io, &intruder_sm);
  REQUIRE(intruder.Start().ok());

  // The leader tries to bring it in; every connection fails authentication both ways.
  auto added = std::make_shared<std::promise<Status>>();
  leader.AddVoter(2, intruder.address(), [added](Status st) { added->set_value(st); });
  REQUIRE(WaitFor([&] { return Stats(leader).rejected >= 1 && Stats(intruder).rejected >= 1; }));
  for (int i = 0; i < 5; i++) REQUIRE(ProposeSync(leader, "x" + std::to_string(i)).ok());
  CHECK(AppliedCount(intruder, intruder_sm) == 0);
  CHECK(Stats(intruder).accepted == 0);
  auto config = intruder.Configuration();
  REQUIRE(config.ok());
  CHECK(config->empty());  // it never received the configuration
  // The promotion to voter never happened.
  auto leader_config = leader.Configuration();
  REQUIRE(leader_config.ok());
  for (const auto& m : *leader_config) {
    if (m.id == 2) CHECK(m.role != RaftMember::Role::kVoter);
  }
  // C-Raft gives up on the unresponsive promotee; the spare is removed again.
  auto added_future = added->get_future();
  REQUIRE(added_future.wait_for(kWait) == std::future_status::ready);
  Status added_status = added_future.get();
  CHECK(!added_status.ok());
  REQUIRE(WaitFor([&] {
    auto c = leader.Configuration();
    return c.ok() && c->size() == 1;
  }));
  intruder.Stop();
  leader.Stop();
}

TEST_CASE("raft auth: a voter without the secret cannot disturb the group") {
  DirGuard dir{TempDir()};
  std::vector<RaftPeer> peers;
  for (uint64_t id = 1; id <= 3; id++) peers.push_back({id, raft_testing::FreeLoopbackAddress()});
  CountingStateMachine sms[3];
  std::vector<std::unique_ptr<RaftNode>> nodes;
  for (uint64_t id = 1; id <= 3; id++) {
    RaftOptions o =
        Options(dir.path + "/n" + std::to_string(id), id, id == 3 ? kOtherSecret : kSecret);
    o.raft_address = peers[id - 1].address;
    o.bootstrap_peers = peers;
    // Without pre-vote, a member that hears no leader campaigns with ever higher terms:
    // were its RequestVotes delivered, each would depose the leader.
    if (id == 3) o.pre_vote = false;
    nodes.push_back(std::make_unique<RaftNode>(o, &sms[id - 1]));
  }
  for (auto& n : nodes) REQUIRE(n->Start().ok());
  int leader = -1;
  REQUIRE(WaitFor([&] {
    for (int i = 0; i < 2; i++)
      if (nodes[i]->IsLeader()) leader = i;
    return leader >= 0;
  }));
  const uint64_t leader_id = nodes[leader]->id();
  // Let the intruder campaign many times over: its connections keep being refused.
  REQUIRE(WaitFor([&] { return Stats(*nodes[2]).rejected >= 20; }));
  for (int i = 0; i < 10; i++) REQUIRE(ProposeSync(*nodes[leader], "c" + std::to_string(i)).ok());
  CHECK(nodes[leader]->IsLeader());
  CHECK(nodes[1 - leader]->Leader().id == leader_id);
  CHECK(!nodes[2]->IsLeader());
  CHECK(AppliedCount(*nodes[2], sms[2]) == 0);
  CHECK(WaitFor([&] { return AppliedCount(*nodes[1 - leader], sms[1 - leader]) == 10; }));
  CHECK(Stats(*nodes[2]).accepted == 0);
  for (auto& n : nodes) n->Stop();
}

TEST_CASE("raft auth: raw connections without the secret are refused") {
  DirGuard dir{TempDir()};
  CountingStateMachine sm;
  RaftOptions o = Options(dir.path + "/n1", 1, kSecret);
  o.auth_handshake_timeout_ms = 300;
  RaftNode node(o, &sm);
  REQUIRE(node.Start().ok());
  REQUIRE(WaitFor([&] { return node.IsLeader(); }));
  const int port = PortOf(node.address());

  SECTION("C-Raft's own handshake and a message are refused") {
    int fd = ConnectTo(port);
    std::string hello = ReadN(fd, 40);
    REQUIRE(hello.substr(0, 8) == std::string("TRAUTH1\0", 8));
    std::string craft;  // protocol 1, server id 99, address length 16, address
    PutU64(&craft, 1);
    PutU64(&craft, 99);
    PutU64(&craft, 16);
    craft += std::string("127.0.0.1:9\0\0\0\0\0\0", 16);
    craft += std::string(64, 'x');  // a "message"
    WriteAll(fd, craft);
    CHECK(ClosedByPeer(fd));
    ::close(fd);
  }
  SECTION("a claim with the wrong secret is refused") {
    int fd = ConnectTo(port);
    std::string hello = ReadN(fd, 40);
    REQUIRE(hello.size() == 40);
    WriteAll(fd, Claim(kOtherSecret, hello, std::string(32, 'n'), 7, "127.0.0.1:1"));
    CHECK(ClosedByPeer(fd));
    ::close(fd);
  }
  SECTION("a huge address length is refused without waiting for it") {
    int fd = ConnectTo(port);
    REQUIRE(ReadN(fd, 40).size() == 40);
    std::string claim(32, 'n');
    PutU64(&claim, 7);
    PutU64(&claim, uint64_t{1} << 40);
    WriteAll(fd, claim);
    CHECK(ClosedByPeer(fd));
    ::close(fd);
  }
  SECTION("a silent connection is dropped at the handshake deadline") {
    int fd = ConnectTo(port);
    REQUIRE(ReadN(fd, 40).size() == 40);
    CHECK(ClosedByPeer(fd));
    ::close(fd);
  }
  SECTION("the right secret is accepted, and its claim cannot be replayed") {
    int fd = ConnectTo(port);
    std::string hello = ReadN(fd, 40);
    REQUIRE(hello.size() == 40);
    std::string claim = Claim(kSecret, hello, std::string(32, 'n'), 7, "127.0.0.1:1");
    WriteAll(fd, claim);
    std::string proof = ReadN(fd, 40);
    REQUIRE(proof.size() == 40);
    std::string id_bytes;
    PutU64(&id_bytes, 1);
    CHECK(proof.substr(0, 8) == id_bytes);
    std::string mac_input = hello.substr(8, 32) + std::string(32, 'n');
    PutU64(&mac_input, 7);
    PutU64(&mac_input, 1);
    CHECK(proof.substr(8) == Hmac(kSecret, "traintl raft auth v1 acceptor", mac_input));
    ::close(fd);
    // The same claim on a new connection: the acceptor's nonce differs.
    int again = ConnectTo(port);
    REQUIRE(ReadN(again, 40).size() == 40);
    WriteAll(again, claim);
    CHECK(ClosedByPeer(again));
    ::close(again);
  }
  // Whatever happened, the node still leads and commits.
  CHECK(ProposeSync(node, "still-works").ok());
  CHECK(Stats(node).refused_busy == 0);
  node.Stop();
}

TEST_CASE("raft auth: silent connections holding every handshake slot do not keep a member out") {
  DirGuard dir{TempDir()};
  CountingStateMachine sm;
  RaftNode node(Options(dir.path + "/n1", 1, kSecret), &sm);
  REQUIRE(node.Start().ok());
  REQUIRE(WaitFor([&] { return node.IsLeader(); }));
  const int port = PortOf(node.address());
  // More silent connections than there are handshake slots, all from 127.0.0.1 like the
  // members: each read its hello, so all of them were accepted.
  std::vector<int> silent;
  for (int i = 0; i < 200; i++) {
    int fd = ConnectTo(port);
    silent.push_back(fd);
  }
  for (int fd : silent) (void)ReadN(fd, 40);
  // A member connecting now completes its handshake: it takes the oldest silent
  // connection's slot instead of being refused.
  int fd = ConnectTo(port);
  std::string hello = ReadN(fd, 40);
  REQUIRE(hello.size() == 40);
  WriteAll(fd, Claim(kSecret, hello, std::string(32, 'm'), 7, "127.0.0.1:1"));
  CHECK(ReadN(fd, 40).size() == 40);
  ::close(fd);
  CHECK(Stats(node).refused_busy == 0);
  for (int s : silent) ::close(s);
  CHECK(ProposeSync(node, "still-works").ok());
  node.Stop();
}

TEST_CASE(
    "raft auth: a connection that sends no claim is dropped long before the handshake "
    "timeout") {
  DirGuard dir{TempDir()};
  CountingStateMachine sm;
  RaftOptions o = Options(dir.path + "/n1", 1, kSecret);
  o.auth_handshake_timeout_ms = 30000;
  RaftNode node(o, &sm);
  REQUIRE(node.Start().ok());
  REQUIRE(WaitFor([&] { return node.IsLeader(); }));
  int fd = ConnectTo(PortOf(node.address()));
  REQUIRE(ReadN(fd, 40).size() == 40);
  const auto start = std::chrono::steady_clock::now();
  CHECK(ClosedByPeer(fd));
  // The claim deadline (1 s), not the 30 s handshake time.
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  ::close(fd);
  node.Stop();
}

TEST_CASE("raft auth: a follower flooded with silent connections still elects a new leader") {
  DirGuard dir{TempDir()};
  std::vector<RaftPeer> peers;
  for (uint64_t id = 1; id <= 3; id++) peers.push_back({id, raft_testing::FreeLoopbackAddress()});
  CountingStateMachine sms[3];
  std::vector<std::unique_ptr<RaftNode>> nodes;
  for (uint64_t id = 1; id <= 3; id++) {
    RaftOptions o = Options(dir.path + "/n" + std::to_string(id), id, kSecret);
    o.raft_address = peers[id - 1].address;
    o.bootstrap_peers = peers;
    nodes.push_back(std::make_unique<RaftNode>(o, &sms[id - 1]));
  }
  for (auto& n : nodes) REQUIRE(n->Start().ok());
  int leader = -1;
  REQUIRE(WaitFor([&] {
    for (int i = 0; i < 3; i++)
      if (nodes[i]->IsLeader()) leader = i;
    return leader >= 0;
  }));
  REQUIRE(ProposeSync(*nodes[leader], "before").ok());
  // Hold 200 silent connections open to each follower, replacing each one it closes.
  std::atomic<bool> stop{false};
  std::vector<std::thread> flooders;
  for (int i = 0; i < 3; i++) {
    if (i == leader) continue;
    const std::string& address = peers[i].address;
    const int port = PortOf(address);
    in_addr ip{};
    REQUIRE(::inet_pton(AF_INET, address.substr(0, address.rfind(':')).c_str(), &ip) == 1);
    flooders.emplace_back([port, ip, &stop] {
      std::vector<int> fds(200, -1);
      while (!stop) {
        for (int& fd : fds) {
          if (fd >= 0) {
            pollfd p{fd, POLLIN, 0};
            char buf[64];
            if (::poll(&p, 1, 0) > 0 && ::recv(fd, buf, sizeof buf, MSG_DONTWAIT) == 0) {
              ::close(fd);
              fd = -1;
            }
          }
          if (fd < 0) {
            fd = ::socket(AF_INET, SOCK_STREAM, 0);
            sockaddr_in sa{};
            sa.sin_family = AF_INET;
            sa.sin_port = htons(static_cast<uint16_t>(port));
            sa.sin_addr = ip;
            if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
              ::close(fd);
              fd = -1;
            }
          }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      for (int fd : fds)
        if (fd >= 0) ::close(fd);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  nodes[leader]->Stop();
  // The followers must connect to each other (new connections) to elect a leader. An
  // election takes well under a second here; the flood held it off for 5 s and more.
  int next = -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  while (next < 0 && std::chrono::steady_clock::now() < deadline) {
    for (int i = 0; i < 3; i++)
      if (i != leader && nodes[i]->IsLeader()) next = i;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const bool elected = next >= 0;
  bool committed = elected && ProposeSync(*nodes[next], "after").ok();
  stop = true;
  for (auto& t : flooders) t.join();
  CHECK(elected);
  CHECK(committed);
  for (int i = 0; i < 3; i++)
    if (i != leader) nodes[i]->Stop();
}

TEST_CASE("raft auth: a short cluster secret is refused at start") {
  DirGuard dir{TempDir()};
  CountingStateMachine sm;
  RaftNode node(Options(dir.path + "/n1", 1, "short"), &sm);
  Status st = node.Start();
  CHECK(st.code() == Status::Code::kInvalidArgument);
}

TEST_CASE("raft auth: no secret is refused on a non-loopback address") {
  DirGuard dir{TempDir()};
  CountingStateMachine sm;
  RaftOptions o = Options(dir.path + "/n1", 1, "");
  o.raft_address = "10.1.2.3:7451";
  RaftNode node(o, &sm);
  Status st = node.Start();
  CHECK(st.code() == Status::Code::kPermissionDenied);
  CHECK(st.message().find("cluster secret") != std::string::npos);
}
