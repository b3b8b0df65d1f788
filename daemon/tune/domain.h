// Search-space domains (DESIGN §8 "Tune"): one `{"uniform": [lo, hi]}`-style object, what
// it means, and how a value is drawn from it; plus Rng, the random stream every draw uses.
//
// Rng is a fixed algorithm (xoshiro256** seeded through splitmix64) with its own
// floating-point and normal transforms, never <random>'s distributions, so one seed gives
// the same trial configs on every platform and release.
//
// Thread-safety: plain values; an Rng is not shared between threads.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace traintl::tune {

class Rng {
 public:
  explicit Rng(uint64_t seed);
  // An independent stream for `(seed, index)`: trial i's draws do not depend on how many
  // draws trials before it made.
  static Rng ForIndex(uint64_t seed, uint64_t index);

  uint64_t Next();
  double Uniform01();          // [0, 1), 53 random bits
  double Normal();             // standard normal (Box-Muller)
  uint64_t Below(uint64_t n);  // [0, n) without modulo bias; n > 0

  // The whole generator state and back, so that a trial scheduler restored from its saved
  // state draws exactly what the saved one would have drawn next.
  std::array<uint64_t, 4> state() const { return {s_[0], s_[1], s_[2], s_[3]}; }
  static Rng FromState(const std::array<uint64_t, 4>& state) {
    Rng rng(0);
    for (int i = 0; i < 4; ++i) rng.s_[i] = state[i];
    return rng;
  }

 private:
  uint64_t s_[4];
};

struct Domain {
  enum class Kind {
    kUniform,      // {"uniform": [lo, hi]}: float in [lo, hi)
    kQUniform,     // {"quniform": [lo, hi, q]}: uniform rounded to a multiple of q
    kLogUniform,   // {"loguniform": [lo, hi]}: log-uniform in [lo, hi), 0 < lo < hi
    kQLogUniform,  // {"qloguniform": [lo, hi, q]}
    kRandInt,      // {"randint": [lo, hi]}: integer in [lo, hi) (Ray's: upper bound excluded)
    kRandn,        // {"randn": [mean, sd]}
    kChoice,       // {"choice": [v, ...]}: one of the values, uniformly
    kGridSearch,   // {"grid_search": [v, ...]}: every value, one per grid point
  };
  Kind kind = Kind::kUniform;
  double lo = 0, hi = 0, q = 0;  // mean/sd for kRandn
  nlohmann::json values;         // kChoice and kGridSearch: a non-empty array

  // A value drawn from this domain; not for kGridSearch (the search space walks grids).
  // Integers (randint, quniform/qloguniform whose q is an integer) come back as JSON
  // integers.
  nlohmann::json Sample(Rng& rng) const;
  // Its JSON form, as it was written.
  nlohmann::json ToJson() const;
};

// Whether `v` is meant as a domain: an object with exactly one key that is a distribution
// name this release knows, a name of Ray's it does not support, or a near-miss spelling
// of either (which ParseDomain then refuses by name).
bool IsDomain(const nlohmann::json& v);

// Parses one domain. InvalidArgument naming `where` (e.g.
// "param_space.train_loop_config.lr: loguniform needs 0 < lo < hi") for wrong arity, types
// or ranges, an unknown or unsupported distribution (with a did-you-mean), or an empty list.
Result<Domain> ParseDomain(const nlohmann::json& v, const std::string& where);

}  // namespace traintl::tune
