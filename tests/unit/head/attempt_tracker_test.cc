// AttemptTracker (daemon/head/attempt_tracker.h): every transition of an attempt's state
// machine, driven by calling it; no sockets, no processes, no sleeps.
#include "daemon/head/attempt_tracker.h"

#include <catch2/catch.hpp>
#include <csignal>

using namespace traintl;
using nlohmann::json;
using T = AttemptTracker;

namespace {

// Ranks 0 and 1 on the head's node "h", ranks 2 and 3 on node "n2".
AttemptTracker TwoNodes() {
  AttemptPlacement p;
  p.job_id = "j1";
  p.attempt = 2;
  p.rank_nodes = {"h", "h", "n2", "n2"};
  p.local_node = "h";
  p.staging_prefix = "/t/.staging/attempt_2/";
  return AttemptTracker(p);
}

AttemptTracker OneNode(int ranks) {
  AttemptPlacement p;
  p.job_id = "j1";
  p.attempt = 1;
  p.rank_nodes.assign(static_cast<size_t>(ranks), "h");
  p.local_node = "h";
  p.staging_prefix = "/t/.staging/attempt_1/";
  return AttemptTracker(p);
}

WorkerExit Exit(int rank, int code, bool stopped = false) {
  WorkerExit e;
  e.job_id = "j1";
  e.rank = rank;
  e.exit_code = code;
  e.stopped_by_agent = stopped;
  return e;
}

WorkerExit Killed(int rank, int sig, bool stopped = false) {
  WorkerExit e;
  e.job_id = "j1";
  e.rank = rank;
  e.signal = sig;
  e.stopped_by_agent = stopped;
  return e;
}

template <typename C>
int Count(const T::Commands& cs) {
  int n = 0;
  for (const auto& c : cs) n += std::holds_alternative<C>(c) ? 1 : 0;
  return n;
}

template <typename C>
const C* First(const T::Commands& cs) {
  for (const auto& c : cs)
    if (auto* x = std::get_if<C>(&c)) return x;
  return nullptr;
}

const cmd::AttemptOutcome& EndOf(const T::Commands& cs) {
  const T::End* end = First<T::End>(cs);
  REQUIRE(end != nullptr);
  return end->outcome;
}

}  // namespace

TEST_CASE("tracker: every rank exits 0 and the attempt succeeds once all are gone") {
  T t = TwoNodes();
  CHECK(t.OnLaunched(true).empty());
  CHECK(t.RemoteLive() == 2);
  CHECK(t.IsRemote(2));
  CHECK(!t.IsRemote(1));
  for (int r = 0; r < 4; ++r) {
    auto cs = t.OnHello(r);
    CHECK(Count<T::RecordWorkerEvent>(cs) == 1);
    CHECK(Count<T::MarkRunning>(cs) == (r == 3 ? 1 : 0));
  }
  CHECK(Count<T::MarkRunning>(t.OnHello(3)) == 0);  // a repeated hello marks nothing
  for (int r = 0; r < 3; ++r) {
    auto cs = t.OnExit(Exit(r, 0), "");
    REQUIRE(cs.size() == 1);
    CHECK(std::get<T::RecordWorkerEvent>(cs[0]).detail == "exit code 0");
  }
  CHECK(t.Settle(0).empty());  // rank 3 (remote) has not said how it ended
  t.OnExit(Exit(3, 0), "");
  CHECK(t.Settle(1).empty());  // a local process still runs
  auto cs = t.Settle(0);
  CHECK(EndOf(cs).state == kJobSucceeded);
  CHECK(t.end_proposed());
  CHECK(t.Settle(0).empty());  // ended once
}

TEST_CASE("tracker: the first failure wins, ranks stopped afterwards are not failures") {
  T t = OneNode(3);
  t.OnLaunched(true);
  auto cs = t.OnExit(Exit(1, 7), "line one\nboom\n");
  CHECK(Count<T::StopWorkers>(cs) == 1);
  CHECK(First<T::StopWorkers>(cs)->urgent);  // a failed attempt: SIGTERM the rest at once
  CHECK(t.ending());
  CHECK(t.failure()->reason == "rank 1 exited with code 7");
  CHECK(t.failure()->failed_rank == 1);
  CHECK(t.failure()->log_tail == "line one\nboom\n");
  // The others die of the stop (SIGTERM, then maybe SIGKILL): no new reason, no new stop.
  CHECK(Count<T::StopWorkers>(t.OnExit(Killed(0, SIGTERM, /*stopped=*/true), "")) == 0);
  CHECK(t.Settle(1).empty());
  t.OnExit(Killed(2, SIGKILL, /*stopped=*/true), "");
  auto end = EndOf(t.Settle(0));
  CHECK(end.state == kJobFailed);
  CHECK(end.reason == "rank 1 exited with code 7");
  CHECK(end.exit_code == 7);
  CHECK(end.retryable);
}

TEST_CASE("tracker: a command's own exit code or signal is the attempt's, not the worker's 1") {
  for (bool signaled : {false, true}) {
    T t = OneNode(2);
    t.OnLaunched(true);
    WorkerExit e = Exit(1, 1);
    e.done_seen = true;
    e.done_error = signaled ? "the command was killed by signal 9 (Killed)"
                            : "the command exited with code 42";
    if (signaled) {
      e.command_signal = 9;
    } else {
      e.command_exit_code = 42;
    }
    t.OnExit(e, "");
    t.OnExit(Killed(0, SIGTERM, /*stopped=*/true), "");
    auto end = EndOf(t.Settle(0));
    CHECK(end.state == kJobFailed);
    CHECK(end.reason == "rank 1 failed: " + e.done_error);
    CHECK(end.exit_code == (signaled ? std::optional<int>() : std::optional<int>(42)));
    CHECK(end.signal == (signaled ? std::optional<int>(9) : std::optional<int>()));
    CHECK(end.retryable);
  }
  // A worker that was itself killed, or could not start the command, shows its own end.
  WorkerExit killed;
  killed.rank = 0;
  killed.signal = SIGKILL;
  killed.command_exit_code = 42;
  CHECK(DescribeExit(killed, "").signal == SIGKILL);
  CHECK_FALSE(DescribeExit(killed, "").exit_code);
  WorkerExit no_start = Exit(0, 4);
  no_start.command_exit_code = 42;
  CHECK(DescribeExit(no_start, "").exit_code == 4);
}

TEST_CASE("tracker: a rank killed while the attempt ends, but not by us, is still recorded") {
  T t = OneNode(2);
  t.OnLaunched(true);
  t.OnStepDown();                    // ending, for another reason
  t.OnExit(Killed(0, SIGSEGV), "");  // not stopped_by_agent: a crash of its own
  CHECK(t.failure()->reason == "rank 0 was killed by SIGSEGV");
}

TEST_CASE("tracker: how exits read") {
  WorkerExit lib = Exit(0, 3);
  auto o = DescribeExit(lib, "loading...\ncannot open libtrain.so: no such file\n");
  CHECK(o.reason ==
        "rank 0 could not load the training library: cannot open libtrain.so: no "
        "such file");
  CHECK(!o.retryable);
  lib.done_error = "undefined symbol: train";
  CHECK(DescribeExit(lib, "").reason ==
        "rank 0 could not load the training library: undefined symbol: train");
  WorkerExit failed = Exit(2, 1);
  failed.done_seen = true;
  failed.done_error = "ValueError: bad lr";
  failed.retryable = false;
  o = DescribeExit(failed, "");
  CHECK(o.reason == "rank 2 failed: ValueError: bad lr");
  CHECK(!o.retryable);
  CHECK(DescribeExit(Killed(1, SIGKILL), "").reason == "rank 1 was killed by SIGKILL");
  CHECK(DescribeExit(Killed(1, SIGKILL), "").signal == SIGKILL);
  // Exit code 0 with a failed "done" is a failure, not a success.
  WorkerExit lied = Exit(0, 0);
  lied.done_seen = true;
  CHECK(!T::IsCleanExit(lied));
  CHECK(T::IsCleanExit(Exit(0, 0)));
}

TEST_CASE("tracker: reports commit once every rank reported, checkpoints only from staging") {
  T t = OneNode(3);
  t.OnLaunched(true);
  CHECK(t.OnReport(1, 0, {{"loss", 1}}, "/t/.staging/attempt_1/seq_0/rank_1").empty());
  CHECK(t.OnReport(2, 1, {{"loss", 9}}, "").empty());             // another seq, out of order
  CHECK(t.OnReport(2, 0, {{"loss", 2}}, "/etc/passwd").empty());  // ignored path
  auto cs = t.OnReport(0, 0, {{"loss", 0.5}}, "/t/.staging/attempt_1/seq_0/rank_0");
  const T::CommitReport* c = First<T::CommitReport>(cs);
  REQUIRE(c != nullptr);
  CHECK(c->seq == 0);
  CHECK(c->metrics == json{{"loss", 0.5}});  // rank 0's
  CHECK(c->checkpoint_dirs ==
        std::map<int, std::string>{{0, "/t/.staging/attempt_1/seq_0/rank_0"},
                                   {1, "/t/.staging/attempt_1/seq_0/rank_1"}});
  // A path escaping staging with ".." is ignored too.
  t.OnReport(0, 1, json::object(), "/t/.staging/attempt_1/../../x");
  auto c1 = First<T::CommitReport>(t.OnReport(1, 1, json::object(), ""));
  REQUIRE(c1 != nullptr);
  CHECK(c1->checkpoint_dirs.empty());
}

TEST_CASE("tracker: the attempt ends only once its checkpoints are merged") {
  T t = OneNode(1);
  t.OnLaunched(true);
  auto cs = t.OnReport(0, 5, json::object(), "/t/.staging/attempt_1/seq_5/rank_0");
  REQUIRE(First<T::CommitReport>(cs) != nullptr);
  CHECK(t.commits_in_flight() == 1);
  t.OnExit(Exit(0, 0), "");
  CHECK(t.Settle(0).empty());  // the merge still moves the staged files
  t.OnCheckpointCommitted(5);
  CHECK(EndOf(t.Settle(0)).state == kJobSucceeded);
  // A report without checkpoint files has nothing to wait for.
  T m = OneNode(1);
  m.OnLaunched(true);
  m.OnReport(0, 0, json::object(), "");
  CHECK(m.commits_in_flight() == 0);
}

TEST_CASE("tracker: a checkpoint that cannot be committed fails the attempt") {
  T t = OneNode(1);
  t.OnLaunched(true);
  auto cs = t.OnCheckpointFailed(4, "No space left on device");
  CHECK(Count<T::StopWorkers>(cs) == 1);
  t.OnExit(Killed(0, SIGTERM, true), "");
  auto end = EndOf(t.Settle(0));
  CHECK(end.state == kJobFailed);
  CHECK(end.reason == "checkpoint 4 could not be committed: No space left on device");
}

TEST_CASE("tracker: a lost node kills its ranks, the attempt ends when the rest stopped") {
  T t = TwoNodes();
  t.OnLaunched(true);
  auto cs = t.OnNodeLost("n2");
  CHECK(Count<T::StopWorkers>(cs) == 1);
  CHECK(t.RemoteLive() == 0);
  CHECK(t.failure()->reason == "rank 2 lost with its node n2");
  CHECK(t.failure()->failed_rank == 2);
  CHECK(t.OnNodeLost("n2").empty());  // nothing more to lose
  CHECK(t.OnNodeLost("elsewhere").empty());
  CHECK(t.Settle(2).empty());
  CHECK(EndOf(t.Settle(0)).reason == "rank 2 lost with its node n2");
}

TEST_CASE("tracker: a node that cannot start its ranks, or the head's own node") {
  T t = TwoNodes();
  t.OnLaunched(true);
  auto cs = t.OnNodeStartFailed("n2", "node n2 could not start its ranks: disk full");
  CHECK(Count<T::StopWorkers>(cs) == 1);
  CHECK(t.Exited(2));
  CHECK(t.Exited(3));
  CHECK(EndOf(t.Settle(0)).reason == "node n2 could not start its ranks: disk full");

  T local = TwoNodes();
  local.OnLaunched(true);
  CHECK(Count<T::StopWorkers>(local.OnNodeStartFailed("h", "no free port")) == 1);
  CHECK(!local.Exited(0));         // the agent counts its own ranks
  CHECK(local.Settle(0).empty());  // the remote ranks may still run
  local.OnNodeStartFailed("n2", "not started: the node of rank 0 could not start");
  CHECK(EndOf(local.Settle(0)).reason == "no free port");  // the first failure
}

TEST_CASE("tracker: a stop during the start ends the attempt STOPPED without starting it") {
  T t = OneNode(2);
  CHECK(t.OnStopRequested().empty());  // nothing runs yet
  CHECK(t.Settle(0).empty());          // nor can it end before the start committed
  auto cs = t.OnLaunched(true);
  CHECK(EndOf(cs).state == kJobStopped);
  CHECK(EndOf(cs).reason == "stopped by user");
  CHECK(t.end_proposed());
}

TEST_CASE("tracker: a stop while running stops the workers and ends STOPPED") {
  T t = OneNode(2);
  t.OnLaunched(true);
  t.OnHello(0);
  auto stop = t.OnStopRequested();
  CHECK(Count<T::StopWorkers>(stop) == 1);
  CHECK(!First<T::StopWorkers>(stop)->urgent);      // the user's stop: the grace to checkpoint
  CHECK(t.OnStopRequested().empty());               // asked twice, stopped once
  CHECK(Count<T::MarkRunning>(t.OnHello(1)) == 0);  // not RUNNING once ending
  t.OnExit(Killed(0, SIGTERM, true), "");
  t.OnExit(Exit(1, 143, true), "");
  auto end = EndOf(t.Settle(0));
  CHECK(end.state == kJobStopped);
  CHECK(end.reason == "stopped by user");
}

TEST_CASE("tracker: a stop during a checkpoint: the report still commits, the end is STOPPED") {
  T t = OneNode(2);
  t.OnLaunched(true);
  t.OnReport(0, 3, {{"loss", 1}}, "/t/.staging/attempt_1/seq_3/rank_0");
  t.OnStopRequested();
  auto cs = t.OnReport(1, 3, {{"loss", 1}}, "/t/.staging/attempt_1/seq_3/rank_1");
  CHECK(First<T::CommitReport>(cs) != nullptr);
  // The merge fails (the workers were stopped mid-copy): the user's stop still names it.
  t.OnCheckpointFailed(3, "missing rank_1");
  t.OnExit(Killed(0, SIGTERM, true), "");
  t.OnExit(Killed(1, SIGTERM, true), "");
  CHECK(EndOf(t.Settle(0)).state == kJobStopped);
}

TEST_CASE("tracker: the head steps down before or after the start") {
  T before = OneNode(1);
  auto cs = before.OnLaunched(/*head_ok=*/false);
  CHECK(EndOf(cs).state == kJobFailed);
  CHECK(EndOf(cs).reason == "the head stepped down before the start");

  T after = OneNode(1);
  after.OnLaunched(true);
  CHECK(Count<T::StopWorkers>(after.OnStepDown()) == 1);
  CHECK(after.ending());
}

TEST_CASE("restart budget: quick failures in a row back off, progress starts over") {
  // backoff 1 s, max 60 s: the first restart is immediate, then 1, 2, 4 ... 60.
  RestartDelay d = NextRestartDelay(0, 0.5, 1, 60);
  CHECK(d.quick_failures == 1);
  CHECK(d.delay_s == 0);
  d = NextRestartDelay(d.quick_failures, 0.5, 1, 60);
  CHECK(d.delay_s == 1);
  d = NextRestartDelay(d.quick_failures, 0.5, 1, 60);
  CHECK(d.delay_s == 2);
  for (int i = 0; i < 20; ++i) d = NextRestartDelay(d.quick_failures, 0.5, 1, 60);
  CHECK(d.delay_s == 60);
  // An attempt that ran at least the maximum was progress.
  d = NextRestartDelay(d.quick_failures, 61, 1, 60);
  CHECK(d.quick_failures == 1);
  CHECK(d.delay_s == 0);
  CHECK(NextRestartDelay(5, 0.1, 0, 60).delay_s == 0);  // backoff disabled
}

TEST_CASE("lost attempts name what happened") {
  AttemptRecord a;
  a.attempt = 3;
  CHECK(LostAttemptReason(a, "n1", "r1") ==
        "attempt 3 lost: its workers are gone (the head changed or its daemon restarted)");
  a.head_node = "n1";
  a.head_run = "r0";
  CHECK(LostAttemptReason(a, "n2", "r9") ==
        "attempt 3 ended by a head failover: node n1, whose head started it, is no longer the "
        "head; node n2 took over and stopped its workers");
  CHECK(LostAttemptReason(a, "n1", "r1") ==
        "attempt 3 lost: its workers are gone (the daemon on node n1 restarted)");
  CHECK(LostAttemptReason(a, "n1", "r0") ==
        "attempt 3 ended: this head lost its leadership while the attempt ran and stopped its "
        "workers");
}

namespace {

// An attempt on `nodes` (the head's is "h"), launched, every rank said hello; elastic with
// `min_ranks` / `max_ranks`, peer recovery with `replacements` (see AttemptPlacement).
AttemptTracker Launched(std::vector<std::string> nodes, int min_ranks, int max_ranks,
                        int replacements) {
  AttemptPlacement p;
  p.job_id = "j1";
  p.attempt = 1;
  p.rank_nodes = std::move(nodes);
  p.local_node = "h";
  p.staging_prefix = "/t/.staging/attempt_1/";
  p.min_ranks = min_ranks;
  p.max_ranks = max_ranks;
  p.max_replacements = replacements;
  AttemptTracker t(p);
  t.OnLaunched(true);
  for (int r = 0; r < t.world_size(); ++r) t.OnHello(r);
  return t;
}

// `ranks` ranks on the head's node with peer recovery allowing `max` replacements.
AttemptTracker Recovering(int ranks, int max) {
  return Launched(std::vector<std::string>(static_cast<size_t>(ranks), "h"), 0, 0, max);
}

}  // namespace

TEST_CASE("tracker: with peer recovery a killed rank is replaced, not failed") {
  T t = Recovering(2, 2);
  T::Commands out = t.OnExit(Killed(1, SIGKILL), "");
  const T::ReplaceRank* replace = First<T::ReplaceRank>(out);
  REQUIRE(replace != nullptr);
  CHECK(replace->rank == 1);
  CHECK(replace->generation == 1);
  CHECK(Count<T::StopWorkers>(out) == 0);
  CHECK(!t.ending());
  CHECK(!t.failure());
  // The survivor and the replacement live: nothing ends while one does.
  CHECK(t.Settle(1).empty());
  // The replacement says hello (no second MarkRunning) and the job runs to success.
  CHECK(Count<T::MarkRunning>(t.OnHello(1)) == 0);
  t.OnExit(Exit(0, 0), "");
  t.OnExit(Exit(1, 0), "");
  CHECK(EndOf(t.Settle(0)).state == kJobSucceeded);
  CHECK(t.replacements() == 1);
}

TEST_CASE("tracker: one exit per worker process, and a replacement holds no state before hello") {
  SECTION("the same exit again (a node sent its batch again) replaces nothing more") {
    T t = Recovering(3, -1);
    WorkerExit killed = Killed(1, SIGKILL);
    killed.pid = 4242;
    CHECK(Count<T::ReplaceRank>(t.OnExit(killed, "")) == 1);
    CHECK(t.OnExit(killed, "").empty());
    CHECK(t.replacements() == 1);
    CHECK(!t.failure());
    // The replacement's own death (another process) counts: it said hello, so it is
    // replaced again. So does one with the same pid that is another worker: another launch
    // of the node's pool (a pid reused), or on another node.
    t.OnHello(1);
    WorkerExit again = Killed(1, SIGKILL);
    again.pid = 4242;
    again.launch = 7;
    CHECK(Count<T::ReplaceRank>(t.OnExit(again, "")) == 1);
    CHECK(t.replacements() == 2);
    t.OnHello(1);
    t.MoveRank(1, "elsewhere");
    t.OnHello(1);
    CHECK(Count<T::ReplaceRank>(t.OnExit(again, "")) == 1);
    CHECK(t.replacements() == 3);
    CHECK(t.OnExit(again, "").empty());
  }
  SECTION("a replacement that dies before its hello is not replaced again") {
    T t = Recovering(3, -1);
    CHECK(Count<T::ReplaceRank>(t.OnExit(Killed(1, SIGKILL), "")) == 1);
    T::Commands out = t.OnExit(Killed(1, SIGKILL), "");
    CHECK(Count<T::ReplaceRank>(out) == 0);
    CHECK(t.failure());
  }
  SECTION("a survivor's death while the replacement has not said hello") {
    T t = Recovering(2, -1);
    CHECK(Count<T::ReplaceRank>(t.OnExit(Killed(0, SIGKILL), "")) == 1);
    // Rank 0's new worker holds no state yet: rank 1 was the last that did.
    T::Commands out = t.OnExit(Killed(1, SIGKILL), "");
    CHECK(Count<T::ReplaceRank>(out) == 0);
    CHECK(t.failure());
  }
}

TEST_CASE("tracker: peer recovery falls back to failing the attempt") {
  SECTION("no survivor: the last rank dies") {
    T t = Recovering(1, -1);
    T::Commands out = t.OnExit(Killed(0, SIGKILL), "");
    CHECK(Count<T::ReplaceRank>(out) == 0);
    CHECK(t.failure());
    CHECK(Count<T::StopWorkers>(out) == 1);
  }
  SECTION("every survivor already gone") {
    T t = Recovering(2, -1);
    t.OnExit(Killed(0, SIGKILL), "");
    CHECK(t.replacements() == 1);
    // Rank 0's replacement has not said hello: it holds no state yet, rank 1 is the last.
    t.OnHello(0);
    T::Commands out = t.OnExit(Killed(1, SIGKILL), "");
    CHECK(Count<T::ReplaceRank>(out) == 1);  // rank 0's replacement said hello: a survivor
  }
  SECTION("the budget is spent") {
    T t = Recovering(2, 1);
    CHECK(Count<T::ReplaceRank>(t.OnExit(Killed(1, SIGKILL), "")) == 1);
    t.OnHello(1);
    T::Commands out = t.OnExit(Killed(1, SIGSEGV), "");
    CHECK(Count<T::ReplaceRank>(out) == 0);
    CHECK(t.failure()->reason.find("SIGSEGV") != std::string::npos);
  }
  SECTION("a rank that failed by itself, or never started, is not replaced") {
    T t = Recovering(2, -1);
    WorkerExit e = Exit(1, 1);
    e.done_seen = true;
    e.done_error = "ValueError";
    CHECK(Count<T::ReplaceRank>(t.OnExit(e, "")) == 0);
    CHECK(t.failure());
    T u = Recovering(2, -1);
    CHECK(Count<T::ReplaceRank>(u.OnExit(Exit(1, 3), "")) == 0);  // the library would not load
  }
  SECTION("a death while the attempt is being stopped") {
    T t = Recovering(2, -1);
    t.OnStopRequested();
    CHECK(Count<T::ReplaceRank>(t.OnExit(Killed(1, SIGKILL), "")) == 0);
  }
  SECTION("off") {
    T t = Recovering(2, 0);
    CHECK(Count<T::ReplaceRank>(t.OnExit(Killed(1, SIGKILL), "")) == 0);
    CHECK(t.failure());
  }
}

TEST_CASE("tracker: the replacement's reports take the dead rank's place") {
  T t = Recovering(2, -1);
  // Seq 0 committed by both; rank 0 reported seq 1 (with a checkpoint), rank 1 died before.
  CHECK(Count<T::CommitReport>(t.OnReport(0, 0, json{{"step", 1}}, "")) == 0);
  CHECK(Count<T::CommitReport>(t.OnReport(1, 0, json{{"step", 1}}, "")) == 1);
  CHECK(t.OnReport(0, 1, json{{"step", 2}}, "/t/.staging/attempt_1/seq_1/rank_0").empty());
  // Rank 1 had also reported seq 2 ahead of rank 0 (its report supersedes nothing yet).
  CHECK(t.OnReport(1, 2, json{{"step", 3}}, "").empty());
  t.OnExit(Killed(1, SIGKILL), "");
  t.OnHello(1);
  // The replacement took rank 0's state and continues its sequence at 2: seq 1, which it
  // skips, is committed from rank 0's report; the dead rank's seq 2 no longer counts.
  T::Commands out = t.OnReport(1, 2, json{{"step", 3}}, "");
  REQUIRE(Count<T::CommitReport>(out) == 1);
  const T::CommitReport* c = First<T::CommitReport>(out);
  CHECK(c->seq == 1);
  CHECK(c->metrics == json{{"step", 2}});
  CHECK(c->checkpoint_dirs.size() == 1);
  CHECK(c->checkpoint_dirs.at(0) == "/t/.staging/attempt_1/seq_1/rank_0");
  out = t.OnReport(0, 2, json{{"step", 3}}, "");
  REQUIRE(Count<T::CommitReport>(out) == 1);
  CHECK(First<T::CommitReport>(out)->seq == 2);
}

TEST_CASE("tracker: an elastic attempt goes on with the ranks left when a node is lost") {
  T t = Launched({"h", "n2", "n3"}, /*min_ranks=*/2, /*max_ranks=*/0, /*replacements=*/0);
  // Rank 1 reported seq 0, the others not yet: its report no longer counts once it is gone.
  CHECK(t.OnReport(1, 0, json{{"step", 1}}, "").empty());
  T::Commands out = t.OnNodeLost("n2");
  const T::Shrink* shrink = First<T::Shrink>(out);
  REQUIRE(shrink != nullptr);
  CHECK(shrink->generation == 1);
  CHECK(shrink->ranks == std::vector<int>{0, 2});
  CHECK(!t.failure());
  CHECK(!t.ending());
  CHECK(t.active() == std::set<int>{0, 2});
  CHECK(t.Exited(1));
  // Reports of the two left commit without rank 1.
  CHECK(t.OnReport(0, 0, json{{"step", 1}}, "").empty());
  CHECK(Count<T::CommitReport>(t.OnReport(2, 0, json{{"step", 1}}, "")) == 1);
  // Below the minimum: the attempt fails as before.
  out = t.OnNodeLost("n3");
  CHECK(Count<T::Shrink>(out) == 0);
  CHECK(t.failure());
  CHECK(Count<T::StopWorkers>(out) == 1);
}

TEST_CASE("tracker: an elastic attempt does not shrink while a rank it took back starts") {
  T t = Launched({"h", "n2", "n3"}, /*min_ranks=*/1, /*max_ranks=*/0, /*replacements=*/0);
  REQUIRE(Count<T::Shrink>(t.OnNodeLost("n3")) == 1);
  REQUIRE(Count<T::Grow>(t.OnCapacity(2, "n4")) == 1);
  // Rank 1's node goes before the regrown rank 2 says hello: rank 2 was launched for the
  // group of generation 2, which will not meet again; the attempt fails and restarts.
  T::Commands out = t.OnNodeLost("n2");
  CHECK(Count<T::Shrink>(out) == 0);
  CHECK(t.failure());
  // Once it said hello it holds the state like any other.
  T u = Launched({"h", "n2", "n3"}, 1, 0, 0);
  REQUIRE(Count<T::Shrink>(u.OnNodeLost("n3")) == 1);
  REQUIRE(Count<T::Grow>(u.OnCapacity(2, "n4")) == 1);
  u.OnHello(2);
  const T::Shrink* shrink = First<T::Shrink>(u.OnNodeLost("n2"));
  REQUIRE(shrink != nullptr);
  CHECK(shrink->ranks == std::vector<int>{0, 2});
  CHECK(!u.failure());
}

TEST_CASE("tracker: a late exit of a rank's worker from before it was started again is ignored") {
  // Rank 2's node is lost (its worker fenced and killed, the exit kept queued), the group
  // shrinks, and the node is back: rank 2 grows back there, launched for generation 2.
  T t = Launched({"h", "n2", "n3"}, /*min_ranks=*/1, /*max_ranks=*/0, /*replacements=*/0);
  REQUIRE(Count<T::Shrink>(t.OnNodeLost("n3")) == 1);
  const T::Grow* grow = nullptr;
  T::Commands grown = t.OnCapacity(2, "n3");
  grow = First<T::Grow>(grown);
  REQUIRE(grow != nullptr);
  t.OnHello(2);
  WorkerExit late = Killed(2, SIGKILL);
  late.pid = 100;
  late.generation = 0;  // the old worker's
  CHECK(t.OnExit(late, "").empty());
  CHECK(!t.Exited(2));
  CHECK(!t.failure());
  // The current worker's exit counts (as does one of an older release, which says none).
  WorkerExit current = Exit(2, 0);
  current.pid = 200;
  current.generation = grow->generation;
  t.OnExit(current, "");
  CHECK(t.Exited(2));
}

TEST_CASE("tracker: an elastic attempt that shrank takes its rank back when capacity returns") {
  T t = Launched({"n1", "n2", "h"}, /*min_ranks=*/2, /*max_ranks=*/0, /*replacements=*/0);
  CHECK(t.Missing().empty());
  REQUIRE(Count<T::Shrink>(t.OnNodeLost("n1")) == 1);
  CHECK(t.Missing() == std::vector<int>{0});
  T::Commands out = t.OnCapacity(0, "n3");
  const T::Grow* grow = First<T::Grow>(out);
  REQUIRE(grow != nullptr);
  CHECK(grow->generation == 2);
  CHECK(grow->rank == 0);
  CHECK(grow->node == "n3");
  CHECK(grow->ranks == std::vector<int>{0, 1, 2});
  CHECK(t.placement().rank_nodes[0] == "n3");
  CHECK(t.Moved(0));
  CHECK(!t.Exited(0));
  CHECK(t.Missing().empty());
  CHECK(t.RemoteLive() == 2);            // ranks 0 (on n3) and 1
  CHECK(t.OnCapacity(0, "n4").empty());  // already in the group
  // Its start failed: the group shrinks again.
  CHECK(Count<T::Shrink>(t.OnReplacementFailed(0, "no room")) == 1);
  CHECK(!t.failure());
  // Nothing grows once the attempt is ending.
  t.OnStopRequested();
  CHECK(t.Missing().empty());
  CHECK(t.OnCapacity(0, "n3").empty());
}

TEST_CASE("tracker: an elastic attempt that started smaller grows up to its maximum") {
  T t = Launched({"h", "h"}, /*min_ranks=*/2, /*max_ranks=*/3, /*replacements=*/0);
  CHECK(t.Missing() == std::vector<int>{2});
  CHECK(t.OnCapacity(3, "h").empty());  // not the next number
  const T::Grow* grow = First<T::Grow>(t.OnCapacity(2, "h"));
  REQUIRE(grow != nullptr);
  CHECK(grow->ranks == std::vector<int>{0, 1, 2});
  CHECK(t.world_size() == 3);
  CHECK(t.Missing().empty());
  // Reports now complete with all three.
  t.OnReport(0, 0, json{{"step", 1}}, "");
  CHECK(t.OnReport(1, 0, json{{"step", 1}}, "").empty());
  CHECK(Count<T::CommitReport>(t.OnReport(2, 0, json{{"step", 1}}, "")) == 1);
}

TEST_CASE("tracker: with peer recovery, ranks lost with their node start again elsewhere") {
  T t = Launched({"n1", "h"}, /*min_ranks=*/0, /*max_ranks=*/0, /*replacements=*/1);
  T::Commands out = t.OnNodeLost("n1");
  const T::Relocate* relocate = First<T::Relocate>(out);
  REQUIRE(relocate != nullptr);
  CHECK(relocate->generation == 1);
  CHECK(relocate->ranks == std::vector<int>{0});
  CHECK(Count<T::StopWorkers>(out) == 0);
  CHECK(!t.failure());
  t.MoveRank(0, "n2");
  CHECK(t.placement().rank_nodes[0] == "n2");
  CHECK(t.Moved(0));
  CHECK(t.RemoteLive() == 1);  // rank 0's new incarnation on n2
  // The budget is spent: the next loss fails the attempt.
  t.OnHello(0);
  out = t.OnNodeLost("n2");
  CHECK(Count<T::Relocate>(out) == 0);
  CHECK(t.failure());
}

TEST_CASE("tracker: a rank started late is stopped when every other rank finished") {
  T t = Recovering(2, -1);
  t.OnExit(Killed(1, SIGKILL), "");  // replaced
  t.OnHello(1);
  // Rank 0 finishes while rank 1's replacement still runs: it is asked to stop (it may be
  // waiting for a group that no longer meets), and its exit then is no failure.
  T::Commands out = t.OnExit(Exit(0, 0), "");
  CHECK(Count<T::StopWorkers>(out) == 1);
  CHECK(!First<T::StopWorkers>(out)->urgent);
  t.OnExit(Killed(1, SIGTERM, /*stopped=*/true), "");
  CHECK(EndOf(t.Settle(0)).state == kJobSucceeded);
  // Without a late rank, nothing is stopped early.
  T u = Recovering(2, -1);
  CHECK(Count<T::StopWorkers>(u.OnExit(Exit(0, 0), "")) == 0);
}

TEST_CASE("tracker: a rank killed from outside is the cause, whichever exit came first") {
  T t = OneNode(2);
  t.OnLaunched(true);
  WorkerExit own = Exit(0, 1);
  own.done_seen = true;
  own.done_error = "Allreduce failed";
  t.OnExit(own, "");  // its collective saw the dead peer before the agent reaped that one
  t.OnExit(Killed(1, SIGKILL), "");
  REQUIRE(t.failure());
  CHECK(t.failure()->failed_rank == 1);
  CHECK(t.failure()->signal == SIGKILL);
  // A rank the agent stopped does not take the place of the first failure.
  T u = OneNode(2);
  u.OnLaunched(true);
  u.OnExit(own, "");
  u.OnExit(Killed(1, SIGTERM, /*stopped=*/true), "");
  CHECK(u.failure()->failed_rank == 0);
  // A command whose program died of a signal (SIGABRT when its peer vanished) exited by
  // itself all the same (its worker's 1): the rank killed from outside still takes over.
  T v = OneNode(2);
  v.OnLaunched(true);
  WorkerExit command = Exit(0, 1);
  command.done_seen = true;
  command.done_error = "the command was killed by signal 6 (Aborted)";
  command.command_signal = SIGABRT;
  v.OnExit(command, "");
  CHECK(v.failure()->signal == SIGABRT);  // what the attempt would show for it
  v.OnExit(Killed(1, SIGKILL), "");
  CHECK(v.failure()->failed_rank == 1);
  CHECK(v.failure()->signal == SIGKILL);
}

TEST_CASE("tracker: a rank that fails by itself after a replacement is told what recovery needs") {
  T t = Recovering(2, -1);
  t.OnExit(Killed(1, SIGKILL), "");  // replaced
  WorkerExit own = Exit(0, 1);
  own.done_seen = true;
  own.done_error = "Connection closed by peer";  // its loop is not in run_steps
  t.OnExit(own, "");
  REQUIRE(t.failure());
  CHECK_THAT(t.failure()->reason, Catch::Contains("Connection closed by peer"));
  CHECK_THAT(t.failure()->reason, Catch::Contains("run_steps"));
}
