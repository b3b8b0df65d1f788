// SearchSpace: a tune spec's param_space (DESIGN §8 "Tune") as the list of its domains,
// and the config each trial gets.
//
// param_space mirrors the trainer's job spec: a domain object (domain.h) stands where the
// value goes, e.g. {"train_loop_config": {"lr": {"loguniform": [1e-4, 0.1]}},
// "scaling_config": {"num_workers": {"grid_search": [1, 2]}}}; plain values are constants
// set as they are. Under "train_loop_config" any key may appear (it is the user's dict);
// elsewhere a path must name a field present in the trainer's spec.
//
// Trial configs are a pure function of (seed, trial index): trial i takes grid point
// i % GridSize() (the grid repeated num_samples times, as Ray's BasicVariantGenerator
// walks it) and draws its random values from Rng::ForIndex(seed, i).
//
// Thread-safety: immutable after Parse; const methods may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "daemon/tune/domain.h"

namespace traintl::tune {

class SearchSpace {
 public:
  struct Param {
    std::vector<std::string> path;  // e.g. {"train_loop_config", "lr"}
    Domain domain;
  };

  SearchSpace() = default;

  // InvalidArgument naming the path ("param_space.scaling_config.num_worker: no such field
  // in the trainer's job spec (did you mean \"num_workers\"?)",
  // "param_space.train_loop_config.lr: unknown distribution \"logunifrm\" (did you mean
  // \"loguniform\"?)", "...: grid_search needs a non-empty list").
  static Result<SearchSpace> Parse(const nlohmann::json& param_space,
                                   const nlohmann::json& trainer);

  const std::vector<Param>& params() const { return params_; }
  bool has_grid() const;
  bool has_random() const;  // any domain other than grid_search
  // Product of the grid_search lists' lengths; 1 without any.
  int64_t GridSize() const;

  // Trial `index`'s config: param_space with every domain replaced by its value (grid
  // point, then random draws) and constants kept, e.g. {"train_loop_config": {"lr":
  // 0.0031}}.
  nlohmann::json TrialConfig(uint64_t seed, int64_t index) const;
  // `trainer` with `config` deep-merged in (objects merge key by key; anything else
  // replaces): the trial's job spec.
  static nlohmann::json Apply(const nlohmann::json& trainer, const nlohmann::json& config);
  // "lr=0.0031,hidden=64": the config's leaves under their last path element, for trial
  // names and tables (Ray's trial dir suffix); numbers to 4 significant digits.
  static std::string ShortName(const nlohmann::json& config);
  // The values `config` holds at the params' paths (the sampled ones, not the constants),
  // nested as in config: ShortName(ParamValues(config)) names a trial by what was searched,
  // as Ray's trial names do.
  nlohmann::json ParamValues(const nlohmann::json& config) const;

 private:
  nlohmann::json param_space_ = nlohmann::json::object();
  std::vector<Param> params_;  // in the order of a depth-first walk, keys sorted
};

}  // namespace traintl::tune
