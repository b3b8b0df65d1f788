// StopEscalation: the stop of one worker after its stop message - SIGTERM to its process
// group once `stop_grace` has passed, then SIGKILL once `term_grace` has passed after the
// SIGTERM - as a decision read from a Clock and carried out through a ProcessLauncher.
// WorkerPool owns one per worker and calls Poll when the time Poll returned has come (an
// asio timer, which only schedules); tests drive it with a FakeClock and a fake launcher.
//
// An exit of the worker ends the escalation (no signal after it), and a second stop
// request changes nothing (the grace is not restarted).
//
// Thread-safety: not thread-safe; WorkerPool uses it on its io_context thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>

#include "common/clock.h"
#include "daemon/node/process_launcher.h"

namespace traintl {

class StopEscalation {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // `clock` and `launcher` are not owned and must outlive this; `pgid` is the worker's
  // process group.
  StopEscalation(const Clock* clock, ProcessLauncher* launcher, pid_t pgid,
                 std::chrono::milliseconds stop_grace, std::chrono::milliseconds term_grace);

  // The stop was asked for now. True the first time, before the worker exited: the
  // caller sends the stop message and calls Poll at the returned NextDeadline.
  bool Request();
  // Ends the stop grace now (a failed attempt has nothing left to save): the next Poll
  // sends SIGTERM. True when that changed anything (a stop was requested, no SIGTERM yet,
  // the worker has not exited).
  bool SkipGrace();
  // The worker exited: no signal is sent from now on.
  void Exited();
  // Sends what is due now - SIGTERM when the stop grace has passed, or SIGKILL when the
  // term grace has passed after the SIGTERM; each once, at most one a call - and returns
  // when to call again: nullopt when nothing more will be sent.
  std::optional<TimePoint> Poll();
  // When the next signal is due; nullopt when none is pending.
  std::optional<TimePoint> NextDeadline() const;

  bool requested() const { return stage_ != Stage::kIdle; }

 private:
  enum class Stage { kIdle, kStopSent, kTermSent, kKillSent };

  // Constant after construction.
  const Clock* const clock_;
  ProcessLauncher* const launcher_;
  const pid_t pgid_;
  const std::chrono::milliseconds stop_grace_;
  const std::chrono::milliseconds term_grace_;

  Stage stage_ = Stage::kIdle;
  TimePoint since_;      // when the current stage began
  bool exited_ = false;  // the worker exited: nothing more is sent
};

}  // namespace traintl
