// What the parts of the job spec's parser (proto/job_spec*.cc, strict_json.cc) share: collection
// caps, error-message helpers (JSON paths, value descriptions, did-you-mean hints), the Checker
// that records the first error, the validation primitives, and the section parsers.
// Internal to proto/; the public interface is job_spec.h.
//
// Thread-safety: free functions with no shared mutable state (FieldHomes and
// UnsupportedRayFields build constant tables once, thread-safely); a Checker is used by
// one thread.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/spelling.h"
#include "common/status.h"
#include "proto/job_spec.h"

namespace traintl {
namespace spec_internal {

using json = nlohmann::json;

// Collection caps: far above any real job, low enough that a hostile document is refused
// before it costs much.
inline constexpr std::size_t kMaxResources = 64;
inline constexpr std::size_t kMaxDatasets = 256;
inline constexpr std::size_t kMaxEnv = 4096;
inline constexpr std::size_t kMaxNameLen = 128;
inline constexpr std::size_t kMaxPathLen = 4096;
inline constexpr std::size_t kMaxEnvKeyLen = 256;
// Linux refuses a single environment string longer than MAX_ARG_STRLEN (128 KiB) at exec.
inline constexpr std::size_t kMaxEnvValueLen = 128 * 1024 - 1;
inline constexpr std::size_t kMaxShortStringLen = 256;
inline constexpr int kMaxWorkers = 4096;
inline constexpr double kMaxMemoryBytes = 4611686018427387904.0;  // 2^62: fits int64 with room

// ---------------------------------------------------------------------------------------
// Paths and value descriptions for error messages (job_spec_messages.cc).

// Messages end up inside JSON responses, whose encoder throws on invalid UTF-8.
std::string ValidUtf8(const std::string& s);
// The JSON path of `key` inside `parent` ("a.b", or a["x.y"] for keys that are not plain).
std::string Child(const std::string& parent, const std::string& key);
// A short description of a value for "got ..." (strings quoted and clipped).
std::string Describe(const json& v);
// A number as JSON writes it (integral values without ".0").
std::string FormatNumber(double x);

// Did-you-mean hints: Lower and Closest (common/spelling.h).
// Where each field of the structural objects lives, to point at a misplaced one
// ({"num_workers": 2} at the top level).
const std::map<std::string, std::string>& FieldHomes();
// Ray Train options a Ray user may carry over that traintl does not implement.
const std::set<std::string>& UnsupportedRayFields();

// ---------------------------------------------------------------------------------------
// Validation primitives. Each returns false after recording the (first) error.

class Checker {
 public:
  bool Fail(const std::string& field, std::string message) {
    if (!failed_) {
      error_.field = field;
      error_.message = std::move(message);
      failed_ = true;
    }
    return false;
  }
  bool failed() const { return failed_; }
  const SpecError& error() const { return error_; }

  bool Object(const std::string& path, const json& v, const char* what) {
    if (v.is_object()) return true;
    return Fail(path, std::string("must be ") + what + ", got " + Describe(v));
  }

  // Every key of `obj` must be in `allowed`. `structural` objects also get hints for
  // fields that belong at another level.
  bool Keys(const std::string& path, const json& obj, const std::vector<std::string>& allowed,
            bool structural = true) {
    for (const auto& item : obj.items()) {
      const std::string& key = item.key();
      if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
      std::string where = path.empty() ? "the top level" : path;
      std::string msg = "unknown field";
      std::string near = Closest(key, allowed);
      const auto& homes = FieldHomes();
      auto home = homes.find(key);
      if (!near.empty()) {
        msg += " (did you mean " + near + "?)";
      } else if (structural && home != homes.end()) {
        msg += home->second.find('.') == std::string::npos
                   ? " (did you mean the top-level field " + home->second + "?)"
                   : " (did you mean " + home->second + "?)";
      } else if (structural && UnsupportedRayFields().count(key)) {
        msg += " (a Ray Train option that traintl does not support)";
      } else {
        std::string fields;
        for (const auto& a : allowed) fields += (fields.empty() ? "" : ", ") + a;
        msg += " (" + where + " has: " + fields + ")";
      }
      return Fail(Child(path, key), msg);
    }
    return true;
  }

  bool String(const std::string& path, const json& v, std::string* out,
              const char* expect = "must be a string") {
    if (!v.is_string()) return Fail(path, std::string(expect) + ", got " + Describe(v));
    const auto& s = v.get_ref<const std::string&>();
    if (s.find('\0') != std::string::npos) {
      return Fail(path, "must not contain NUL characters");
    }
    *out = s;
    return true;
  }

  bool Bool(const std::string& path, const json& v, bool* out) {
    if (!v.is_boolean()) return Fail(path, "must be true or false, got " + Describe(v));
    *out = v.get<bool>();
    return true;
  }

  // A finite number.
  bool Number(const std::string& path, const json& v, double* out, const std::string& expect) {
    if (!v.is_number()) return Fail(path, expect + ", got " + Describe(v));
    double x = v.get<double>();
    if (!std::isfinite(x)) return Fail(path, expect + ", got " + Describe(v));
    *out = x;
    return true;
  }

  // An integer in [min, max]; a float with an integral value (2.0) counts.
  // A whole number above `max` is "too large", naming the bound, rather than `expect`.
  bool Int(const std::string& path, const json& v, std::int64_t min, std::int64_t max,
           std::int64_t* out, const std::string& expect) {
    std::string got = ", got " + Describe(v);
    auto too_large = [&] {
      return Fail(path, "is too large: at most " + std::to_string(max) + got);
    };
    if (v.is_number_unsigned()) {
      auto u = v.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(max)) return too_large();
      *out = static_cast<std::int64_t>(u);
    } else if (v.is_number_integer()) {
      *out = v.get<std::int64_t>();
    } else if (v.is_number_float()) {
      double d = v.get<double>();
      if (!std::isfinite(d) || d != std::floor(d)) return Fail(path, expect + got);
      if (d > static_cast<double>(max)) return too_large();
      if (d < -9.0e18) return Fail(path, expect + got);
      *out = static_cast<std::int64_t>(d);
    } else {
      return Fail(path, expect + got);
    }
    if (*out > max) return too_large();
    if (*out < min) return Fail(path, expect + got);
    return true;
  }

  bool Int32(const std::string& path, const json& v, std::int64_t min, std::int64_t max, int* out,
             const std::string& expect) {
    std::int64_t x = 0;
    if (!Int(path, v, min, max, &x, expect)) return false;
    *out = static_cast<int>(x);
    return true;
  }

 private:
  bool failed_ = false;
  SpecError error_;
};

// ---------------------------------------------------------------------------------------
// Validation primitives (job_spec_checks.cc).

bool IsValidName(const std::string& s, std::size_t max_len);
bool IsEnvName(const std::string& s);
bool IsCIdentifier(const std::string& s);
bool IsAbsolutePath(const std::string& s);
bool IsLowerHex(const std::string& s);
// "" when `uri` is acceptable, else why not.
std::string CheckUri(const std::string& uri);
bool IsResourceNameChar(unsigned char c);
// "" when x is an acceptable GPU amount, else why not.
std::string GpuAmountProblem(double x);
// obj[key], or null when obj has no such key.
const json* Find(const json& obj, const char* key);
// Iterative, so that it is safe on documents of any depth. Returns the depth of `v`
// (a scalar is 0, {} is 1) capped at limit + 1.
int JsonDepth(const json& v, int limit);

// ---------------------------------------------------------------------------------------
// Section parsers (job_spec_sections.cc). Each fills its part of *spec and returns false
// after recording the (first) error in the Checker.

bool ParseEntrypoint(Checker& c, const json& doc, JobSpec* spec);
// The top-level "framework" (after ParseEntrypoint: it depends on the entry point's kind).
bool ParseFramework(Checker& c, const json& doc, JobSpec* spec);
bool ParseScaling(Checker& c, const json& doc, JobSpec* spec);
bool ParseRunConfig(Checker& c, const json& doc, JobSpec* spec);
bool ParseDatasets(Checker& c, const json& doc, JobSpec* spec);
bool ParseEnv(Checker& c, const json& doc, JobSpec* spec);

// InvalidArgument with e's message; *out (when not null) gets e.
inline Status Invalid(const SpecError& e, SpecError* out) {
  if (out != nullptr) *out = e;
  return Status::InvalidArgument(e.ToString());
}

}  // namespace spec_internal
}  // namespace traintl
