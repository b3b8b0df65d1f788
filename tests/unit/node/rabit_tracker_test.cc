// RabitTracker: the tracker of XGBoost 1.7's rabit collective.
//
// The topology (ComputeRabitLinkMap) against maps computed once by the reference,
// xgboost 1.7.4's tracker.py (RabitTracker.get_link_map), pasted below. The protocol with
// scripted clients on raw sockets: rank, parent, neighbours and ring of each worker, task
// ids that name ranks, the good-set/bad-set negotiation (peers to connect to, a retry after
// a failed connect), the end after every rank's shutdown, and every kind of misbehaving
// client dropped without harm to the rest. Then the real libxgboost: xgb_collective_probe
// processes (one rabit communicator each; it is a process-wide singleton) run init,
// allreduce (tree and ring), print and finalize against the tracker, for several world
// sizes, after garbage clients, beside a second tracker, and while the tracker stops.
#include "daemon/node/rabit_tracker.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "common/file_util.h"

extern char** environ;

using namespace traintl;
using namespace std::chrono_literals;

namespace {

using SteadyClock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------
// The reference's topology.

struct ExpectedMap {
  int n;
  std::vector<std::vector<int>> tree;
  std::vector<int> parent;
  std::vector<std::pair<int, int>> ring;
};

// /usr/bin/python3 -c: RabitTracker.get_link_map(n) of xgboost 1.7.4, n as listed.
const std::vector<ExpectedMap> kReferenceMaps = {
    {1, {{}}, {-1}, {{0, 0}}},
    {2, {{1}, {0}}, {-1, 0}, {{1, 1}, {0, 0}}},
    {3, {{1, 2}, {0}, {0}}, {-1, 0, 0}, {{2, 1}, {0, 2}, {1, 0}}},
    {4, {{1, 3}, {0, 2}, {1}, {0}}, {-1, 0, 1, 0}, {{3, 1}, {0, 2}, {1, 3}, {2, 0}}},
    {5,
     {{1, 4}, {0, 2, 3}, {1}, {1}, {0}},
     {-1, 0, 1, 1, 0},
     {{4, 1}, {0, 2}, {1, 3}, {2, 4}, {3, 0}}},
    {6,
     {{1, 5}, {0, 2, 3}, {1}, {1}, {5}, {0, 4}},
     {-1, 0, 1, 1, 5, 0},
     {{5, 1}, {0, 2}, {1, 3}, {2, 4}, {3, 5}, {4, 0}}},
    {7,
     {{1, 6}, {0, 2, 3}, {1}, {1}, {6}, {6}, {0, 5, 4}},
     {-1, 0, 1, 1, 6, 6, 0},
     {{6, 1}, {0, 2}, {1, 3}, {2, 4}, {3, 5}, {4, 6}, {5, 0}}},
    {8,
     {{1, 7}, {0, 2, 4}, {1, 3}, {2}, {1}, {7}, {7}, {0, 6, 5}},
     {-1, 0, 1, 2, 1, 7, 7, 0},
     {{7, 1}, {0, 2}, {1, 3}, {2, 4}, {3, 5}, {4, 6}, {5, 7}, {6, 0}}},
    {9,
     {{1, 8}, {0, 2, 5}, {1, 4, 3}, {2}, {2}, {1}, {8}, {8}, {0, 7, 6}},
     {-1, 0, 1, 2, 2, 1, 8, 8, 0},
     {{8, 1}, {0, 2}, {1, 3}, {2, 4}, {3, 5}, {4, 6}, {5, 7}, {6, 8}, {7, 0}}},
    {12,
     {{1, 11},
      {0, 2, 7},
      {1, 4, 3},
      {2},
      {2},
      {7},
      {7},
      {1, 6, 5},
      {11},
      {10},
      {11, 9},
      {0, 10, 8}},
     {-1, 0, 1, 2, 2, 7, 7, 1, 11, 10, 11, 0},
     {{11, 1},
      {0, 2},
      {1, 3},
      {2, 4},
      {3, 5},
      {4, 6},
      {5, 7},
      {6, 8},
      {7, 9},
      {8, 10},
      {9, 11},
      {10, 0}}},
    {16,
     {{1, 15},
      {0, 2, 8},
      {1, 5, 3},
      {2},
      {5},
      {2, 4},
      {8},
      {8},
      {1, 7, 6},
      {15, 10, 11},
      {9},
      {9},
      {14},
      {14},
      {15, 13, 12},
      {0, 14, 9}},
     {-1, 0, 1, 2, 5, 2, 8, 8, 1, 15, 9, 9, 14, 14, 15, 0},
     {{15, 1},
      {0, 2},
      {1, 3},
      {2, 4},
      {3, 5},
      {4, 6},
      {5, 7},
      {6, 8},
      {7, 9},
      {8, 10},
      {9, 11},
      {10, 12},
      {11, 13},
      {12, 14},
      {13, 15},
      {14, 0}}},
};

// ---------------------------------------------------------------------------------------
// A scripted client on a raw socket. Every receive is bounded, so a broken tracker fails
// the test instead of hanging it.

constexpr int32_t kMagic = 0xff99;

class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    const int one = 1;  // a message is several small sends
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~RawClient() { Close(); }

  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  void SendRaw(const std::string& bytes) {
    REQUIRE(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(bytes.size()));
  }
  // As SendRaw, but the tracker may drop the connection meanwhile.
  void SendWhatever(const std::string& bytes) {
    (void)::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  }
  void SendInt(int32_t v) { SendRaw(std::string(reinterpret_cast<const char*>(&v), sizeof(v))); }
  void SendStr(const std::string& s) {
    SendInt(static_cast<int32_t>(s.size()));
    SendRaw(s);
  }

  // False when the tracker closed the connection or sent nothing within 5 s.
  bool RecvAll(void* buf, size_t n) {
    char* p = static_cast<char*>(buf);
    const auto deadline = SteadyClock::now() + 5s;
    while (n > 0) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
      pollfd pfd{fd_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) {
        return false;
      }
      const ssize_t got = ::recv(fd_, p, n, 0);
      if (got <= 0) return false;
      p += got;
      n -= static_cast<size_t>(got);
    }
    return true;
  }
  int32_t RecvInt() {
    int32_t v = 0;
    REQUIRE(RecvAll(&v, sizeof(v)));
    return v;
  }
  std::string RecvStr() {
    const int32_t len = RecvInt();
    REQUIRE(len >= 0);
    REQUIRE(len < 4096);
    std::string s(static_cast<size_t>(len), '\0');
    REQUIRE(RecvAll(s.data(), s.size()));
    return s;
  }

  // Magic (echoed), rank, world size, task id and command.
  void Header(int32_t rank, int32_t world_size, const std::string& task_id,
              const std::string& cmd) {
    SendInt(kMagic);
    REQUIRE(RecvInt() == kMagic);
    SendInt(rank);
    SendInt(world_size);
    SendStr(task_id);
    SendStr(cmd);
  }

  // True when the tracker closes the connection (EOF or reset) within `timeout`.
  bool ClosedWithin(std::chrono::milliseconds timeout) {
    const auto deadline = SteadyClock::now() + timeout;
    char buf[256];
    while (true) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
      pollfd pfd{fd_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) {
        return false;
      }
      if (::recv(fd_, buf, sizeof(buf), 0) <= 0) return true;
    }
  }

 private:
  int fd_ = -1;
};

// What a start gets before the negotiation.
struct Assignment {
  int rank, parent, world;
  std::set<int> tree;
  int prev, next;
};

Assignment ReadAssignment(RawClient& c) {
  Assignment a;
  a.rank = c.RecvInt();
  a.parent = c.RecvInt();
  a.world = c.RecvInt();
  const int n = c.RecvInt();
  REQUIRE(n >= 0);
  REQUIRE(n <= 3);
  for (int i = 0; i < n; ++i) a.tree.insert(c.RecvInt());
  a.prev = c.RecvInt();
  a.next = c.RecvInt();
  return a;
}

struct Peer {
  std::string host;
  int port;
  int rank;
  bool operator==(const Peer& o) const {
    return std::tie(host, port, rank) == std::tie(o.host, o.port, o.rank);
  }
};

struct Instructions {
  std::vector<Peer> connect;
  int accept = 0;
};

// Sends the good set; reads which peers to connect to and how many will connect.
Instructions SendGoodSet(RawClient& c, const std::vector<int>& good) {
  c.SendInt(static_cast<int32_t>(good.size()));
  for (int r : good) c.SendInt(r);
  Instructions in;
  const int nconn = c.RecvInt();
  in.accept = c.RecvInt();
  REQUIRE(nconn >= 0);
  REQUIRE(nconn <= 3);
  for (int i = 0; i < nconn; ++i) {
    Peer p;
    p.host = c.RecvStr();
    p.port = c.RecvInt();
    p.rank = c.RecvInt();
    in.connect.push_back(p);
  }
  return in;
}

// Task `rank` starts, gets that rank, names no good link (nobody listens yet, or it
// accepts them all) and listens on `listen_port`; the tracker then closes it.
void NegotiateAlone(int port, int rank, int listen_port) {
  RawClient w(port);
  w.Header(-1, -1, std::to_string(rank), "start");
  CHECK(ReadAssignment(w).rank == rank);
  SendGoodSet(w, {});
  w.SendInt(0);
  w.SendInt(listen_port);
  CHECK(w.ClosedWithin(5s));
}

// A connection whose whole message is its header (print, shutdown); waits until the
// tracker has handled it (closed it), so that the next one is handled after it.
void OneShot(int port, int rank, const std::string& cmd, const std::string& message = "") {
  RawClient c(port);
  c.Header(rank, -1, "NULL", cmd);
  if (cmd == "print") c.SendStr(message);
  REQUIRE(c.ClosedWithin(5s));
}

// Collects the workers' print messages.
struct Prints {
  void Add(const std::string& m) {
    std::lock_guard<std::mutex> lock(mu);
    messages.push_back(m);
  }
  std::vector<std::string> Get() {
    std::lock_guard<std::mutex> lock(mu);
    return messages;
  }
  std::mutex mu;
  std::vector<std::string> messages;
};

std::unique_ptr<RabitTracker> StartTracker(int num_workers, Prints* prints = nullptr,
                                           std::chrono::milliseconds io_timeout = 10s) {
  RabitTrackerOptions o;
  o.num_workers = num_workers;
  o.io_timeout = io_timeout;
  if (prints != nullptr) o.on_print = [prints](const std::string& m) { prints->Add(m); };
  auto t = RabitTracker::Start(std::move(o));
  REQUIRE(t.ok());
  REQUIRE((*t)->port() > 0);
  return std::move(t).value();
}

// ---------------------------------------------------------------------------------------
// Real rabit workers: xgb_collective_probe processes.

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/traintl-rabit-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() { RemoveAll(path).IgnoreError(); }
  std::string path;
};

struct ProbeRun {
  pid_t pid = -1;
  std::string task_id;
  std::string log_path;
  bool exited = false;
  int status = 0;
  std::string output;

  bool ok() const { return exited && WIFEXITED(status) && WEXITSTATUS(status) == 0; }
  // From the probe's "rank R world W" line; -1s when absent.
  std::pair<int, int> RankWorld() const {
    int rank = -1, world = -1;
    const std::string text = "\n" + output;
    const size_t at = text.find("\nrank ");
    if (at != std::string::npos)
      std::sscanf(text.c_str() + at, "\nrank %d world %d", &rank, &world);
    return {rank, world};
  }
  bool initialized() const { return RankWorld().first >= 0; }
};

// Starts probes and reaps them; the destructor kills any still running.
class Probes {
 public:
  Probes() = default;
  Probes(const Probes&) = delete;
  Probes& operator=(const Probes&) = delete;
  ~Probes() {
    for (ProbeRun& p : runs_) {
      if (p.exited) continue;
      ::kill(p.pid, SIGKILL);
      ::waitpid(p.pid, &p.status, 0);
    }
  }

  // Runs one worker against 127.0.0.1:port as `task_id`.
  void Spawn(int port, const std::string& task_id, const std::string& connect_retry = "5") {
#ifdef TRAINTL_XGB_PROBE
    ProbeRun p;
    p.task_id = task_id;
    p.log_path = dir_.path + "/probe-" + std::to_string(runs_.size()) + ".log";
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, p.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    std::vector<std::string> args = {TRAINTL_XGB_PROBE, std::to_string(port), task_id,
                                     connect_retry};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    // The test's own environment, less any DMLC_* setting that would override the config;
    // one OpenMP thread each, the machine is small.
    std::vector<std::string> env_strings = {"OMP_NUM_THREADS=1"};
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "DMLC_", 5) != 0 && std::strncmp(*e, "OMP_NUM_THREADS=", 16) != 0) {
        env_strings.emplace_back(*e);
      }
    }
    std::vector<char*> envp;
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    const int rc = ::posix_spawn(&p.pid, argv[0], &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    REQUIRE(rc == 0);
    runs_.push_back(p);
#else
    (void)port;
    (void)task_id;
    (void)connect_retry;
    FAIL("built without xgboost");
#endif
  }

  // Reaps every probe that exits within `timeout`; true when all did.
  bool WaitAll(std::chrono::milliseconds timeout) {
    const auto deadline = SteadyClock::now() + timeout;
    while (true) {
      bool all = true;
      for (ProbeRun& p : runs_) {
        if (p.exited) continue;
        if (::waitpid(p.pid, &p.status, WNOHANG) == p.pid) {
          p.exited = true;
          auto text = ReadFile(p.log_path);
          if (text.ok()) p.output = *text;
        } else {
          all = false;
        }
      }
      if (all) return true;
      if (SteadyClock::now() >= deadline) return false;
      std::this_thread::sleep_for(20ms);
    }
  }

  const std::vector<ProbeRun>& runs() const { return runs_; }

  std::string Outputs() const {
    std::string all;
    for (const ProbeRun& p : runs_) {
      all += "--- task " + p.task_id + " (exited " + std::to_string(p.exited) + ", status " +
             std::to_string(p.status) + ")\n" + p.output;
    }
    return all;
  }

 private:
  TempDir dir_;
  std::vector<ProbeRun> runs_;
};

// Without libxgboost the tests that need it say so and pass.
bool HaveXgboost() {
#ifdef TRAINTL_XGB_PROBE
  return true;
#else
  WARN("libxgboost (xgboost/c_api.h, libxgboost.so) not found at configure time: skipped");
  return false;
#endif
}

// Runs `n` probes, task ids n-1 down to 0 (so that arrival order says nothing about rank),
// and checks that each got the rank its task id names, the sums, the prints and the end.
void RunWorld(int n) {
  Prints prints;
  auto tracker = StartTracker(n, &prints);
  Probes probes;
  for (int i = n - 1; i >= 0; --i) probes.Spawn(tracker->port(), std::to_string(i));
  const bool all_exited = probes.WaitAll(120s);
  INFO(probes.Outputs());
  REQUIRE(all_exited);
  for (const ProbeRun& p : probes.runs()) {
    CHECK(p.ok());
    CHECK(p.RankWorld() == std::make_pair(std::stoi(p.task_id), n));
    CHECK(p.output.find("ok\n") != std::string::npos);
  }
  CHECK(tracker->WaitFinished(10s));
  CHECK(tracker->finished());
  std::vector<std::string> got = prints.Get();
  std::sort(got.begin(), got.end());
  std::vector<std::string> want;
  for (int r = 0; r < n; ++r) want.push_back("hello from rank " + std::to_string(r));
  std::sort(want.begin(), want.end());
  CHECK(got == want);
}

}  // namespace

// ---------------------------------------------------------------------------------------

TEST_CASE("rabit tracker: the link map is the reference's get_link_map", "[rabit_tracker]") {
  for (const ExpectedMap& want : kReferenceMaps) {
    INFO("n = " << want.n);
    const RabitLinkMap got = ComputeRabitLinkMap(want.n);
    CHECK(got.tree == want.tree);
    CHECK(got.parent == want.parent);
    CHECK(got.ring == want.ring);
  }
}

TEST_CASE("rabit tracker: the link map is a tree and a ring over every rank", "[rabit_tracker]") {
  for (int n = 1; n <= 64; ++n) {
    INFO("n = " << n);
    const RabitLinkMap m = ComputeRabitLinkMap(n);
    REQUIRE(static_cast<int>(m.tree.size()) == n);
    int edges = 0;
    for (int r = 0; r < n; ++r) {
      CHECK(m.ring[r] == std::make_pair((r + n - 1) % n, (r + 1) % n));
      if (r == 0) {
        CHECK(m.parent[r] == -1);
      } else {
        REQUIRE(!m.tree[r].empty());
        CHECK(m.tree[r][0] == m.parent[r]);  // parent first
      }
      for (int v : m.tree[r]) {
        const auto& back = m.tree[v];
        CHECK(std::count(back.begin(), back.end(), r) == 1);  // symmetric
        ++edges;
      }
    }
    CHECK(edges == 2 * (n - 1));  // a tree
  }
}

TEST_CASE("rabit tracker: options are checked", "[rabit_tracker]") {
  RabitTrackerOptions o;
  o.num_workers = 0;
  CHECK(RabitTracker::Start(o).status().code() == Status::Code::kInvalidArgument);
  o.num_workers = 2;
  o.host = "localhost";  // a literal is required
  CHECK(RabitTracker::Start(o).status().code() == Status::Code::kInvalidArgument);
  o.host = "127.0.0.1";
  o.io_timeout = 0ms;
  CHECK(RabitTracker::Start(o).status().code() == Status::Code::kInvalidArgument);
  o.io_timeout = 1s;
  auto first = RabitTracker::Start(o);
  REQUIRE(first.ok());
  o.port = (*first)->port();  // taken
  CHECK(RabitTracker::Start(o).status().code() == Status::Code::kUnavailable);
  o.host = "::1";
  o.port = 0;
  auto v6 = RabitTracker::Start(o);
  if (v6.ok()) CHECK((*v6)->port() > 0);  // where the machine has IPv6 loopback
}

TEST_CASE("rabit tracker: scripted workers get the reference's ranks, links and peers",
          "[rabit_tracker]") {
  Prints prints;
  auto tracker = StartTracker(3, &prints);
  const int port = tracker->port();
  // n = 3: tree 0-{1,2}, ring 0 -> 1 -> 2 -> 0.

  // Rank 1 first (its task id names it): nobody listens yet, so both its links connect to
  // it later.
  RawClient w1(port);
  w1.Header(-1, -1, "1", "start");
  Assignment a1 = ReadAssignment(w1);
  CHECK(a1.rank == 1);
  CHECK(a1.parent == 0);
  CHECK(a1.world == 3);
  CHECK(a1.tree == std::set<int>{0});
  CHECK(a1.prev == 0);
  CHECK(a1.next == 2);
  Instructions i1 = SendGoodSet(w1, {});
  CHECK(i1.connect.empty());
  CHECK(i1.accept == 2);
  w1.SendInt(0);  // no failed connect
  w1.SendInt(7001);
  CHECK(w1.ClosedWithin(5s));

  // Rank 2 connects to rank 1; its first connect "fails", so it negotiates again.
  RawClient w2(port);
  w2.Header(-1, -1, "2", "start");
  Assignment a2 = ReadAssignment(w2);
  CHECK(a2.rank == 2);
  CHECK(a2.parent == 0);
  CHECK(a2.tree == std::set<int>{0});
  CHECK(a2.prev == 1);
  CHECK(a2.next == 0);
  for (int attempt = 0; attempt < 2; ++attempt) {
    Instructions i2 = SendGoodSet(w2, {});
    CHECK(i2.connect == std::vector<Peer>{{"127.0.0.1", 7001, 1}});
    CHECK(i2.accept == 1);
    w2.SendInt(attempt == 0 ? 1 : 0);
  }
  w2.SendInt(7002);
  CHECK(w2.ClosedWithin(5s));

  // Rank 1 still awaits rank 0: its shutdown now is a protocol error, and is not counted.
  OneShot(port, 1, "shutdown");

  // Rank 0 claims a link it was never given: dropped. Its rank stays its task id's.
  {
    RawClient bad(port);
    bad.Header(-1, -1, "0", "start");
    CHECK(ReadAssignment(bad).rank == 0);
    bad.SendInt(1);
    bad.SendInt(5);
    CHECK(bad.ClosedWithin(5s));
  }
  RawClient w0(port);
  w0.Header(-1, -1, "0", "start");
  Assignment a0 = ReadAssignment(w0);
  CHECK(a0.rank == 0);
  CHECK(a0.parent == -1);
  CHECK(a0.tree == std::set<int>{1, 2});
  CHECK(a0.prev == 2);
  CHECK(a0.next == 1);
  Instructions i0 = SendGoodSet(w0, {});
  CHECK(i0.connect == std::vector<Peer>{{"127.0.0.1", 7001, 1}, {"127.0.0.1", 7002, 2}});
  CHECK(i0.accept == 0);
  w0.SendInt(0);
  w0.SendInt(7000);
  CHECK(w0.ClosedWithin(5s));

  // A start once every rank is taken has no rank to get.
  {
    RawClient extra(port);
    extra.Header(-1, -1, "NULL", "start");
    CHECK(extra.ClosedWithin(5s));
  }
  {
    RawClient taken(port);
    taken.Header(-1, -1, "banana", "start");
    CHECK(taken.ClosedWithin(5s));
  }

  OneShot(port, 0, "print", "  hello tracker \n");
  OneShot(port, 7, "shutdown");  // out of range
  OneShot(port, 0, "shutdown");
  OneShot(port, 2, "shutdown");
  OneShot(port, 2, "shutdown");               // twice
  CHECK_FALSE(tracker->WaitFinished(300ms));  // rank 1's early shutdown did not count
  OneShot(port, 1, "shutdown");
  CHECK(tracker->WaitFinished(5s));
  CHECK(prints.Get() == std::vector<std::string>{"hello tracker"});
}

TEST_CASE("rabit tracker: task ids that are not ranks are assigned as a batch", "[rabit_tracker]") {
  for (auto sort_by : {RabitTrackerOptions::SortBy::kHost, RabitTrackerOptions::SortBy::kTask}) {
    RabitTrackerOptions o;
    o.num_workers = 4;
    o.sort_by = sort_by;
    auto started = RabitTracker::Start(o);
    REQUIRE(started.ok());
    auto tracker = std::move(started).value();
    // "zeta" and "alpha" wait for the batch; "2" takes rank 2 at once; "NULL" completes the
    // batch of three pending workers for ranks 0, 1, 3.
    RawClient zeta(tracker->port());
    zeta.Header(-1, -1, "zeta", "start");
    RawClient alpha(tracker->port());
    alpha.Header(-1, -1, "alpha", "start");
    RawClient two(tracker->port());
    two.Header(-1, -1, "2", "start");
    CHECK(ReadAssignment(two).rank == 2);
    SendGoodSet(two, {});
    two.SendInt(0);
    two.SendInt(7002);
    RawClient null(tracker->port());
    null.Header(-1, -1, "NULL", "start");
    // One host: by host the arrival order stays (stable sort); by task, "NULL" < "alpha"
    // < "zeta" (byte order).
    std::vector<RawClient*> order = {&zeta, &alpha, &null};
    if (sort_by == RabitTrackerOptions::SortBy::kTask) order = {&null, &alpha, &zeta};
    const int want[] = {0, 1, 3};
    for (int k = 0; k < 3; ++k) {
      INFO("k = " << k);
      // Each is negotiated in turn: the next gets its rank once this one is done.
      CHECK(ReadAssignment(*order[k]).rank == want[k]);
      SendGoodSet(*order[k], {});
      order[k]->SendInt(0);
      order[k]->SendInt(7100 + k);
    }
    // A restart of task "alpha" gets alpha's rank again.
    RawClient again(tracker->port());
    again.Header(-1, -1, "alpha", "start");
    CHECK(ReadAssignment(again).rank == 1);
  }
}

TEST_CASE("rabit tracker: misbehaving clients are dropped and the tracker carries on",
          "[rabit_tracker]") {
  auto tracker = StartTracker(1, nullptr, 400ms);
  const int port = tracker->port();

  RawClient stuck(port);  // magic only, then silence
  stuck.SendInt(kMagic);
  const auto stuck_since = SteadyClock::now();

  {
    RawClient wrong(port);
    wrong.SendInt(0x1234);
    CHECK(wrong.ClosedWithin(5s));
  }
  {
    RawClient garbage(port);
    garbage.SendRaw(std::string(1000, '\xab'));
    CHECK(garbage.ClosedWithin(5s));
  }
  {
    RawClient huge(port);  // a task id of 2 GiB
    huge.SendInt(kMagic);
    huge.SendInt(-1);
    huge.SendInt(-1);
    huge.SendInt(0x7fffffff);
    CHECK(huge.ClosedWithin(5s));
  }
  {
    RawClient unknown(port);
    unknown.Header(-1, -1, "NULL", "launch");
    CHECK(unknown.ClosedWithin(5s));
  }
  {
    RawClient half(port);  // closes mid-header
    half.SendInt(kMagic);
    half.SendInt(-1);
    half.SendInt(3);
  }
  {
    RawClient early(port);  // recover before any start
    early.Header(3, -1, "NULL", "recover");
    CHECK(early.ClosedWithin(5s));
  }
  {
    RawClient left(port);  // starts, then leaves before its negotiation ends
    left.Header(-1, -1, "0", "start");
    CHECK(ReadAssignment(left).rank == 0);
  }
  {
    RawClient slow(port);  // silent mid-negotiation
    slow.Header(-1, -1, "0", "start");
    CHECK(ReadAssignment(slow).rank == 0);
    CHECK(slow.ClosedWithin(5s));
  }
  CHECK(stuck.ClosedWithin(5s));
  CHECK(SteadyClock::now() - stuck_since >= 350ms);

  // A well-behaved worker still gets through.
  RawClient w(port);
  w.Header(-1, -1, "0", "start");
  Assignment a = ReadAssignment(w);
  CHECK(a.rank == 0);
  CHECK(a.world == 1);
  CHECK(a.tree.empty());
  CHECK(a.prev == -1);
  CHECK(a.next == -1);
  Instructions in = SendGoodSet(w, {});
  CHECK(in.connect.empty());
  CHECK(in.accept == 0);
  w.SendInt(0);
  w.SendInt(7000);
  CHECK(w.ClosedWithin(5s));
  CHECK_FALSE(tracker->finished());
  OneShot(port, 0, "shutdown");
  CHECK(tracker->WaitFinished(5s));
}

TEST_CASE("rabit tracker: connections that hoard bytes are dropped past the budget",
          "[rabit_tracker]") {
  RabitTrackerOptions o;
  o.num_workers = 1;
  o.max_buffered_total = 8 << 20;
  auto started = RabitTracker::Start(o);
  REQUIRE(started.ok());
  auto tracker = std::move(*started);
  const int port = tracker->port();
  // Each sends a complete header (it then waits its turn, reading nothing more) and 3 MiB
  // the protocol has no place for: under the per-connection 4 MiB, over the budget by the
  // third. Without the budget, 4096 of them held 16 GiB.
  RawClient w(port);  // a well-behaved worker, negotiating while they hoard
  w.Header(-1, -1, "0", "start");
  Assignment a = ReadAssignment(w);
  CHECK(a.rank == 0);
  std::vector<std::unique_ptr<RawClient>> hoarders;
  for (int i = 0; i < 4; ++i) {
    hoarders.push_back(std::make_unique<RawClient>(port));
    hoarders.back()->Header(-1, -1, "NULL", "print");
    hoarders.back()->SendStr("waiting its turn");
  }
  for (auto& h : hoarders) h->SendWhatever(std::string(3 << 20, 'x'));
  int dropped = 0;
  for (auto& h : hoarders) dropped += h->ClosedWithin(1s) ? 1 : 0;
  CHECK(dropped >= 2);
  // The worker still finishes.
  SendGoodSet(w, {});
  w.SendInt(0);
  w.SendInt(7000);
  OneShot(port, 0, "shutdown");
  CHECK(tracker->WaitFinished(10s));
}

TEST_CASE("rabit tracker: a client cannot hold the negotiation, take a rank or end the tracker",
          "[rabit_tracker]") {
  Prints prints;
  auto tracker = StartTracker(2, &prints);
  const int port = tracker->port();
  // Another world size than the job's: dropped (the reference let the first start set it).
  {
    RawClient wrong(port);
    wrong.Header(-1, 65536, "NULL", "start");
    CHECK(wrong.ClosedWithin(5s));
  }
  // A shutdown of a rank that never got its links does not count.
  OneShot(port, 0, "shutdown");
  OneShot(port, 1, "shutdown");
  CHECK_FALSE(tracker->WaitFinished(200ms));
  // Rank 1 negotiates (it is to accept rank 0); a client then renegotiates rank 0 for
  // ever, "failing" every connect: dropped after 64 rounds, reading nothing all along.
  NegotiateAlone(port, 1, 7001);
  {
    RawClient spin(port);
    spin.Header(-1, -1, "0", "start");
    CHECK(ReadAssignment(spin).rank == 0);
    std::string rounds;
    for (int i = 0; i < 200; ++i) {
      const int32_t round[] = {0, 1};  // no good link; one failed connect
      rounds.append(reinterpret_cast<const char*>(round), sizeof(round));
    }
    spin.SendWhatever(rounds);
    CHECK(spin.ClosedWithin(5s));
  }
  // A start for rank 1, which a worker holds: dropped; a recover of it is served.
  {
    RawClient steal(port);
    steal.Header(1, -1, "thief", "start");
    CHECK(steal.ClosedWithin(5s));
  }
  {
    RawClient recover(port);
    recover.Header(1, -1, "1", "recover");
    CHECK(ReadAssignment(recover).rank == 1);
    CHECK(SendGoodSet(recover, {}).accept == 1);
    recover.SendInt(0);
    recover.SendInt(7011);
    CHECK(recover.ClosedWithin(5s));
  }
  // A long print is cut.
  OneShot(port, 0, "print", std::string(10000, 'p'));
  // The real rank 0 still gets through, and the tracker ends.
  RawClient w0(port);
  w0.Header(-1, -1, "0", "start");
  CHECK(ReadAssignment(w0).rank == 0);
  Instructions i0 = SendGoodSet(w0, {});
  CHECK(i0.connect == std::vector<Peer>{{"127.0.0.1", 7011, 1}});
  w0.SendInt(0);
  w0.SendInt(7000);
  CHECK(w0.ClosedWithin(5s));
  OneShot(port, 0, "shutdown");
  OneShot(port, 1, "shutdown");
  CHECK(tracker->WaitFinished(5s));
  REQUIRE(prints.Get().size() == 1);
  CHECK(prints.Get()[0].size() < 4200);
  CHECK(prints.Get()[0].find("cut at 4096 bytes") != std::string::npos);
}

TEST_CASE("rabit tracker: a worker's protocol error is passed on, garbage is not",
          "[rabit_tracker]") {
  Prints errors;
  RabitTrackerOptions o;
  o.num_workers = 2;
  o.on_error = [&errors](const std::string& m) { errors.Add(m); };
  auto started = RabitTracker::Start(o);
  REQUIRE(started.ok());
  auto tracker = std::move(started).value();
  {
    RawClient garbage(tracker->port());
    garbage.SendRaw(std::string(64, '\xab'));
    CHECK(garbage.ClosedWithin(5s));
  }
  {
    RawClient wrong(tracker->port());
    wrong.Header(-1, 3, "1", "start");
    CHECK(wrong.ClosedWithin(5s));
  }
  REQUIRE(errors.Get().size() == 1);
  CHECK(errors.Get()[0].find("world size 3 differs from the job's 2") != std::string::npos);
  CHECK(errors.Get()[0].find("task 1") != std::string::npos);
}

TEST_CASE("rabit tracker: one connection per rank waits for its negotiation, the latest",
          "[rabit_tracker]") {
  auto tracker = StartTracker(2);
  const int port = tracker->port();
  NegotiateAlone(port, 1, 7001);
  RawClient busy(port);  // negotiating, silent: the others queue behind it
  busy.Header(-1, -1, "0", "start");
  CHECK(ReadAssignment(busy).rank == 0);
  RawClient first(port);
  first.Header(1, -1, "1", "recover");
  RawClient second(port);
  second.Header(1, -1, "1", "recover");
  busy.Close();
  CHECK(first.ClosedWithin(5s));  // superseded
  CHECK(ReadAssignment(second).rank == 1);
}

TEST_CASE("rabit tracker: Stop returns promptly mid-handshake, and is idempotent",
          "[rabit_tracker]") {
  auto tracker = StartTracker(2);
  RawClient mid(tracker->port());
  mid.SendInt(kMagic);
  RawClient pending(tracker->port());
  pending.Header(-1, -1, "NULL", "start");
  std::this_thread::sleep_for(100ms);
  const auto t0 = SteadyClock::now();
  tracker->Stop();
  CHECK(SteadyClock::now() - t0 < 1s);
  CHECK(mid.ClosedWithin(1s));
  CHECK(pending.ClosedWithin(1s));
  CHECK_FALSE(tracker->finished());
  CHECK_FALSE(tracker->WaitFinished(10ms));
  tracker->Stop();
}

// ---------------------------------------------------------------------------------------
// The real libxgboost.

TEST_CASE("rabit tracker: xgboost workers get the ranks their task ids name",
          "[rabit_tracker][xgboost]") {
  if (!HaveXgboost()) return;
  const int n = GENERATE(1, 2, 3, 4, 5, 7);
  INFO("n = " << n);
  RunWorld(n);
}

TEST_CASE("rabit tracker: xgboost workers without rank task ids get every rank once",
          "[rabit_tracker][xgboost]") {
  if (!HaveXgboost()) return;
  auto tracker = StartTracker(3);
  Probes probes;
  for (const char* task : {"worker-a", "worker-b", "worker-c"}) {
    probes.Spawn(tracker->port(), task);
  }
  const bool all_exited = probes.WaitAll(120s);
  INFO(probes.Outputs());
  REQUIRE(all_exited);
  std::set<int> ranks;
  for (const ProbeRun& p : probes.runs()) {
    CHECK(p.ok());
    CHECK(p.RankWorld().second == 3);
    ranks.insert(p.RankWorld().first);
  }
  CHECK(ranks == std::set<int>{0, 1, 2});
  CHECK(tracker->WaitFinished(10s));
}

TEST_CASE("rabit tracker: garbage clients do not break a following xgboost run",
          "[rabit_tracker][xgboost]") {
  if (!HaveXgboost()) return;
  Prints prints;
  auto tracker = StartTracker(3, &prints, 500ms);
  const int port = tracker->port();
  RawClient stuck(port);  // stays silent mid-header while the workers run
  stuck.SendInt(kMagic);
  stuck.SendInt(-1);
  {
    RawClient wrong(port);
    wrong.SendInt(0x4242);
    CHECK(wrong.ClosedWithin(5s));
  }
  {
    RawClient half(port);
    half.SendInt(kMagic);
    half.SendInt(-1);
  }
  {
    RawClient garbage(port);
    garbage.SendRaw("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(garbage.ClosedWithin(5s));
  }
  Probes probes;
  for (int r : {2, 0, 1}) probes.Spawn(port, std::to_string(r));
  const bool all_exited = probes.WaitAll(120s);
  INFO(probes.Outputs());
  REQUIRE(all_exited);
  for (const ProbeRun& p : probes.runs()) {
    CHECK(p.ok());
    CHECK(p.RankWorld() == std::make_pair(std::stoi(p.task_id), 3));
  }
  CHECK(tracker->WaitFinished(10s));
  CHECK(stuck.ClosedWithin(5s));
  CHECK(prints.Get().size() == 3);
}

TEST_CASE("rabit tracker: a restarted attempt's tracker works beside the failed one's",
          "[rabit_tracker][xgboost]") {
  if (!HaveXgboost()) return;
  // Attempt 1: one of its two workers never came; its tracker still holds the other.
  auto first = StartTracker(2);
  Probes stranded;
  stranded.Spawn(first->port(), "w0", "1");  // pending: waits on the tracker for a peer
  // Attempt 2 runs to the end meanwhile, on its own port.
  auto second = StartTracker(2);
  CHECK(second->port() != first->port());
  Probes probes;
  probes.Spawn(second->port(), "1");
  probes.Spawn(second->port(), "0");
  const bool all_exited = probes.WaitAll(120s);
  INFO(probes.Outputs());
  REQUIRE(all_exited);
  for (const ProbeRun& p : probes.runs()) {
    CHECK(p.ok());
    CHECK(p.RankWorld() == std::make_pair(std::stoi(p.task_id), 2));
  }
  CHECK(second->WaitFinished(10s));
  CHECK_FALSE(first->finished());
  // Attempt 1 is given up: its worker fails instead of waiting on.
  first->Stop();
  const bool stranded_exited = stranded.WaitAll(60s);
  INFO(stranded.Outputs());
  REQUIRE(stranded_exited);
  CHECK_FALSE(stranded.runs()[0].ok());
  CHECK_FALSE(stranded.runs()[0].initialized());
}

TEST_CASE("rabit tracker: Stop while xgboost workers connect returns promptly and they fail",
          "[rabit_tracker][xgboost]") {
  if (!HaveXgboost()) return;
  auto tracker = StartTracker(4);
  Probes probes;
  // Three of four workers, their task ids no ranks: they wait on the tracker for the batch
  // that the fourth would complete. (A worker whose negotiation is over waits on its peers,
  // not on the tracker: stopping the tracker cannot reach it.)
  for (const char* task : {"a", "b", "c"}) probes.Spawn(tracker->port(), task, "1");
  RawClient mid(tracker->port());  // a handshake under way too
  mid.SendInt(kMagic);
  std::this_thread::sleep_for(1500ms);
  const auto t0 = SteadyClock::now();
  tracker->Stop();
  CHECK(SteadyClock::now() - t0 < 1s);
  const bool all_exited = probes.WaitAll(60s);
  INFO(probes.Outputs());
  CHECK(all_exited);
  for (const ProbeRun& p : probes.runs()) {
    CHECK_FALSE(p.ok());
    CHECK_FALSE(p.initialized());
    CHECK(p.output.find("error init") != std::string::npos);  // a C API error, not exit()
  }
  CHECK(mid.ClosedWithin(1s));
}
