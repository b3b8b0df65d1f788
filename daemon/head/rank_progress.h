// RankProgress: what an attempt's ranks last said of their progress (traintl_progress:
// steps, each step's busy time, collectives entered, waiting now) and what the head
// concludes from it (DESIGN: issue 17):
//
// - a straggler: a rank whose busy time per step (the step's time not spent waiting for
//   peers: in synchronous data-parallel training every rank's step takes as long as the
//   slowest's, so the wall time cannot tell them apart) stays at 1.5x or more the median
//   of the other ranks' over the last kWindow steps;
// - a stalled collective: ranks have waited in collective K for longer than
//   max(kMinStall, kStallSteps x the median step time), and the ranks that have not
//   entered K (or, all having entered it, those not waiting in it: stopped mid-way) are
//   the ones named as lagging. A rank stopped by SIGSTOP sends nothing more; its last
//   word is exactly what tells it apart.
//   One frozen while it waited in K too looks like the others but for its silence: a
//   waiting rank repeats its progress every second, so a waiting rank not heard of for
//   kSilentS while another waiting one was is the one they wait for.
//
// Pure: times are passed in. Thread-safety: not thread-safe (the JobManager's io thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "proto/worker_events.h"

namespace traintl {

class RankProgress {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  static constexpr size_t kWindow = 10;       // steps a straggler must stay slow over
  static constexpr size_t kMinSteps = 5;      // steps before anyone is called slow
  static constexpr double kSlower = 1.5;      // x the peers' median
  static constexpr double kMinStallS = 2.0;   // a wait shorter than this is no stall
  static constexpr double kStallSteps = 3.0;  // ... nor one within 3 median step times
  static constexpr double kSilentS = 2.5;     // a waiting rank repeats itself every 1 s

  explicit RankProgress(int world_size) : ranks_(static_cast<size_t>(world_size)) {}

  void Update(int rank, const events::Progress& p, TimePoint received);

  struct Straggler {
    int rank = 0;
    double busy_s = 0;        // its median busy time per step over the window
    double peers_busy_s = 0;  // the median of the other ranks' medians
    double slower = 0;        // busy_s / peers_busy_s
  };
  std::vector<Straggler> Stragglers() const;

  struct Stall {
    int64_t collective = 0;    // the collective the waiting ranks are in
    std::vector<int> waiting;  // ranks waiting in it
    std::vector<int> lagging;  // ranks the waiting ones wait for
    double for_s = 0;          // the longest wait so far
  };
  std::optional<Stall> Stalled(TimePoint now) const;

  // {"ranks": [{"rank","node","steps","step_s","busy_s","collective_seq","in_collective",
  // "waiting_s","age_s"}], "stragglers": [{"rank","node","busy_s","peers_busy_s",
  // "slower"}], "stalled": {"collective","waiting","lagging","for_s"} | null}; null when no
  // rank has said anything.
  nlohmann::json View(TimePoint now, const std::vector<std::string>& rank_nodes) const;
  // One line for the log ("" when all is well): "rank 1 (node-b) is a straggler: 2.3x ...".
  std::string Summary(TimePoint now, const std::vector<std::string>& rank_nodes) const;

 private:
  struct Rank {
    bool heard = false;
    events::Progress last;
    TimePoint received{};
    TimePoint waiting_since{};  // received - waiting_s, when in_collective
    std::deque<double> busy;    // the last kWindow steps' busy times
    int64_t busy_steps = 0;     // the step count `busy` was last appended for
  };
  std::vector<Rank> ranks_;
};

}  // namespace traintl
