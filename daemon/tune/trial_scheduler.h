// TrialScheduler: decides, result by result, whether a tuning trial goes on (DESIGN §8
// "Tune": tune_config.scheduler with Ray's types and parameter names: fifo, asha,
// hyperband, pbt). Pure: no clock, no I/O; every random choice comes from an Rng seeded
// by the experiment's seed and kept in the state, so a new head that loads SaveState()'s
// JSON decides exactly as the old one would have.
//
// The head's experiment controller feeds it: every trial when created (OnTrialAdd), each
// result a trial reports (OnTrialResult: the user's metrics plus "training_iteration",
// the 1-based count of the trial's results across all its jobs, and "time_total_s"), and
// the trial's end (OnTrialComplete). It carries out the decisions: kStop ends the trial's
// job as STOPPED with `reason`; kPause ends the job and keeps the trial to resume later
// from its own latest checkpoint (HyperBand); kExploit ends the job and starts the trial
// again from `donor`'s latest checkpoint with `new_config` (PBT).
//
// Results can arrive again after a head failover (a trial that restarted from a
// checkpoint reports the same training_iteration twice): recording one must be idempotent
// per (trial, time_attr value).
//
// Thread-safety: not thread-safe; the controller calls it from one thread.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "common/status.h"

namespace traintl::tune {

struct SchedulerDecision {
  enum class Action { kContinue, kStop, kPause, kExploit };
  Action action = Action::kContinue;
  // kStop / kPause: why, for people ("ASHA: loss 0.93 is worse than the rung's cutoff
  // 0.41 at training_iteration 4"; "reached max_t 10").
  std::string reason;
  std::string donor;          // kExploit: the trial whose latest checkpoint to restore
  nlohmann::json new_config;  // kExploit: the trial's whole new config (param_space nesting)
};

class TrialScheduler {
 public:
  virtual ~TrialScheduler() = default;

  // A trial was created with `config`: its resolved param_space values, nested as
  // param_space is (e.g. {"train_loop_config": {"lr": 0.01}}).
  virtual void OnTrialAdd(const std::string& trial, const nlohmann::json& config) = 0;
  // One result of a running trial (a JSON object; the metric or time_attr may be absent:
  // then kContinue).
  virtual SchedulerDecision OnTrialResult(const std::string& trial,
                                          const nlohmann::json& result) = 0;
  // The trial ended for good (finished, failed, stopped): it takes no further part.
  virtual void OnTrialComplete(const std::string& trial) = 0;
  // Paused trials that may run again now, each returned once (HyperBand's promotions).
  virtual std::vector<std::string> TakeTrialsToResume() { return {}; }
  // Paused trials stopped for good, with the reason (HyperBand's bracket losers), each
  // returned once.
  virtual std::vector<std::pair<std::string, std::string>> TakeTrialsToStop() { return {}; }
  // Whether a new trial may start now (HyperBand holds new trials back while a bracket
  // waits for its paused members to be decided). Default: yes.
  virtual bool CanAddTrial() const { return true; }
  // Whether a result may end or pause its trial: then the trial's ranks wait for the
  // decision after each report (JobEventListener::HoldsReports). Default: yes.
  virtual bool DecidesOnResults() const { return true; }

  // Everything needed to go on deciding, as JSON, and back. LoadState refuses
  // (InvalidArgument) JSON that SaveState of this type did not write.
  virtual nlohmann::json SaveState() const = 0;
  virtual Status LoadState(const nlohmann::json& state) = 0;
};

// The scheduler that tune_config.scheduler names (null or absent: FIFO), with the
// experiment's metric, mode ("min" | "max") and seed. InvalidArgument naming the field
// ("tune_config.scheduler.reduction_factor: must be > 1") for a bad type, unknown or
// mistyped parameter (did-you-mean) or out-of-range value.
Result<std::unique_ptr<TrialScheduler>> MakeScheduler(const nlohmann::json& scheduler,
                                                      const std::string& metric,
                                                      const std::string& mode, uint64_t seed);

// Helpers the scheduler implementations share; not meant for the controller.
namespace sched_internal {

// result[key] as a number, when it is one (the metric or time_attr of a result).
bool NumberAt(const nlohmann::json& result, const std::string& key, double* out);
// A number for people: integral values without a fraction ("4", not "4.000000").
std::string FormatNumber(double v);
// An Rng's state as JSON: four hex strings (JSON readers that hold numbers as doubles
// would round 64-bit values), and back.
nlohmann::json RngStateToJson(const std::array<uint64_t, 4>& state);
Result<std::array<uint64_t, 4>> RngStateFromJson(const nlohmann::json& v);
// InvalidArgument unless `state` is an object that SaveState of scheduler `type` wrote.
Status CheckStateType(const nlohmann::json& state, const std::string& type);

}  // namespace sched_internal

}  // namespace traintl::tune
