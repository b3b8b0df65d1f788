// AsyncHyperBandScheduler (ASHA): Ray Tune's asynchronous successive halving
// (tune_config.scheduler {"type": "asha"} or "async_hyperband"), with Ray's parameters,
// defaults and arithmetic:
//   - each bracket s has rungs at grace_period * reduction_factor^(k + s), k = 0 ..
//     int(log(max_t / grace_period) / log(reduction_factor) - s + 1) - 1;
//   - a trial whose time_attr reaches a rung for the first time is recorded there; it is
//     stopped when its value (negated for mode "min") is below the rung's cutoff, numpy's
//     nanpercentile of the values recorded before it at (1 - 1/reduction_factor) * 100;
//   - a result at or past max_t stops the trial ("reached max_t") when stop_last_trials;
//   - a new trial joins bracket i with probability softmax(rung count)_i, drawn from the Rng.
// Where it differs from Ray, for a service that replays results after a failover:
//   - a stop is sticky: any later result of a trial once told to stop is told to stop
//     again with the same reason (a replayed result at a recorded rung does not record a
//     second time: Ray's rung walk already skips rungs a trial is recorded at);
//   - OnTrialComplete records the trial's last result (Ray records the final result it is
//     given) and results of unknown trials add them first.
//
// Thread-safety: not thread-safe (see TrialScheduler).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/tune/domain.h"
#include "daemon/tune/trial_scheduler.h"

namespace traintl::tune {

struct AshaOptions {
  std::string time_attr = "training_iteration";
  double max_t = 100;
  double grace_period = 1;
  double reduction_factor = 4;
  int64_t brackets = 1;
  bool stop_last_trials = true;
};

class AsyncHyperBandScheduler : public TrialScheduler {
 public:
  // `options` must be valid (MakeScheduler checks them); mode is "min" or "max".
  AsyncHyperBandScheduler(AshaOptions options, std::string metric, const std::string& mode,
                          uint64_t seed);

  void OnTrialAdd(const std::string& trial, const nlohmann::json& config) override;
  SchedulerDecision OnTrialResult(const std::string& trial, const nlohmann::json& result) override;
  void OnTrialComplete(const std::string& trial) override;
  nlohmann::json SaveState() const override;
  Status LoadState(const nlohmann::json& state) override;

  // Bracket b's milestones, highest first (for tests and views).
  std::vector<double> Milestones(size_t bracket) const;
  // The cutoff of bracket b's rung at `milestone` in the metric's own sign, or nullopt
  // while nothing is recorded there.
  std::optional<double> Cutoff(size_t bracket, double milestone) const;
  // The bracket `trial` was assigned to, or -1.
  int BracketOf(const std::string& trial) const;

 private:
  struct Rung {
    double milestone = 0;
    std::map<std::string, double> recorded;  // trial -> value, signed so higher is better
  };
  struct Bracket {
    std::vector<Rung> rungs;  // highest milestone first, as Ray walks them
  };
  struct TrialInfo {
    int bracket = 0;
    bool has_last = false;  // whether a result with time_attr and metric came
    double last_time = 0;
    double last_value = 0;  // signed
  };

  // Ray's _Bracket.on_result: records the trial at the highest rung it reached and has not
  // been recorded at; kStop (with its reason) when below that rung's cutoff.
  SchedulerDecision OnBracketResult(Bracket& bracket, const std::string& trial, double time,
                                    double value);
  double Signed(double v) const { return max_mode_ ? v : -v; }

  AshaOptions opt_;
  std::string metric_;
  bool max_mode_ = true;
  Rng rng_;
  std::vector<Bracket> brackets_;
  std::map<std::string, TrialInfo> trials_;
  std::map<std::string, std::string> stopped_;  // trial -> reason it was told to stop
  std::set<std::string> completed_;             // trials that ended (OnTrialComplete)
};

}  // namespace traintl::tune
