// HeadLease: the timing decisions of a node's link to its head (DESIGN §5), apart from the
// threads and sockets that act on them, so that tests drive them with a FakeClock.
//
// Events go in (a head answered a heartbeat; this node is the head itself), decisions come
// out: when the next heartbeat is due, whether this node must fence itself - stop every
// local worker, because no head answered for `fence_fraction` of the loss bound and the
// head is about to declare this node LOST and restart its attempts elsewhere - and when it
// may unfence (the next answer of any head, or becoming the head). A failed heartbeat is
// no event: only the silence since the last answer counts, measured on the injected clock.
//
// Thread-safety: not thread-safe; HeadLink calls it under its mutex.
#pragma once

#include <chrono>

#include "common/clock.h"

namespace traintl {

struct HeadLeaseOptions {
  // Heartbeat period. Default 500 ms.
  std::chrono::milliseconds heartbeat_interval{500};
  // The head marks a node LOST after this much silence. Default 4 s.
  std::chrono::milliseconds loss_timeout{4000};
  // The node fences itself after this fraction of `loss_timeout` without a head, so that
  // its workers are gone before the head restarts their attempts elsewhere. Default 0.6.
  double fence_fraction = 0.6;
  // How often a voter looks for libraries it lacks on the head. Default 1 s.
  std::chrono::milliseconds blob_sync_interval{1000};
};

class HeadLease {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // What CheckFence decided.
  struct Fence {
    bool fence = false;  // stop every local worker (again: one may have started since)
    bool first = false;  // the node was not fenced before this check
  };

  // The silence is measured from construction: a node that never reaches a head fences
  // itself after fence_after() like one that lost it. `clock` must outlive this.
  HeadLease(HeadLeaseOptions options, const Clock* clock);

  // fence_fraction * loss_timeout.
  std::chrono::milliseconds fence_after() const { return fence_after_; }
  bool fenced() const { return fenced_; }

  // A head acknowledged a heartbeat now (or this node is the head: it has a head by
  // definition). Unfences; returns true when the node was fenced.
  bool OnHeadAnswered();

  // Whether the node must fence itself now: no head answered for longer than
  // fence_after(). Sticks until the next OnHeadAnswered.
  Fence CheckFence();

  // When the heartbeat that began at `started` (read from the clock) is followed by the
  // next one.
  TimePoint NextHeartbeat(TimePoint started) const { return started + options_.heartbeat_interval; }

  // True when a voter's library sync is due (none in the last blob_sync_interval); the
  // sync counts as done from now.
  bool TakeBlobSync();

 private:
  // Constant after construction.
  const HeadLeaseOptions options_;
  const Clock* const clock_;
  const std::chrono::milliseconds fence_after_;

  TimePoint last_answer_;
  TimePoint last_blob_sync_{};
  bool fenced_ = false;
};

}  // namespace traintl
