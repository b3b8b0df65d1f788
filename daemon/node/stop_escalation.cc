#include "daemon/node/stop_escalation.h"

#include <signal.h>

namespace traintl {

StopEscalation::StopEscalation(const Clock* clock, ProcessLauncher* launcher, pid_t pgid,
                               std::chrono::milliseconds stop_grace,
                               std::chrono::milliseconds term_grace)
    : clock_(clock),
      launcher_(launcher),
      pgid_(pgid),
      stop_grace_(stop_grace),
      term_grace_(term_grace) {}

bool StopEscalation::Request() {
  if (stage_ != Stage::kIdle || exited_) return false;
  stage_ = Stage::kStopSent;
  since_ = clock_->Now();
  return true;
}

bool StopEscalation::SkipGrace() {
  if (stage_ != Stage::kStopSent || exited_) return false;
  since_ = clock_->Now() - stop_grace_;
  return true;
}

void StopEscalation::Exited() { exited_ = true; }

std::optional<StopEscalation::TimePoint> StopEscalation::Poll() {
  if (exited_) return std::nullopt;
  const TimePoint now = clock_->Now();
  if (stage_ == Stage::kStopSent && now >= since_ + stop_grace_) {
    launcher_->SignalGroup(pgid_, SIGTERM);
    stage_ = Stage::kTermSent;
    since_ = now;
  } else if (stage_ == Stage::kTermSent && now >= since_ + term_grace_) {
    launcher_->SignalGroup(pgid_, SIGKILL);
    stage_ = Stage::kKillSent;
  }
  return NextDeadline();
}

std::optional<StopEscalation::TimePoint> StopEscalation::NextDeadline() const {
  if (exited_) return std::nullopt;
  switch (stage_) {
    case Stage::kStopSent:
      return since_ + stop_grace_;
    case Stage::kTermSent:
      return since_ + term_grace_;
    case Stage::kIdle:
    case Stage::kKillSent:
      return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace traintl
