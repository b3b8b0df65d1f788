// JobManager's scheduling passes against an FSM applied directly (no Raft, no workers):
// what a queue of thousands of waiting jobs costs in commands.
#include <stdlib.h>

#include <boost/asio.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "daemon/head/command_log.h"
#include "daemon/head/job_manager.h"
#include "daemon/node/agent.h"
#include "daemon/node/worker_pool.h"
#include "daemon/state/fsm.h"
#include "daemon/state/state_store.h"

using namespace traintl;
using nlohmann::json;

namespace {

// Applies every command to the FSM at once and answers on the io_context, as the Raft
// log does after a commit; counts the commands by op.
class FsmLog : public CommandLog {
 public:
  FsmLog(boost::asio::io_context& io, Fsm* fsm) : io_(io), fsm_(fsm) {}
  void Propose(std::string command, std::function<void(Result<json>)> done) override {
    const std::string op = json::parse(command).at("op").get<std::string>();
    ops[op]++;
    if (auto it = refuse.find(op); it != refuse.end() && it->second.first > 0) {
      --it->second.first;
      Status st = it->second.second;
      boost::asio::post(io_, [done, st] { done(st); });
      return;
    }
    std::string result = fsm_->Apply(command);
    boost::asio::post(io_, [done, result] { done(cmd::DecodeAnswerText(result)); });
  }
  std::map<std::string, int> ops;
  // op -> (how many more to refuse, with what), as a Raft node does that is not the leader
  // any more or whose disk is full.
  std::map<std::string, std::pair<int, Status>> refuse;

 private:
  boost::asio::io_context& io_;
  Fsm* const fsm_;
};

// The pool exists before the JobManager it reports to.
struct ForwardingListener : WorkerPoolListener {
  void OnWorkerHello(const std::string& job_id, int attempt, int rank) override {
    target->OnWorkerHello(job_id, attempt, rank);
  }
  void OnWorkerReport(const std::string& job_id, int attempt, int rank,
                      const events::Report& report) override {
    target->OnWorkerReport(job_id, attempt, rank, report);
  }
  void OnWorkerExit(const WorkerExit& exit) override { target->OnWorkerExit(exit); }
  WorkerPoolListener* target = nullptr;
};

std::string TempDir() {
  char tmpl[] = "/tmp/traintl-jm-XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  return tmpl;
}

// A leading head on one node with `cpus` CPUs whose workers cannot start, over an FSM
// applied directly; its scratch directory goes with it.
struct IdleHead {
  explicit IdleHead(double cpus, const Clock* clock = nullptr)
      : fsm(&store),
        log(io, &fsm),
        dir(TempDir()),
        pool(io, PoolOptions(), nullptr),
        agent(AgentOpts(dir), &pool),
        jobs(io, HeadOptions(dir, cpus, clock), &store, &log, &agent) {
    jobs.SetHead(true);
    jobs.Start();
  }
  ~IdleHead() {
    jobs.Shutdown();
    std::filesystem::remove_all(dir);
  }

  static WorkerPoolOptions PoolOptions() {
    WorkerPoolOptions o;
    o.worker_binary = "/nonexistent/traintl-worker";  // nothing may start here
    return o;
  }
  static AgentOptions AgentOpts(const std::string& dir) {
    AgentOptions o;
    o.data_dir = dir;
    return o;
  }
  static JobManagerOptions HeadOptions(const std::string& dir, double cpus,
                                       const Clock* clock = nullptr) {
    JobManagerOptions o;
    o.clock = clock;
    o.node_id = "n1";
    o.default_storage_path = dir + "/storage";
    o.node_resources = {{"CPU", cpus}};
    o.tick = std::chrono::milliseconds(5);
    return o;
  }

  boost::asio::io_context io;
  StateStore store;
  Fsm fsm;
  FsmLog log;
  const std::string dir;
  WorkerPool pool;
  Agent agent;
  JobManager jobs;
};

}  // namespace

TEST_CASE("a long queue of waiting jobs: their reasons in few commands, none per job") {
  IdleHead head(0.5);  // every job below waits for 1 CPU
  auto& io = head.io;
  auto& store = head.store;
  auto& log = head.log;
  auto& jobs = head.jobs;

  auto spec = ParseJobSpecText(R"({"name": "wait", "entrypoint": {"library": "/x.so"}})");
  REQUIRE(spec.ok());
  const int kJobs = 3000;
  int submitted = 0;
  for (int i = 0; i < kJobs; ++i) {
    JobManager::Submission sub;
    sub.spec = *spec;
    sub.library_path = "/x.so";
    sub.submission_id = "s" + std::to_string(i);
    jobs.Submit(sub, [&](Result<std::string> id) { submitted += id.ok(); });
  }
  // Every submission answered (a bounded wait: a sanitizer build takes seconds for the
  // first pass over 3000 jobs, which runs before the answers), then enough passes for
  // every job to be looked at, several times over.
  for (int i = 0; i < 600 && submitted < kJobs; ++i) io.run_for(std::chrono::milliseconds(100));
  io.run_for(std::chrono::milliseconds(500));
  CHECK(submitted == kJobs);
  const auto active = store.ListActiveJobs(/*with_spec=*/false);
  REQUIRE(active.size() == static_cast<size_t>(kJobs));
  for (const auto& job : active) {
    CHECK(job.state == kJobPending);
    CHECK(job.pending_reason.find("CPU: 1 needed, 0.5 free") != std::string::npos);
  }
  CHECK(log.ops["submit_job"] == kJobs);
  CHECK(log.ops.count("set_pending_reason") == 0);
  CHECK(log.ops.count("start_attempt") == 0);
  // The reasons took a handful of commands (one per pass that saw new jobs), and passes
  // that changed nothing proposed nothing.
  const int reason_commands = log.ops["set_pending_reasons"];
  CHECK(reason_commands >= 1);
  CHECK(reason_commands <= 10);
  io.restart();
  io.run_for(std::chrono::milliseconds(100));
  CHECK(log.ops["set_pending_reasons"] == reason_commands);
}

TEST_CASE("a PENDING job without a definition this version can run fails with the reason") {
  IdleHead head(4);
  auto& io = head.io;
  auto& store = head.store;
  auto& fsm = head.fsm;
  auto& log = head.log;
  const std::string& dir = head.dir;
  // As an older version might have stored it: an s3:// dataset, which this version refuses.
  JobRecord job;
  job.id = "old123";
  job.name = "old";
  job.trial_dir = dir + "/storage/old";
  job.submitted_at = commands::NowMs();
  job.spec = R"({"name": "old", "entrypoint": {"library": "/x.so"},
      "datasets": {"train": {"uri": "s3://data/train.csv"}}})";
  // No definition: the builder, like the decoder of an old entry, makes none of a spec this
  // release refuses.
  REQUIRE(json::parse(fsm.Apply(commands::SubmitJob(job, "old-sub")))["ok"] == true);
  CHECK(store.GetJob("old123")->definition.empty());
  for (int i = 0; i < 100 && store.GetJob("old123")->state == kJobPending; ++i) {
    io.run_for(std::chrono::milliseconds(20));
  }
  auto stored = store.GetJob("old123");
  CHECK(stored->state == kJobFailed);
  CHECK(stored->message.find("this version of traintl cannot run the job") != std::string::npos);
  CHECK(stored->message.find("older release") != std::string::npos);
  CHECK(log.ops["fail_pending_job"] == 1);
  CHECK(log.ops.count("start_attempt") == 0);
}

TEST_CASE("a job that waited starts once the attempt before it ended and freed its CPU") {
  boost::asio::io_context io;
  StateStore store;
  Fsm fsm(&store);
  FsmLog log(io, &fsm);
  const std::string dir = TempDir();
  ForwardingListener forward;
  WorkerPoolOptions pool_opts;
  pool_opts.worker_binary = "/bin/false";  // every rank exits 1 at once
  pool_opts.drain_timeout = std::chrono::milliseconds(50);
  WorkerPool pool(io, pool_opts, &forward);
  AgentOptions agent_opts;
  agent_opts.data_dir = dir;
  Agent agent(agent_opts, &pool);
  JobManagerOptions opts;
  opts.node_id = "n1";
  opts.default_storage_path = dir + "/storage";
  opts.node_resources = {{"CPU", 1}};
  opts.tick = std::chrono::milliseconds(5);
  JobManager jobs(io, opts, &store, &log, &agent);
  forward.target = &jobs;
  jobs.SetHead(true);
  jobs.Start();

  auto spec = ParseJobSpecText(R"({"name": "one", "entrypoint": {"library": "/x.so"}})");
  REQUIRE(spec.ok());
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    JobManager::Submission sub;
    sub.spec = *spec;
    sub.library_path = "/x.so";
    jobs.Submit(sub, [&](Result<std::string> id) {
      REQUIRE(id.ok());
      ids.push_back(*id);
    });
  }
  // Bounded wait for both to end (the bound is not what is tested).
  for (int i = 0; i < 200; ++i) {
    io.run_for(std::chrono::milliseconds(50));
    if (ids.size() == 2 && IsTerminalJobState(store.GetJob(ids[0])->state) &&
        IsTerminalJobState(store.GetJob(ids[1])->state))
      break;
  }
  REQUIRE(ids.size() == 2);
  for (const auto& id : ids) {
    auto job = store.GetJob(id);
    CHECK(job->state == kJobFailed);
    CHECK(job->attempt == 1);
  }
  // One CPU: the second attempt started only after the first ended.
  auto a = store.ListAttempts(ids[0]);
  auto b = store.ListAttempts(ids[1]);
  REQUIRE(a.size() == 1);
  REQUIRE(b.size() == 1);
  const auto& first = a[0].started_at <= b[0].started_at ? a[0] : b[0];
  const auto& second = a[0].started_at <= b[0].started_at ? b[0] : a[0];
  REQUIRE(first.ended_at);
  CHECK(*first.ended_at <= second.started_at);
  CHECK(log.ops["start_attempt"] == 2);
  jobs.Shutdown();
  pool.KillAll();
  std::filesystem::remove_all(dir);
}

namespace {

// A one-CPU head over an FSM applied directly whose workers are /bin/false (every rank
// exits 1 at once).
struct FailingHead {
  FailingHead()
      : fsm(&store),
        log(io, &fsm),
        dir(TempDir()),
        pool(io, PoolOptions(), &forward),
        agent(IdleHead::AgentOpts(dir), &pool),
        jobs(io, IdleHead::HeadOptions(dir, 1), &store, &log, &agent) {
    forward.target = &jobs;
    jobs.SetHead(true);
    jobs.Start();
  }
  ~FailingHead() {
    jobs.Shutdown();
    pool.KillAll();
    std::filesystem::remove_all(dir);
  }
  static WorkerPoolOptions PoolOptions() {
    WorkerPoolOptions o;
    o.worker_binary = "/bin/false";
    o.drain_timeout = std::chrono::milliseconds(50);
    return o;
  }
  std::string Submit(const std::string& spec_text) {
    auto spec = ParseJobSpecText(spec_text);
    REQUIRE(spec.ok());
    JobManager::Submission sub;
    sub.spec = *spec;
    sub.library_path = "/x.so";
    std::string id;
    jobs.Submit(sub, [&](Result<std::string> r) {
      REQUIRE(r.ok());
      id = *r;
    });
    for (int i = 0; i < 100 && id.empty(); ++i) io.run_for(std::chrono::milliseconds(10));
    REQUIRE(!id.empty());
    return id;
  }
  // Runs until `done` or a generous bound (the bound is not what is tested).
  template <typename F>
  void RunUntil(F done, int max_ms = 20000) {
    for (int waited = 0; waited < max_ms && !done(); waited += 20)
      io.run_for(std::chrono::milliseconds(20));
  }

  boost::asio::io_context io;
  StateStore store;
  Fsm fsm;
  FsmLog log;
  const std::string dir;
  ForwardingListener forward;
  WorkerPool pool;
  Agent agent;
  JobManager jobs;
};

}  // namespace

// A full checkpoint disk spent a job's 4 attempts in 1.5 s.
TEST_CASE("failed attempts restart with exponential backoff: the first at once") {
  FailingHead h;
  const std::string id = h.Submit(R"({"name": "flaky", "entrypoint": {"library": "/x.so"},
      "run_config": {"failure_config": {"max_failures": 3, "restart_backoff_s": 0.2,
                                        "max_restart_backoff_s": 30}}})");
  bool saw_backoff_reason = false;
  h.RunUntil([&] {
    auto job = h.store.GetJob(id);
    if (job->pending_reason.find("backoff after") != std::string::npos) saw_backoff_reason = true;
    return IsTerminalJobState(job->state);
  });
  auto job = h.store.GetJob(id);
  CHECK(job->state == kJobFailed);
  CHECK(job->failures == 4);
  CHECK(saw_backoff_reason);
  auto attempts = h.store.ListAttempts(id);
  REQUIRE(attempts.size() == 4);
  std::sort(attempts.begin(), attempts.end(),
            [](const AttemptRecord& a, const AttemptRecord& b) { return a.attempt < b.attempt; });
  // Lower bounds only: the gap before attempt n+1 is at least 0.2 s * 2^(n-2) for n >= 2.
  for (int n = 2; n <= 3; ++n) {
    REQUIRE(attempts[n - 1].ended_at);
    const int64_t gap = attempts[n].started_at - *attempts[n - 1].ended_at;
    INFO("gap before attempt " << n + 1 << ": " << gap << " ms");
    CHECK(gap >= 200 * (1 << (n - 2)) - 5);  // NowMs granularity
  }
}

TEST_CASE("a start refused because the disk is full is retried about once a second") {
  FailingHead h;
  h.log.refuse["start_attempt"] = {1000, Status::ResourceExhausted("disk full: 1 MiB free")};
  const std::string id = h.Submit(R"({"name": "j", "entrypoint": {"library": "/x.so"}})");
  h.RunUntil([] { return false; }, 1500);
  CHECK(h.store.GetJob(id)->state == kJobPending);
  // Every pass (20 ms) would be ~75 proposals; once a second is 2 or 3.
  CHECK(h.log.ops["start_attempt"] >= 1);
  CHECK(h.log.ops["start_attempt"] <= 3);
  h.log.refuse.clear();  // space returned: it starts by itself
  h.RunUntil([&] { return IsTerminalJobState(h.store.GetJob(id)->state); });
  CHECK(h.store.GetJob(id)->attempt == 1);
}

TEST_CASE("an end of attempt refused because the disk is full is retried with its reason") {
  FailingHead h;
  h.log.refuse["end_attempt"] = {2, Status::ResourceExhausted("disk full: 1 MiB free")};
  const std::string id = h.Submit(R"({"name": "j", "entrypoint": {"library": "/x.so"}})");
  h.RunUntil([&] { return IsTerminalJobState(h.store.GetJob(id)->state); }, 10000);
  CHECK(h.log.ops["end_attempt"] == 3);
  auto a = h.store.GetAttempt(id, 1);
  REQUIRE(a.has_value());
  // The attempt stayed the head's own: not taken for one lost with a previous daemon.
  CHECK(a->reason == "rank 0 exited with code 1");
}

// A head paused past its leadership (SIGSTOP) ended the attempt locally although the
// command was refused, and deleted the new head's checkpoint_a002_....tmp.
TEST_CASE("an end of attempt that is not committed leaves the job's files alone") {
  FailingHead h;
  h.log.refuse["end_attempt"] = {1000, Status::Unavailable("not leader; leader is unknown")};
  const std::string id = h.Submit(R"({"name": "j", "entrypoint": {"library": "/x.so"}})");
  const std::string trial_dir = h.store.GetJob(id)->trial_dir;
  h.RunUntil([&] { return h.log.ops["end_attempt"] > 0 && h.store.GetJob(id)->attempt == 1; });
  // What the next head's attempt would be writing now.
  std::filesystem::create_directories(trial_dir + "/checkpoint_a002_s000001.tmp");
  std::filesystem::create_directories(trial_dir + "/.staging/attempt_2/seq_1/rank_0");
  h.RunUntil([&] { return h.log.ops["end_attempt"] >= 2; }, 3000);
  CHECK(std::filesystem::exists(trial_dir + "/checkpoint_a002_s000001.tmp"));
  CHECK(std::filesystem::exists(trial_dir + "/.staging/attempt_2/seq_1/rank_0"));
  CHECK(std::filesystem::exists(trial_dir + "/.staging/attempt_1"));
}

TEST_CASE("node loss follows the head's clock: LOST after the timeout, not before") {
  FakeClock clock;
  IdleHead head(1, &clock);
  NodeStatus other;
  other.node_id = "n2";
  other.api_address = "127.0.0.2:7450";
  other.host = "127.0.0.2";
  other.total = {{"CPU", 2}};
  head.jobs.OnHeartbeat(other);
  auto state_of = [&](const std::string& id) {
    for (const auto& n : head.jobs.NodesView())
      if (n["node_id"] == id) return n["state"].get<std::string>();
    return std::string("absent");
  };
  // Real time passes (many ticks), the head's clock does not: nothing expires.
  head.io.run_for(std::chrono::milliseconds(100));
  CHECK(state_of("n2") == "ALIVE");
  clock.Advance(std::chrono::milliseconds(3900));  // the default loss timeout is 4 s
  head.io.run_for(std::chrono::milliseconds(50));
  CHECK(state_of("n2") == "ALIVE");
  head.jobs.OnHeartbeat(other);  // a heartbeat resets it
  clock.Advance(std::chrono::milliseconds(3900));
  head.io.run_for(std::chrono::milliseconds(50));
  CHECK(state_of("n2") == "ALIVE");
  clock.Advance(std::chrono::milliseconds(200));  // 4.1 s of silence
  head.io.run_for(std::chrono::milliseconds(50));
  CHECK(state_of("n2") == "LOST");
  CHECK(state_of("n1") == "ALIVE");  // the head's own node heartbeats on every tick
}
