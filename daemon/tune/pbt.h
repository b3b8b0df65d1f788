// PopulationBasedTraining: Ray Tune's (asynchronous) PBT (tune_config.scheduler
// {"type": "pbt"}), with Ray's parameters and defaults (time_attr "time_total_s",
// perturbation_interval 60, burn_in_period 0, hyperparam_mutations, quantile_fraction
// 0.25, resample_probability 0.25, perturbation_factors [1.2, 0.8]) and steps:
//   - a result is a perturbation step when time_attr >= burn_in_period and at least
//     perturbation_interval past the trial's last step; the step records the trial's
//     score (the metric, negated for mode "min");
//   - the live trials with a score are ranked by it; the bottom and top
//     ceil(n * quantile_fraction) (at most n/2) are the quantiles; a trial in the top one
//     becomes a donor candidate until its next step (Ray checkpoints it then: only such a
//     trial is cloned), a trial in the bottom one picks a top trial at random and, if that
//     one is a candidate, exploits it: kExploit with the donor and the donor's config
//     explored, and the trial takes over the donor's last step time;
//   - explore, per hyperparam_mutations key (an object mirroring the config's nesting):
//     a list of values: with resample_probability (or when the current value is not in
//     the list) a random value of it, else the value next to the current one, left or
//     right (clamped to the list's ends); a domain ({"uniform": [lo, hi]}, ...): with
//     resample_probability a fresh sample, else the value times a random perturbation
//     factor, not clamped to the domain (as Ray); an integer value stays an integer
//     (truncated). A {"choice": [...]} domain is continuous, as in Ray: use a list for
//     categories.
// Where it differs from Ray:
//   - no time-multiplexing: Ray pauses a trial at each step while others wait for
//     resources; here the controller runs trials as capacity allows and a step gets
//     kContinue or kExploit;
//   - a key missing from the config (or a non-numeric value under a domain) is
//     resampled rather than being filled in at OnTrialAdd (the controller owns configs;
//     kExploit's new_config carries it);
//   - custom_explore_fn, synch: true, log_config and require_attrs are not supported;
//   - a replayed result at the time of the trial's last exploit gets that same kExploit
//     again (idempotent after a head failover).
//
// Thread-safety: not thread-safe (see TrialScheduler).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "daemon/tune/domain.h"
#include "daemon/tune/trial_scheduler.h"

namespace traintl::tune {

// One key of hyperparam_mutations.
struct PbtMutation {
  enum class Kind { kNested, kList, kDomain };
  std::string key;
  Kind kind = Kind::kList;
  std::vector<PbtMutation> children;  // kNested
  nlohmann::json values;              // kList: a non-empty array
  Domain domain;                      // kDomain
};

// hyperparam_mutations (a non-empty object) parsed; InvalidArgument naming
// "<where>.<key>..." for an empty object or list, a domain ParseDomain refuses, a
// grid_search, or a value that is neither object nor list.
Result<std::vector<PbtMutation>> ParsePbtMutations(const nlohmann::json& v,
                                                   const std::string& where);

struct PbtOptions {
  std::string time_attr = "time_total_s";
  double perturbation_interval = 60;
  double burn_in_period = 0;
  std::vector<PbtMutation> mutations;  // parsed from hyperparam_mutations
  double quantile_fraction = 0.25;
  double resample_probability = 0.25;
  std::vector<double> perturbation_factors = {1.2, 0.8};
};

class PopulationBasedTraining : public TrialScheduler {
 public:
  // `options` must be valid (MakeScheduler checks them); mode is "min" or "max".
  PopulationBasedTraining(PbtOptions options, std::string metric, const std::string& mode,
                          uint64_t seed);

  void OnTrialAdd(const std::string& trial, const nlohmann::json& config) override;
  SchedulerDecision OnTrialResult(const std::string& trial, const nlohmann::json& result) override;
  void OnTrialComplete(const std::string& trial) override;
  nlohmann::json SaveState() const override;
  Status LoadState(const nlohmann::json& state) override;

  // The trial's current config (as added, or as its last exploit set it); null if unknown.
  nlohmann::json Config(const std::string& trial) const;
  // Ray's _explore: `config` with every mutated key explored, drawing from the Rng.
  nlohmann::json Explore(const nlohmann::json& config);

 private:
  struct TrialState {
    nlohmann::json config = nlohmann::json::object();
    bool has_score = false;
    double last_score = 0;  // signed: higher is better
    double last_perturbation_time = 0;
    double last_train_time = 0;
    bool donor_candidate = false;  // top quantile at its last step (Ray: has last_checkpoint)
    bool finished = false;
    // The last exploit, replayed for a result at the same time.
    bool has_exploit = false;
    double exploit_time = 0;
    std::string exploit_donor;
    nlohmann::json exploit_config;
    std::string exploit_reason;
  };

  nlohmann::json ExploreLevel(const nlohmann::json& config,
                              const std::vector<PbtMutation>& mutations);
  double Signed(double v) const { return max_mode_ ? v : -v; }

  PbtOptions opt_;
  std::string metric_;
  bool max_mode_ = true;
  Rng rng_;
  std::vector<std::string> order_;  // trials in the order added (Ray's ranking ties)
  std::map<std::string, TrialState> trials_;
};

}  // namespace traintl::tune
