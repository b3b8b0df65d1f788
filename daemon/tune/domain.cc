#include "daemon/tune/domain.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/spelling.h"

namespace traintl::tune {
namespace {

using json = nlohmann::json;

// splitmix64's output function: a bijection on 64-bit values that spreads every input bit.
uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t SplitMix64(uint64_t& x) {
  x += 0x9E3779B97F4A7C15ULL;
  return Mix(x);
}

constexpr double kTwoPi = 6.283185307179586476925286766559;

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

const std::vector<std::string>& Supported() {
  static const std::vector<std::string> kNames = {"uniform",     "quniform",   "loguniform",
                                                  "qloguniform", "randint",    "randn",
                                                  "choice",      "grid_search"};
  return kNames;
}

// Ray Tune's other sampling functions: named so that a spec written for Ray is refused
// with a reason rather than a guess.
const std::vector<std::string>& RayUnsupported() {
  static const std::vector<std::string> kNames = {"lograndint", "qrandint",    "qlograndint",
                                                  "qrandn",     "sample_from", "func"};
  return kNames;
}

bool Contains(const std::vector<std::string>& names, const std::string& name) {
  for (const auto& n : names) {
    if (n == name) return true;
  }
  return false;
}

std::string SupportedList() {
  std::string out;
  for (const auto& n : Supported()) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// Doubles hold integers exactly up to 2^53; randint bounds stay inside that.
constexpr double kMaxExactInt = 9007199254740992.0;

bool IsIntegral(double x) { return std::isfinite(x) && std::floor(x) == x; }

// Integral values within 2^53 print as JSON integers, so `{"randint": [1, 10]}` and an
// integer-valued quantized draw read as written rather than as 1.0.
json NumberJson(double x) {
  if (IsIntegral(x) && std::fabs(x) <= kMaxExactInt) return static_cast<int64_t>(x);
  return x;
}

// Rounds half to even, as numpy's np.round does in Ray's quantized sampler.
double Quantize(double x, double q) { return std::nearbyint(x / q) * q; }

json QuantizedJson(double x, double q) {
  return IsIntegral(q) ? NumberJson(Quantize(x, q)) : json(Quantize(x, q));
}

// Both bounds' floating-point draws can round up to `hi`; the ranges are half-open.
double BelowHi(double x, double lo, double hi) {
  if (x >= hi) x = std::nextafter(hi, lo);
  return x < lo ? lo : x;
}

double UniformIn(Rng& rng, double lo, double hi) {
  double u = rng.Uniform01();
  return BelowHi(lo * (1 - u) + hi * u, lo, hi);
}

double LogUniformIn(Rng& rng, double lo, double hi) {
  double a = std::log10(lo), b = std::log10(hi);
  return BelowHi(std::pow(10.0, a + (b - a) * rng.Uniform01()), lo, hi);
}

Status Fail(const std::string& where, const std::string& what) {
  return Status::InvalidArgument(where + ": " + what);
}

// The numeric arguments of a fixed-arity distribution, each a finite number.
bool Numbers(const json& args, size_t n, double* out) {
  if (!args.is_array() || args.size() != n) return false;
  for (size_t i = 0; i < n; ++i) {
    if (!args[i].is_number()) return false;
    out[i] = args[i].get<double>();
    if (!std::isfinite(out[i])) return false;
  }
  return true;
}

std::string UnknownMessage(const std::string& name) {
  std::string near = Closest(name, Supported());
  if (!near.empty()) {
    return "unknown distribution \"" + name + "\" (did you mean \"" + near + "\"?)";
  }
  return "unknown distribution \"" + name + "\" (supported: " + SupportedList() + ")";
}

}  // namespace

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (uint64_t& s : s_) s = SplitMix64(x);
}

Rng Rng::ForIndex(uint64_t seed, uint64_t index) {
  // Mix(seed) + index * odd is a bijection in index, so distinct indices never share a
  // stream; the outer Mix keeps neighbouring indices from seeding neighbouring states
  // (Rng(s) and Rng(s + gamma) would overlap, splitmix64 being a counter).
  return Rng(Mix(Mix(seed) + index * 0xD1B54A32D192ED03ULL));
}

uint64_t Rng::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

double Rng::Uniform01() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

double Rng::Normal() {
  // 1 - u lies in (0, 1], keeping log() finite.
  const double u1 = 1.0 - Uniform01();
  const double u2 = Uniform01();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

uint64_t Rng::Below(uint64_t n) {
  if (n == 0) return 0;
  // Values below 2^64 mod n would make the low residues likelier; draw again instead.
  const uint64_t threshold = (0 - n) % n;
  for (;;) {
    uint64_t r = Next();
    if (r >= threshold) return r % n;
  }
}

json Domain::Sample(Rng& rng) const {
  switch (kind) {
    case Kind::kUniform:
      return UniformIn(rng, lo, hi);
    case Kind::kQUniform:
      return QuantizedJson(UniformIn(rng, lo, hi), q);
    case Kind::kLogUniform:
      return LogUniformIn(rng, lo, hi);
    case Kind::kQLogUniform:
      return QuantizedJson(LogUniformIn(rng, lo, hi), q);
    case Kind::kRandInt: {
      const auto l = static_cast<int64_t>(lo), h = static_cast<int64_t>(hi);
      return l + static_cast<int64_t>(rng.Below(static_cast<uint64_t>(h - l)));
    }
    case Kind::kRandn:
      return lo + hi * rng.Normal();
    case Kind::kChoice:
    case Kind::kGridSearch:  // not meant to be sampled; a value from the list is still valid
      if (!values.is_array() || values.empty()) return nullptr;
      return values[rng.Below(values.size())];
  }
  return nullptr;
}

json Domain::ToJson() const {
  switch (kind) {
    case Kind::kUniform:
      return {{"uniform", {NumberJson(lo), NumberJson(hi)}}};
    case Kind::kQUniform:
      return {{"quniform", {NumberJson(lo), NumberJson(hi), NumberJson(q)}}};
    case Kind::kLogUniform:
      return {{"loguniform", {NumberJson(lo), NumberJson(hi)}}};
    case Kind::kQLogUniform:
      return {{"qloguniform", {NumberJson(lo), NumberJson(hi), NumberJson(q)}}};
    case Kind::kRandInt:
      return {{"randint", {NumberJson(lo), NumberJson(hi)}}};
    case Kind::kRandn:
      return {{"randn", {NumberJson(lo), NumberJson(hi)}}};
    case Kind::kChoice:
      return {{"choice", values}};
    case Kind::kGridSearch:
      return {{"grid_search", values}};
  }
  return nullptr;
}

bool IsDomain(const json& v) {
  if (!v.is_object() || v.size() != 1) return false;
  const std::string& name = v.begin().key();
  if (Contains(Supported(), name) || Contains(RayUnsupported(), name)) return true;
  // A near-miss counts only with a list, as every distribution takes one: a user's
  // {"chance": 0.5} stays a nested dict, {"choise": [1, 2]} is a typo to report.
  if (!v.begin().value().is_array()) return false;
  return !Closest(name, Supported()).empty() || !Closest(name, RayUnsupported()).empty();
}

Result<Domain> ParseDomain(const json& v, const std::string& where) {
  if (!v.is_object() || v.size() != 1) {
    return Fail(where, "must be a distribution: an object like {\"uniform\": [lo, hi]}");
  }
  const std::string& name = v.begin().key();
  const json& args = v.begin().value();
  if (Contains(RayUnsupported(), name)) {
    return Fail(where, "distribution \"" + name +
                           "\" is not supported (supported: " + SupportedList() + ")");
  }
  if (!Contains(Supported(), name)) return Fail(where, UnknownMessage(name));

  Domain d;
  if (name == "choice" || name == "grid_search") {
    if (!args.is_array() || args.empty()) {
      return Fail(where, name + " needs a non-empty list of values, got " + args.dump());
    }
    d.kind = name == "choice" ? Domain::Kind::kChoice : Domain::Kind::kGridSearch;
    d.values = args;
    return d;
  }

  const bool quantized = name == "quniform" || name == "qloguniform";
  const char* shape = quantized ? "[lo, hi, q]" : name == "randn" ? "[mean, sd]" : "[lo, hi]";
  double n[3] = {0, 0, 0};
  if (!Numbers(args, quantized ? 3 : 2, n)) {
    return Fail(where, name + " needs " + shape + " (finite numbers), got " + args.dump());
  }
  d.lo = n[0];
  d.hi = n[1];
  d.q = n[2];
  const std::string got = ", got " + args.dump();
  if (name == "randn") {
    if (!(d.hi > 0)) return Fail(where, "randn needs sd > 0" + got);
    d.kind = Domain::Kind::kRandn;
    return d;
  }
  if (name == "randint") {
    if (!IsIntegral(d.lo) || !IsIntegral(d.hi) || std::fabs(d.lo) > kMaxExactInt ||
        std::fabs(d.hi) > kMaxExactInt) {
      return Fail(where, "randint needs integer bounds (within 2^53)" + got);
    }
    if (!(d.lo < d.hi)) return Fail(where, "randint needs lo < hi (hi is excluded)" + got);
    d.kind = Domain::Kind::kRandInt;
    return d;
  }
  const bool log = name == "loguniform" || name == "qloguniform";
  if (log && !(d.lo > 0 && d.lo < d.hi)) return Fail(where, name + " needs 0 < lo < hi" + got);
  if (!(d.lo < d.hi)) return Fail(where, name + " needs lo < hi" + got);
  if (quantized && !(d.q > 0)) return Fail(where, name + " needs q > 0" + got);
  d.kind = name == "uniform"      ? Domain::Kind::kUniform
           : name == "quniform"   ? Domain::Kind::kQUniform
           : name == "loguniform" ? Domain::Kind::kLogUniform
                                  : Domain::Kind::kQLogUniform;
  return d;
}

}  // namespace traintl::tune
