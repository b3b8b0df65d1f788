// HyperBandScheduler: Ray Tune's synchronous HyperBand (tune_config.scheduler
// {"type": "hyperband"}), with Ray's parameters (time_attr, max_t = 81,
// reduction_factor = 3, stop_last_trials) and bookkeeping:
//   - s_max_1 = round(log(max_t) / log(eta)) + 1 brackets per band; bracket s holds
//     n0 = ceil(s_max_1 / (s + 1) * eta^s) trials, its first milestone is
//     r0 = int(max_t * eta^-s) (brackets with r0 = 0 are skipped, as Ray does);
//   - a new trial joins the current bracket until that holds n live trials, then the next
//     bracket of the band (s = 0, 1, ...), then a new band;
//   - a trial reaching its bracket's milestone is paused (kPause) until every live trial
//     of the bracket has reached it; then the top ceil(n / eta) by the metric go on to
//     milestone min(r * eta, max_t) (the one reporting continues, paused ones come back
//     from TakeTrialsToResume) and the others stop (it gets kStop, paused ones come back
//     from TakeTrialsToStop); when the last halving is done and every live trial reached
//     the last milestone the bracket is finished and they stop (with stop_last_trials;
//     without it they run on).
// Where it differs from Ray:
//   - CanAddTrial stays true: Ray never holds a trial back (it adds every trial to a
//     bracket, opening brackets and bands as needed); holding new trials back while a
//     bracket waits would halve brackets among fewer trials. A trial added but not yet
//     reporting counts at time 0, so the controller should call OnTrialAdd for every
//     trial it creates, even one still waiting for resources (Ray's PENDING trials), or
//     a bracket whose running trials all reach a milestone is halved without it;
//   - when every good trial of a halving is already past the next milestone (time_attr
//     jumped), the bracket is decided again at once instead of waiting for a result that
//     would never come; a trial ending (OnTrialComplete) always lets its bracket be
//     decided (Ray skips that after the bracket's first halving, and once the others
//     wait at the last milestone, leaving them paused); a bracket with no live trial is
//     left as it is (Ray halves it once);
//   - a stop is sticky: a result of a trial once told to stop gets kStop again; a result
//     without the metric or time_attr gets kContinue and is not recorded.
//
// Thread-safety: not thread-safe (see TrialScheduler).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/tune/trial_scheduler.h"

namespace traintl::tune {

struct HyperBandOptions {
  std::string time_attr = "training_iteration";
  double max_t = 81;
  double reduction_factor = 3;
  bool stop_last_trials = true;
};

class HyperBandScheduler : public TrialScheduler {
 public:
  // `options` must be valid (MakeScheduler checks them: max_t >= 1, reduction_factor > 1).
  HyperBandScheduler(HyperBandOptions options, std::string metric, const std::string& mode);

  void OnTrialAdd(const std::string& trial, const nlohmann::json& config) override;
  SchedulerDecision OnTrialResult(const std::string& trial, const nlohmann::json& result) override;
  void OnTrialComplete(const std::string& trial) override;
  std::vector<std::string> TakeTrialsToResume() override;
  std::vector<std::pair<std::string, std::string>> TakeTrialsToStop() override;
  nlohmann::json SaveState() const override;
  Status LoadState(const nlohmann::json& state) override;

  // For tests and views: the bracket `trial` is in (-1: none), and a bracket's current
  // milestone and trial capacity.
  int BracketOf(const std::string& trial) const;
  double Milestone(int bracket) const;
  int64_t Capacity(int bracket) const;

 private:
  struct Live {
    std::string trial;
    bool has_result = false;
    double time = 0;
    double value = 0;  // signed: higher is better
  };
  struct Bracket {
    int s = 0;
    int64_t n = 0;           // trials the bracket holds at this stage
    double r = 0;            // this stage's milestone (Ray's _r)
    double cumul_r = 0;      // the milestone results are compared with (Ray's _cumul_r)
    int halves = 0;          // halvings left
    int64_t joined = 0;      // trials that ever joined: it is filled at n, even after some
                             // ended (trials are added as they start, not all up front)
    std::vector<Live> live;  // in the order trials joined (Ray's dict order breaks ties)
  };

  int64_t N0(int s) const;
  double R0(int s) const;
  double Signed(double v) const { return max_mode_ ? v : -v; }
  Live* FindLive(Bracket& b, const std::string& trial);
  static double TimeOf(const Live& l) { return l.has_result ? l.time : 0; }
  bool CurIterDone(const Bracket& b) const;
  bool Finished(const Bracket& b) const;
  bool ContinueTrial(const Bracket& b, const Live& l) const;
  void Remove(Bracket& b, const std::string& trial);
  // Stops `trial` for good: the reporting one through `decision`, another through
  // TakeTrialsToStop.
  void StopTrial(Bracket& b, const std::string& trial, const std::string& current,
                 const std::string& reason, SchedulerDecision* decision);
  // Ray's _process_bracket: decides the bracket when all its live trials reached the
  // milestone. `current` is the trial whose result is being handled ("" for none); the
  // decision returned is for it.
  SchedulerDecision ProcessBracket(int bracket, const std::string& current);
  void Forget(const std::string& trial);

  HyperBandOptions opt_;
  std::string metric_;
  bool max_mode_ = true;
  int s_max_1_ = 1;

  std::vector<Bracket> brackets_;
  std::vector<std::vector<int>> bands_{{}};  // bracket indices per band; -1: skipped (r0 = 0)
  int band_idx_ = 0;
  int cur_bracket_ = -1;
  std::map<std::string, int> trial_bracket_;
  std::set<std::string> paused_;
  std::vector<std::string> to_resume_;
  std::vector<std::pair<std::string, std::string>> to_stop_;
  std::map<std::string, std::string> stopped_;  // trial -> reason it was told to stop
  std::set<std::string> completed_;
};

}  // namespace traintl::tune
