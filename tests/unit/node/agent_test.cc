// Agent::Launch and the paths it creates on behalf of a job: the attempt dir below the data
// dir, the trial dir below the storage path, the trial dir's .staging/attempt_<n>. A
// symlink planted at any of them (pointing at a root-only victim directory) makes the
// launch fail before anything is created, chowned or written there, and the victim is
// unchanged. Also: the staging areas of earlier attempts are removed at launch.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "common/file_util.h"
#include "common/safe_fs.h"
#include "daemon/node/agent.h"
#include "daemon/node/worker_pool.h"
#include "tests/unit/common/tree_snapshot.h"

using namespace traintl;
using namespace traintl::testing;

namespace {

class Recorder : public WorkerPoolListener {
 public:
  void OnWorkerHello(const std::string&, int, int) override {}
  void OnWorkerReport(const std::string&, int, int, const events::Report&) override {}
  void OnWorkerExit(const WorkerExit& e) override { exits.push_back(e); }
  std::vector<WorkerExit> exits;
};

// A daemon's node side: data dir, storage path (shared like /tmp), pool and agent.
struct Node {
  explicit Node(bool as_nobody = false) {
    WorkerPoolOptions o;
    o.worker_binary = TRAINTL_WORKER_PROBE;
    o.stop_grace = std::chrono::milliseconds(200);
    o.term_grace = std::chrono::milliseconds(200);
    if (as_nobody) {
      auto user = LookupWorkerUser("nobody");
      REQUIRE(user.ok());
      o.worker_user = *user;
    }
    pool = std::make_unique<WorkerPool>(io, o, &rec);
    agent = std::make_unique<Agent>(AgentOptions{data_dir + "/data"}, pool.get());
  }
  ~Node() {
    pool->KillAll();
    RemoveAll(data_dir).IgnoreError();
    RemoveAll(storage).IgnoreError();
  }

  NodeAttemptPlan Plan(int attempt = 1) const {
    NodeAttemptPlan p;
    p.job_id = "j1";
    p.job_name = "mnist";
    p.attempt = attempt;
    p.world_ranks = {0};
    p.library_path = "/nonexistent/lib.so";
    p.function = "train";
    p.trial_dir = storage + "/mnist-j1";
    return p;
  }

  void RunUntilExit() {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (rec.exits.empty() && std::chrono::steady_clock::now() < deadline)
      io.run_one_for(std::chrono::milliseconds(50));
    REQUIRE(!rec.exits.empty());
  }

  std::string data_dir = MakeTempDir("agent-data", 0711);
  std::string storage = MakeSharedDir("agent-storage");  // like /tmp
  boost::asio::io_context io;
  Recorder rec;
  std::unique_ptr<WorkerPool> pool;
  std::unique_ptr<Agent> agent;
};

bool Mentions(const Status& st, const std::string& what) {
  return st.message().find(what) != std::string::npos;
}

}  // namespace

TEST_CASE("a launch creates the attempt dir, trial dir and staging dir and starts the ranks") {
  Node node;
  REQUIRE(node.agent->Launch(node.Plan()).ok());
  node.RunUntilExit();
  CHECK(node.rec.exits[0].exit_code == 0);
  CHECK(IsDirectory(node.storage + "/mnist-j1/.staging/attempt_1"));
  CHECK(PathExists(node.agent->AttemptDir("j1", 1) + "/rank_0.context.json"));
  CHECK(PathExists(node.agent->LogPath("j1", 1, 0)));
}

TEST_CASE("a symlink planted at a pending job's trial dir path fails the launch") {
  const bool root = ::geteuid() == 0;
  Node node(/*as_nobody=*/root);  // as root: the setup, --worker-user nobody
  const std::string victim = MakeVictim();
  const std::string before = Snapshot(victim);
  // The trial dir path is predictable: <storage_path>/<name>-<id>.
  REQUIRE(::symlink(victim.c_str(), (node.storage + "/mnist-j1").c_str()) == 0);
  Status st = node.agent->Launch(node.Plan()).status();
  CHECK(st.code() == Status::Code::kPermissionDenied);
  CHECK(Mentions(st, "refusing to follow a symlink at " + node.storage + "/mnist-j1"));
  CHECK(node.agent->LiveWorkers("j1", 1) == 0);
  // Neither created in (.staging), nor chowned to the worker user, nor written.
  CHECK(Snapshot(victim) == before);
  RemoveAll(victim).IgnoreError();
}

TEST_CASE("a symlink planted at a trial dir's .staging fails the launch") {
  const bool root = ::geteuid() == 0;
  Node node(/*as_nobody=*/root);
  const std::string victim = MakeVictim();
  const std::string before = Snapshot(victim);
  // A trial dir from an earlier attempt, given to the worker, which swapped .staging.
  const std::string trial = node.storage + "/mnist-j1";
  REQUIRE(MakeDirs(trial).ok());
  if (root) REQUIRE(::chown(trial.c_str(), kNobodyUid, kNogroupGid) == 0);
  REQUIRE(::symlink(victim.c_str(), (trial + "/.staging").c_str()) == 0);
  Status st = node.agent->Launch(node.Plan(2)).status();
  CHECK(st.code() == Status::Code::kPermissionDenied);
  CHECK(Mentions(st, "refusing to follow a symlink at " + trial + "/.staging"));
  CHECK(node.agent->LiveWorkers("j1", 2) == 0);
  CHECK(Snapshot(victim) == before);
  RemoveAll(victim).IgnoreError();
}

TEST_CASE("a symlink planted at the attempt dir below the data dir fails the launch") {
  Node node;
  const std::string victim = MakeVictim();
  const std::string before = Snapshot(victim);
  REQUIRE(MakeDirs(node.data_dir + "/data/jobs").ok());
  REQUIRE(::symlink(victim.c_str(), (node.data_dir + "/data/jobs/j1").c_str()) == 0);
  Status st = node.agent->Launch(node.Plan()).status();
  CHECK(st.code() == Status::Code::kPermissionDenied);
  CHECK(Mentions(st, "refusing to follow a symlink at " + node.data_dir + "/data/jobs/j1"));
  CHECK(Snapshot(victim) == before);
  // At attempt_<n> itself too.
  REQUIRE(::unlink((node.data_dir + "/data/jobs/j1").c_str()) == 0);
  REQUIRE(MakeDirs(node.data_dir + "/data/jobs/j1").ok());
  REQUIRE(::symlink(victim.c_str(), (node.data_dir + "/data/jobs/j1/attempt_1").c_str()) == 0);
  CHECK(node.agent->Launch(node.Plan()).status().code() == Status::Code::kPermissionDenied);
  CHECK(Snapshot(victim) == before);
  RemoveAll(victim).IgnoreError();
}

TEST_CASE("a trial dir owned by a user other than root or the worker user is refused") {
  if (::geteuid() != 0) {
    WARN("skipped: needs root (chown to nobody)");
    return;
  }
  {
    // No worker user: a trial dir that "nobody" created in /tmp before the job started is
    // a stranger's, and the daemon would otherwise write root's files into it.
    Node node;
    const std::string trial = node.storage + "/mnist-j1";
    REQUIRE(MakeDirs(trial, 0777).ok());
    REQUIRE(::chown(trial.c_str(), kNobodyUid, kNogroupGid) == 0);
    Status st = node.agent->Launch(node.Plan()).status();
    CHECK(st.code() == Status::Code::kPermissionDenied);
    CHECK(Mentions(st, "owned by uid 65534"));
    CHECK(!PathExists(trial + "/.staging"));
  }
  {
    // With --worker-user nobody the same directory is the worker's own: accepted, and the
    // staging dir is given to it.
    Node node(/*as_nobody=*/true);
    const std::string trial = node.storage + "/mnist-j1";
    REQUIRE(MakeDirs(trial, 0755).ok());
    REQUIRE(::chown(trial.c_str(), kNobodyUid, kNogroupGid) == 0);
    REQUIRE(node.agent->Launch(node.Plan()).ok());
    node.RunUntilExit();
    CHECK(node.rec.exits[0].exit_code == 0);
    struct stat st;
    REQUIRE(::stat((trial + "/.staging/attempt_1").c_str(), &st) == 0);
    CHECK(st.st_uid == kNobodyUid);
    // .staging too, so that the head (acting as the worker) can remove ended attempts'.
    REQUIRE(::stat((trial + "/.staging").c_str(), &st) == 0);
    CHECK(st.st_uid == kNobodyUid);
  }
}

TEST_CASE("a directory of root's moved to a job's path is not given to the worker user") {
  if (::geteuid() != 0) {
    WARN("skipped: needs root (chown to nobody)");
    return;
  }
  // nobody renames a root-owned directory (say a locked ~/.ssh) in a storage dir it can
  // write to the pending job's trial dir path, to be handed it at launch.
  Node node(/*as_nobody=*/true);
  const std::string trial = node.storage + "/mnist-j1";
  REQUIRE(MakeDirs(trial, 0755).ok());
  REQUIRE(WriteFileAtomic(trial + "/authorized_keys", "root's", 0644).ok());
  const std::string before = Snapshot(trial);
  Status st = node.agent->Launch(node.Plan()).status();
  CHECK(st.code() == Status::Code::kPermissionDenied);
  CHECK(Mentions(st, "refusing to give " + trial));
  CHECK(Snapshot(trial) == before);
  struct stat sb;
  REQUIRE(::stat(trial.c_str(), &sb) == 0);
  CHECK(sb.st_uid == 0);
  CHECK(node.pool->LivePids().empty());

  // Inside the worker's trial dir, an empty staging dir of root's (a launch died before it
  // gave it away) is made again, not refused forever.
  REQUIRE(RemoveAll(trial).ok());
  REQUIRE(MakeDirs(trial + "/.staging/attempt_1", 0755).ok());
  for (const std::string& dir : {trial, trial + "/.staging"})
    REQUIRE(::chown(dir.c_str(), kNobodyUid, kNogroupGid) == 0);
  REQUIRE(node.agent->Launch(node.Plan()).ok());
  node.RunUntilExit();
  node.rec.exits.clear();
  for (const std::string& dir : {trial + "/.staging", trial + "/.staging/attempt_1"}) {
    REQUIRE(::stat(dir.c_str(), &sb) == 0);
    CHECK(sb.st_uid == kNobodyUid);
  }

  // The same for an empty .staging of root's.
  REQUIRE(RemoveAll(trial).ok());
  REQUIRE(MakeDirs(trial + "/.staging", 0755).ok());
  REQUIRE(::chown(trial.c_str(), kNobodyUid, kNogroupGid) == 0);
  REQUIRE(node.agent->Launch(node.Plan()).ok());
  node.RunUntilExit();
  node.rec.exits.clear();
  REQUIRE(::stat((trial + "/.staging").c_str(), &sb) == 0);
  CHECK(sb.st_uid == kNobodyUid);

  // What the launch makes itself is the worker's at once.
  REQUIRE(RemoveAll(trial).ok());
  REQUIRE(node.agent->Launch(node.Plan()).ok());
  node.RunUntilExit();
  for (const std::string& dir : {trial, trial + "/.staging", trial + "/.staging/attempt_1"}) {
    REQUIRE(::stat(dir.c_str(), &sb) == 0);
    CHECK(sb.st_uid == kNobodyUid);
  }
}

TEST_CASE("a storage path the submitter chose is used with the worker user's access") {
  if (::geteuid() != 0) {
    WARN("skipped: needs root (--worker-user nobody)");
    return;
  }
  Node node(/*as_nobody=*/true);
  // Root's, not writable by nobody: a root daemon would have made the trial dir there.
  const std::string roots = MakeTempDir("agent-roots", 0755);
  NodeAttemptPlan plan = node.Plan();
  plan.trial_dir_as_worker = true;
  plan.trial_dir = roots + "/deeper/mnist-j1";
  Status st = node.agent->Launch(plan).status();
  CHECK(st.code() == Status::Code::kPermissionDenied);
  CHECK(Mentions(st, "making the trial dir as nobody"));
  CHECK_FALSE(PathExists(roots + "/deeper"));
  CHECK(node.pool->LivePids().empty());

  // Where nobody can write (a shared dir like /tmp), it is made, and nobody's from the start.
  plan.trial_dir = node.storage + "/chosen/mnist-j1";
  REQUIRE(node.agent->Launch(plan).ok());
  node.RunUntilExit();
  struct stat sb;
  for (const std::string& dir : {node.storage + "/chosen", plan.trial_dir}) {
    REQUIRE(::stat(dir.c_str(), &sb) == 0);
    CHECK(sb.st_uid == kNobodyUid);
  }
  RemoveAll(roots).IgnoreError();
}

TEST_CASE("launching attempt N removes the staging areas of attempts before N") {
  Node node(/*as_nobody=*/::geteuid() == 0);
  const std::string victim = MakeVictim();
  const std::string before = Snapshot(victim);
  const std::string staging = node.storage + "/mnist-j1/.staging";
  // What two killed daemons left behind, and a link a worker planted among them.
  REQUIRE(MakeDirs(staging + "/attempt_1/seq_0/rank_0").ok());
  REQUIRE(WriteFileAtomic(staging + "/attempt_1/seq_0/rank_0/model.pt", "7 MB").ok());
  REQUIRE(MakeDirs(staging + "/attempt_2/seq_4").ok());
  REQUIRE(::symlink(victim.c_str(), (staging + "/attempt_0").c_str()) == 0);
  REQUIRE(::symlink(victim.c_str(), (staging + "/attempt_2/seq_4/loot").c_str()) == 0);
  REQUIRE(MakeDirs(staging + "/attempt_7").ok());  // not older: kept
  REQUIRE(MakeDirs(staging + "/attempt_x").ok());  // not an attempt: kept
  if (::geteuid() == 0) {  // as the earlier launches left them: the worker's
    for (const std::string& dir : {node.storage + "/mnist-j1", staging})
      REQUIRE(::chown(dir.c_str(), kNobodyUid, kNogroupGid) == 0);
  }
  REQUIRE(node.agent->Launch(node.Plan(3)).ok());
  node.RunUntilExit();
  CHECK(!PathExists(staging + "/attempt_1"));
  CHECK(!PathExists(staging + "/attempt_2"));
  struct stat st;
  CHECK(::lstat((staging + "/attempt_0").c_str(), &st) != 0);  // the link, not its target
  CHECK(IsDirectory(staging + "/attempt_3"));
  CHECK(IsDirectory(staging + "/attempt_7"));
  CHECK(IsDirectory(staging + "/attempt_x"));
  CHECK(Snapshot(victim) == before);
  RemoveAll(victim).IgnoreError();
}

TEST_CASE("RemoveStaleStaging leaves newer attempts and keeps going after an error") {
  const std::string top = MakeTempDir("stale", 0755);
  REQUIRE(MakeDirs(top + "/attempt_1").ok());
  REQUIRE(MakeDirs(top + "/attempt_5").ok());
  REQUIRE(MakeDirs(top + "/attempt_12345678901").ok());  // too long for an attempt number
  auto dir = OpenTrustedDir(top);
  REQUIRE(dir.ok());
  CHECK(Agent::RemoveStaleStaging(*dir, 5).ok());
  CHECK(!PathExists(top + "/attempt_1"));
  CHECK(IsDirectory(top + "/attempt_5"));
  CHECK(IsDirectory(top + "/attempt_12345678901"));
  RemoveAll(top).IgnoreError();
}

TEST_CASE("the node that runs rank 0 chooses the rendezvous port on its own address") {
  Node node;
  NodeAttemptPlan p = node.Plan();
  p.master_addr = "127.0.0.1";
  auto port = node.agent->Launch(p);
  REQUIRE(port.ok());
  CHECK(*port > 0);
  node.RunUntilExit();
  auto ctx = ReadFile(node.agent->AttemptDir("j1", 1) + "/rank_0.context.json");
  REQUIRE(ctx.ok());
  CHECK(nlohmann::json::parse(*ctx)["master_port"] == *port);
  // A port the head chose (rank 0 on the head's node) is kept; a node without rank 0 is
  // never asked to choose.
  NodeAttemptPlan q = node.Plan(2);
  q.master_port = 4242;
  auto kept = node.agent->Launch(q);
  REQUIRE(kept.ok());
  CHECK(*kept == 4242);
  NodeAttemptPlan r = node.Plan(3);
  r.world_ranks = {1};
  r.world_size = 2;
  CHECK(node.agent->Launch(r).status().code() == Status::Code::kInvalidArgument);
}

TEST_CASE("a master port is picked below the kernel's ephemeral range, and is free") {
  auto range = ReadFile("/proc/sys/net/ipv4/ip_local_port_range");
  REQUIRE(range.ok());
  const int low = std::atoi(range->c_str());
  for (int i = 0; i < 20; ++i) {
    const int port = Agent::PickFreePort("127.0.0.1");
    REQUIRE(port > 0);
    if (low - 10000 >= 1000) CHECK(port < low);  // no outgoing connection can take it
    // Free: it binds.
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
    ::close(fd);
  }
}

TEST_CASE("a launch that arrives after the head stopped its attempt is refused") {
  Node node;
  // The head's stop overtook the launch (a library fetch, another thread of its pool).
  node.agent->Stop("j1", 2);
  for (int attempt : {1, 2}) {
    Result<int> late = node.agent->Launch(node.Plan(attempt));
    REQUIRE_FALSE(late.ok());
    CHECK(Mentions(late.status(), "was stopped on this node before its launch arrived"));
  }
  CHECK_FALSE(PathExists(node.agent->AttemptDir("j1", 2)));
  CHECK(node.agent->LiveAttempts().empty());
  // The next attempt starts; a fenced node's stop (the head may still run the attempt)
  // does not refuse a later launch of it.
  REQUIRE(node.agent->Launch(node.Plan(3)).ok());
  node.RunUntilExit();
  node.agent->Stop("j1", 4, /*urgent=*/false, /*final=*/false);
  node.rec.exits.clear();
  REQUIRE(node.agent->Launch(node.Plan(4)).ok());
  node.RunUntilExit();
}

// True when something listens on 127.0.0.1:`port`.
static bool Listening(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

TEST_CASE("an xgboost attempt's tracker goes once no worker of it has run here for a while") {
  Node node;
  NodeAttemptPlan p = node.Plan();
  p.framework = "xgboost";
  p.master_addr = "127.0.0.1";
  auto port = node.agent->Launch(p);
  REQUIRE(port.ok());
  CHECK(Listening(*port));
  node.agent->SweepTrackers(std::chrono::milliseconds(0));  // its worker runs: kept
  CHECK(Listening(*port));
  // The worker exits with no rank ever shutting the tracker down (a job of one rank does
  // not connect to it): it stays for the linger, then goes.
  node.RunUntilExit();
  node.agent->SweepTrackers(std::chrono::seconds(60));
  CHECK(Listening(*port));
  // A print (XGBoost's evaluation lines) goes to rank 0's log.
  {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(*port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    std::string msg;
    auto put_int = [&](int32_t v) { msg.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
    auto put_str = [&](const std::string& v) {
      put_int(static_cast<int32_t>(v.size()));
      msg += v;
    };
    put_int(0xff99);
    put_int(-1);
    put_int(-1);
    put_str("0");
    put_str("print");
    put_str("[0]\ttrain-logloss:0.5\n");
    REQUIRE(::send(fd, msg.data(), msg.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(msg.size()));
    char buf[64];
    while (::recv(fd, buf, sizeof(buf), 0) > 0) {
    }  // the tracker closes it once handled
    ::close(fd);
  }
  auto log = ReadFile(node.agent->LogPath("j1", 1, 0));
  REQUIRE(log.ok());
  CHECK(log->find("[0]\ttrain-logloss:0.5\n") != std::string::npos);
  node.agent->SweepTrackers(std::chrono::milliseconds(0));
  CHECK_FALSE(Listening(*port));
}
