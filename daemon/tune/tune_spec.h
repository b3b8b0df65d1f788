// TuneSpec: a parsed and validated tune spec (DESIGN §8 "Tune"):
//   {"trainer": <job spec>, "param_space": {...}, "tune_config": {...}}
// Parsing checks everything that can be checked without the cluster: the tune_config's
// fields (names, types, ranges; the scheduler's via MakeScheduler is the controller's
// job, not this file's), and the param_space (see SearchSpace::Parse). The trainer's own
// validation (the job spec parser) runs on each trial's spec in the daemon, not here.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "daemon/tune/search_space.h"

namespace traintl::tune {

struct TuneConfig {
  std::string metric;  // required: the reported metric trials are compared by
  std::string mode;    // required: "min" | "max"
  // Trials to run: per grid point when param_space has grid_search values; -1 = as many
  // as time_budget_s allows (requires time_budget_s). Default 1.
  int64_t num_samples = 1;
  int max_concurrent_trials = 0;  // 0 = no limit but the cluster's capacity. Default 0.
  double time_budget_s = 0;       // 0 = no budget. Default 0.
  // search_alg: {"type": "random" | "grid", "seed": N}. "grid" requires grid_search
  // values and no random ones. Default type "random".
  std::string search_alg = "random";
  std::optional<uint64_t> seed;  // absent: the daemon picks one and records it
  // tune_config.scheduler as given (null: FIFO); MakeScheduler validates it.
  nlohmann::json scheduler;
};

struct TuneSpec {
  nlohmann::json trainer;  // the job spec as given (an object)
  SearchSpace space;
  TuneConfig config;
  nlohmann::json param_space;  // as given (an object), for views
  // Trials the experiment will create: num_samples x grid points; -1 = unbounded.
  int64_t TotalTrials() const;
};

// InvalidArgument naming the field: "tune_config.mode: must be \"min\" or \"max\"",
// "tune_config.num_samples: -1 needs time_budget_s", "tune_config.metrics: unknown field
// (did you mean \"metric\"?)", "trainer: required", param_space errors as
// SearchSpace::Parse words them.
Result<TuneSpec> ParseTuneSpec(const nlohmann::json& doc);

// The spec back as JSON (what the head stores and `tune status` shows), with defaults
// filled in and the seed as given (the controller stores the seed it picked separately).
nlohmann::json TuneSpecToJson(const TuneSpec& spec);

}  // namespace traintl::tune
