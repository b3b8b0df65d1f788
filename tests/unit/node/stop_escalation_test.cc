// StopEscalation (daemon/node/stop_escalation.h): a worker's stop, SIGTERM after the stop
// grace and SIGKILL after the term grace, on a FakeClock with a launcher that only records
// what it is asked to do - no processes, no sockets, no sleeps.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <optional>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "daemon/node/process_launcher.h"
#include "daemon/node/stop_escalation.h"

using namespace traintl;
using std::chrono::milliseconds;

namespace {

// Records the signals; starts and reaps nothing.
class RecordingLauncher : public ProcessLauncher {
 public:
  Result<SpawnedProcess> Spawn(const ProcessSpec&) override {
    return Status::Internal("RecordingLauncher starts nothing");
  }
  void SignalGroup(pid_t pgid, int sig) override { group_signals.emplace_back(pgid, sig); }
  void Signal(pid_t pid, int sig) override { signals.emplace_back(pid, sig); }
  std::optional<ChildExit> ReapAny() override { return std::nullopt; }
  void Reap(pid_t) override {}
  std::vector<pid_t> OrphanChildren() override { return {}; }

  std::vector<std::pair<pid_t, int>> group_signals;
  std::vector<std::pair<pid_t, int>> signals;
};

constexpr pid_t kPid = 4321;
constexpr milliseconds kStopGrace{3000};
constexpr milliseconds kTermGrace{2000};

struct Rig {
  FakeClock clock;
  RecordingLauncher launcher;
  StopEscalation stop{&clock, &launcher, kPid, kStopGrace, kTermGrace};

  using Signals = std::vector<std::pair<pid_t, int>>;
  const Signals& sent() const { return launcher.group_signals; }
};

}  // namespace

TEST_CASE("nothing is signalled before a stop is requested") {
  Rig r;
  CHECK_FALSE(r.stop.requested());
  CHECK_FALSE(r.stop.NextDeadline());
  r.clock.Advance(std::chrono::hours(1));
  CHECK_FALSE(r.stop.Poll());
  CHECK(r.sent().empty());
}

TEST_CASE("SIGTERM comes when the stop grace has passed, SIGKILL when the term grace has") {
  Rig r;
  const auto t0 = r.clock.Now();
  REQUIRE(r.stop.Request());
  CHECK(r.stop.requested());
  CHECK(r.stop.NextDeadline() == t0 + kStopGrace);
  CHECK(r.stop.Poll() == t0 + kStopGrace);  // nothing due yet
  r.clock.Advance(kStopGrace - milliseconds(1));
  CHECK(r.stop.Poll() == t0 + kStopGrace);
  CHECK(r.sent().empty());

  r.clock.Advance(milliseconds(1));
  CHECK(r.stop.Poll() == t0 + kStopGrace + kTermGrace);
  CHECK(r.sent() == Rig::Signals{{kPid, SIGTERM}});

  r.clock.Advance(kTermGrace - milliseconds(1));
  r.stop.Poll();
  CHECK(r.sent() == Rig::Signals{{kPid, SIGTERM}});
  r.clock.Advance(milliseconds(1));
  CHECK_FALSE(r.stop.Poll());  // nothing after the SIGKILL
  CHECK(r.sent() == Rig::Signals{{kPid, SIGTERM}, {kPid, SIGKILL}});

  r.clock.Advance(std::chrono::hours(1));
  CHECK_FALSE(r.stop.Poll());
  CHECK(r.sent().size() == 2);
  CHECK(r.launcher.signals.empty());  // the process group, never the pid alone
}

TEST_CASE("the term grace is measured from the SIGTERM, not from the stop request") {
  Rig r;
  REQUIRE(r.stop.Request());
  // The timer came late: the SIGTERM goes out 10 s after the request.
  r.clock.Advance(milliseconds(10000));
  const auto term_at = r.clock.Now();
  CHECK(r.stop.Poll() == term_at + kTermGrace);
  CHECK(r.sent() == Rig::Signals{{kPid, SIGTERM}});  // one signal a call
  r.clock.Advance(kTermGrace - milliseconds(1));
  r.stop.Poll();
  CHECK(r.sent().size() == 1);
  r.clock.Advance(milliseconds(1));
  r.stop.Poll();
  CHECK(r.sent().back() == std::make_pair(kPid, SIGKILL));
}

TEST_CASE("an exit during the stop grace cancels the escalation") {
  Rig r;
  REQUIRE(r.stop.Request());
  r.clock.Advance(kStopGrace - milliseconds(1));
  r.stop.Poll();
  r.stop.Exited();
  CHECK_FALSE(r.stop.NextDeadline());
  r.clock.Advance(kStopGrace + kTermGrace);
  CHECK_FALSE(r.stop.Poll());
  CHECK(r.sent().empty());
  CHECK(r.stop.requested());  // it was stopped by the agent
}

TEST_CASE("an exit during the term grace cancels the SIGKILL") {
  Rig r;
  REQUIRE(r.stop.Request());
  r.clock.Advance(kStopGrace);
  r.stop.Poll();
  REQUIRE(r.sent() == Rig::Signals{{kPid, SIGTERM}});
  r.stop.Exited();
  r.clock.Advance(kTermGrace);
  CHECK_FALSE(r.stop.Poll());
  CHECK(r.sent() == Rig::Signals{{kPid, SIGTERM}});
}

TEST_CASE("a second stop request does not restart the grace") {
  Rig r;
  const auto t0 = r.clock.Now();
  REQUIRE(r.stop.Request());
  r.clock.Advance(milliseconds(2000));
  CHECK_FALSE(r.stop.Request());  // no second stop message
  CHECK(r.stop.NextDeadline() == t0 + kStopGrace);
  r.clock.Advance(milliseconds(1000));
  r.stop.Poll();
  CHECK(r.sent() == Rig::Signals{{kPid, SIGTERM}});
  CHECK_FALSE(r.stop.Request());  // nor during the term grace
  CHECK(r.stop.NextDeadline() == t0 + kStopGrace + kTermGrace);
}

TEST_CASE("a worker that exited before the stop request is not stopped") {
  Rig r;
  r.stop.Exited();
  CHECK_FALSE(r.stop.Request());
  CHECK_FALSE(r.stop.requested());
  r.clock.Advance(kStopGrace + kTermGrace);
  CHECK_FALSE(r.stop.Poll());
  CHECK(r.sent().empty());
}

TEST_CASE("zero graces still send one signal a call, in order") {
  FakeClock clock;
  RecordingLauncher launcher;
  StopEscalation stop(&clock, &launcher, kPid, milliseconds(0), milliseconds(0));
  REQUIRE(stop.Request());
  CHECK(stop.Poll() == clock.Now());
  CHECK(launcher.group_signals == Rig::Signals{{kPid, SIGTERM}});
  CHECK_FALSE(stop.Poll());
  CHECK(launcher.group_signals == Rig::Signals{{kPid, SIGTERM}, {kPid, SIGKILL}});
}

TEST_CASE("SkipGrace: a failed attempt's survivors get SIGTERM at once, then the term grace") {
  Rig r;
  CHECK_FALSE(r.stop.SkipGrace());  // nothing requested yet
  REQUIRE(r.stop.Request());
  r.clock.Advance(milliseconds(500));  // a graceful stop was already under way
  const auto t1 = r.clock.Now();
  REQUIRE(r.stop.SkipGrace());
  CHECK(r.stop.Poll() == t1 + kTermGrace);
  CHECK(r.sent() == Rig::Signals{{kPid, SIGTERM}});
  CHECK_FALSE(r.stop.SkipGrace());  // SIGTERM already sent: nothing to skip
  r.clock.Advance(kTermGrace);
  r.stop.Poll();
  CHECK(r.sent() == Rig::Signals{{kPid, SIGTERM}, {kPid, SIGKILL}});

  Rig exited;
  REQUIRE(exited.stop.Request());
  exited.stop.Exited();
  CHECK_FALSE(exited.stop.SkipGrace());
  CHECK_FALSE(exited.stop.Poll());
  CHECK(exited.sent().empty());
}
