#include "proto/job_spec.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <limits>
#include <set>
#include <utility>
#include <vector>

namespace traintl {
namespace {

using json = nlohmann::json;

// Collection caps: far above any real job, low enough that a hostile document is refused
// before it costs much.
constexpr std::size_t kMaxResources = 64;
constexpr std::size_t kMaxDatasets = 256;
constexpr std::size_t kMaxEnv = 4096;
constexpr std::size_t kMaxNameLen = 128;
constexpr std::size_t kMaxPathLen = 4096;
constexpr std::size_t kMaxEnvKeyLen = 256;
// Linux refuses a single environment string longer than MAX_ARG_STRLEN (128 KiB) at exec.
constexpr std::size_t kMaxEnvValueLen = 128 * 1024 - 1;
constexpr std::size_t kMaxShortStringLen = 256;
constexpr int kMaxWorkers = 4096;
constexpr double kMaxMemoryBytes = 4611686018427387904.0;  // 2^62: fits int64 with room

// ---------------------------------------------------------------------------------------
// Paths and value descriptions for error messages.

// Keys from the document are echoed into messages; cap them so that a megabyte-long key
// does not become a megabyte-long error.
std::string Clip(const std::string& s, std::size_t max = 64) {
  if (s.size() <= max) return s;
  std::size_t cut = max;
  // Do not cut a UTF-8 sequence in half.
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + "...";
}

std::string DumpSafe(const json& v) {
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Messages end up inside JSON responses, whose encoder throws on invalid UTF-8.
std::string ValidUtf8(const std::string& s) {
  return json::parse(DumpSafe(json(s))).get<std::string>();
}

bool IsPlainKey(const std::string& key) {
  if (key.empty()) return false;
  for (unsigned char c : key) {
    if (!std::isalnum(c) && c != '_' && c != '-') return false;
  }
  return true;
}

std::string Child(const std::string& parent, const std::string& key) {
  std::string seg =
      IsPlainKey(key) && key.size() <= 64 ? key : "[" + DumpSafe(json(Clip(key))) + "]";
  if (parent.empty()) return seg;
  return seg[0] == '[' ? parent + seg : parent + "." + seg;
}

std::string Describe(const json& v) {
  switch (v.type()) {
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return DumpSafe(json(Clip(v.get_ref<const std::string&>())));
    case json::value_t::binary:
      return "binary data";
    case json::value_t::discarded:
      return "nothing";
    default:
      return DumpSafe(v);  // null, bool, numbers: short
  }
}

std::string FormatNumber(double x) {
  json j;
  if (x == std::floor(x) && std::fabs(x) < 9.0e15) {
    j = static_cast<std::int64_t>(x);
  } else {
    j = x;
  }
  return j.dump();
}

// ---------------------------------------------------------------------------------------
// Did-you-mean hints.

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// The closest candidate within a distance that still looks like a typo, or "".
std::string Closest(const std::string& key, const std::vector<std::string>& candidates) {
  if (key.size() > 64) return "";
  std::string lk = Lower(key);
  std::string best;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  for (const auto& c : candidates) {
    std::size_t d = EditDistance(lk, Lower(c));
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  std::size_t limit = key.size() <= 4 ? 1 : key.size() <= 8 ? 2 : 3;
  return best_d <= limit ? best : "";
}

// Where each field of the structural objects lives, to point at a misplaced one
// ({"num_workers": 2} at the top level).
const std::map<std::string, std::string>& FieldHomes() {
  static const auto* homes = new std::map<std::string, std::string>{
      {"name", "name"},
      {"entrypoint", "entrypoint"},
      {"library", "entrypoint.library"},
      {"function", "entrypoint.function"},
      {"train_loop_config", "train_loop_config"},
      {"scaling_config", "scaling_config"},
      {"num_workers", "scaling_config.num_workers"},
      {"use_gpu", "scaling_config.use_gpu"},
      {"resources_per_worker", "scaling_config.resources_per_worker"},
      {"num_cpus_per_worker", "scaling_config.num_cpus_per_worker"},
      {"num_gpus_per_worker", "scaling_config.num_gpus_per_worker"},
      {"placement_strategy", "scaling_config.placement_strategy"},
      {"run_config", "run_config"},
      {"storage_path", "run_config.storage_path"},
      {"checkpoint_config", "run_config.checkpoint_config"},
      {"failure_config", "run_config.failure_config"},
      {"num_to_keep", "run_config.checkpoint_config.num_to_keep"},
      {"checkpoint_score_attribute", "run_config.checkpoint_config.checkpoint_score_attribute"},
      {"checkpoint_score_order", "run_config.checkpoint_config.checkpoint_score_order"},
      {"max_failures", "run_config.failure_config.max_failures"},
      {"restart_backoff_s", "run_config.failure_config.restart_backoff_s"},
      {"max_restart_backoff_s", "run_config.failure_config.max_restart_backoff_s"},
      {"datasets", "datasets"},
      {"env", "env"},
      {"priority", "priority"},
      {"resume_from_checkpoint", "resume_from_checkpoint"},
  };
  return *homes;
}

// Ray Train options a Ray user may carry over that traintl does not implement.
const std::set<std::string>& UnsupportedRayFields() {
  static const auto* fields = new std::set<std::string>{
      "trainer_resources",
      "accelerator_type",
      "callbacks",
      "stop",
      "verbose",
      "sync_config",
      "storage_filesystem",
      "log_to_file",
      "progress_reporter",
      "checkpoint_frequency",
      "checkpoint_at_end",
      "fail_fast",
      "runtime_env",
      "metadata",
      "dataset_config",
      "scaling_policy",
  };
  return *fields;
}

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
  bool Int(const std::string& path, const json& v, std::int64_t min, std::int64_t max,
           std::int64_t* out, const std::string& expect) {
    std::string got = ", got " + Describe(v);
    if (v.is_number_unsigned()) {
      auto u = v.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(max)) return Fail(path, expect + got);
      *out = static_cast<std::int64_t>(u);
    } else if (v.is_number_integer()) {
      *out = v.get<std::int64_t>();
    } else if (v.is_number_float()) {
      double d = v.get<double>();
      if (!std::isfinite(d) || d != std::floor(d) || d < -9.0e18 || d > 9.0e18) {
        return Fail(path, expect + got);
      }
      *out = static_cast<std::int64_t>(d);
    } else {
      return Fail(path, expect + got);
    }
    if (*out < min || *out > max) return Fail(path, expect + got);
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

bool IsNameChar(unsigned char c) { return std::isalnum(c) || c == '.' || c == '_' || c == '-'; }

bool IsValidName(const std::string& s, std::size_t max_len) {
  if (s.empty() || s.size() > max_len) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return IsNameChar(c); });
}

bool IsEnvName(const std::string& s) {
  if (s.empty() || s.size() > kMaxEnvKeyLen) return false;
  auto c0 = static_cast<unsigned char>(s[0]);
  if (!std::isalpha(c0) && c0 != '_') return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return std::isalnum(u) || u == '_';
  });
}

bool IsCIdentifier(const std::string& s) { return IsEnvName(s); }

bool HasControlChars(const std::string& s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7F;
  });
}

bool IsAbsolutePath(const std::string& s) {
  return !s.empty() && s[0] == '/' && s.size() <= kMaxPathLen && s.find('\0') == std::string::npos;
}

bool IsLowerHex(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
}

// "" when `uri` is acceptable, else why not.
std::string CheckUri(const std::string& uri) {
  const std::string expected = "must be a file://, http:// or https:// URI";
  if (uri.size() > kMaxPathLen) return "must be at most 4096 characters";
  if (HasControlChars(uri) || uri.find(' ') != std::string::npos) {
    return "must not contain spaces or control characters";
  }
  auto starts = [&](const char* p) { return uri.rfind(p, 0) == 0; };
  if (starts("file://")) {
    std::string rest = uri.substr(7);
    if (rest.rfind("localhost/", 0) == 0) rest = rest.substr(9);
    if (rest.empty() || rest[0] != '/') {
      return "a file:// URI must name an absolute path (file:///data/x.csv)";
    }
    if (rest.size() < 2) return "a file:// URI must name a file or directory, not /";
    return "";
  }
  std::string rest;
  if (starts("http://")) {
    rest = uri.substr(7);
  } else if (starts("https://")) {
    rest = uri.substr(8);
  } else {
    return expected;
  }
  std::size_t host_end = rest.find_first_of("/?#");
  if (rest.substr(0, host_end).empty()) return "an http(s) URI must name a host";
  return "";
}

// "parquet" stays a known name so that asking for it gets the reason it is refused (below)
// rather than a "did you mean" hint.
const std::vector<std::string> kFormats = {"csv", "jsonl", "npy", "parquet"};

// Refused at submit rather than when every rank opens the dataset: the job could never
// run, and the worker's own check (worker/data/dataset.cc) would only fail it after it
// was scheduled.
constexpr char kParquetRefused[] =
    "parquet is not supported by this build (no Arrow/Parquet in Debian 12); use csv, jsonl "
    "or npy";

bool IsResourceNameChar(unsigned char c) {
  return std::isalnum(c) || c == '_' || c == '.' || c == '-';
}

std::string GpuAmountProblem(double x) {
  if (x < 0) return "must not be negative";
  if (x > 1 && x != std::floor(x)) {
    return "must be a fraction in (0, 1] or a whole number of GPUs";
  }
  return "";
}

// ---------------------------------------------------------------------------------------
// Section parsers.

const json* Find(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

// Iterative, so that it is safe on documents of any depth. Returns the depth of `v`
// (a scalar is 0, {} is 1) capped at limit + 1.
int JsonDepth(const json& v, int limit) {
  std::vector<std::pair<const json*, int>> stack{{&v, 0}};
  int max_depth = 0;
  while (!stack.empty()) {
    auto [node, depth] = stack.back();
    stack.pop_back();
    if (!node->is_structured()) continue;
    int d = depth + 1;
    max_depth = std::max(max_depth, d);
    if (max_depth > limit) return max_depth;
    for (const auto& child : *node) stack.emplace_back(&child, d);
  }
  return max_depth;
}

bool ParseEntrypoint(Checker& c, const json& doc, JobSpec* spec) {
  const json* ep = Find(doc, "entrypoint");
  if (ep == nullptr) {
    return c.Fail("entrypoint",
                  "is required: {\"library\": \"path/to/libtrain.so\", \"function\": \"...\"}");
  }
  if (!c.Object("entrypoint", *ep, "an object {\"library\": ..., \"function\": ...}")) {
    return false;
  }
  if (!c.Keys("entrypoint", *ep, {"library", "function"})) return false;
  const json* lib = Find(*ep, "library");
  if (lib == nullptr) {
    return c.Fail("entrypoint.library", "is required (the path of the training library)");
  }
  const char* lib_expect = "must be a non-empty path of a shared library";
  if (!c.String("entrypoint.library", *lib, &spec->library, lib_expect)) return false;
  if (spec->library.empty()) {
    return c.Fail("entrypoint.library", std::string(lib_expect) + ", got \"\"");
  }
  if (spec->library.size() > kMaxPathLen) {
    return c.Fail("entrypoint.library", "must be at most 4096 characters");
  }
  spec->function.clear();
  if (const json* fn = Find(*ep, "function"); fn != nullptr && !fn->is_null()) {
    const char* fn_expect =
        "must be the name given to TRAINTL_ENTRYPOINT (a C identifier), or null for the "
        "library's only entry point";
    if (!c.String("entrypoint.function", *fn, &spec->function, fn_expect)) return false;
    if (!IsCIdentifier(spec->function)) {
      return c.Fail("entrypoint.function", std::string(fn_expect) + ", got " + Describe(*fn));
    }
  }
  return true;
}

bool ParseResource(Checker& c, const std::string& path, const std::string& name, const json& v,
                   double* out) {
  if (name == "memory") {
    auto r = ParseMemoryAmount(v);
    if (!r.ok()) return c.Fail(path, r.status().message());
    *out = *r;
    return true;
  }
  if (name != "CPU" && name != "GPU") {
    std::string lower = Lower(name);
    if (lower == "cpu" || lower == "gpu" || lower == "memory") {
      std::string want = lower == "memory" ? "memory" : Lower(name) == "cpu" ? "CPU" : "GPU";
      return c.Fail(path, "resource names are case-sensitive (did you mean " + want + "?)");
    }
    if (name.empty() || name.size() > kMaxNameLen ||
        !std::all_of(name.begin(), name.end(),
                     [](char ch) { return IsResourceNameChar(static_cast<unsigned char>(ch)); })) {
      return c.Fail(path, "resource names must be 1..128 characters of [A-Za-z0-9_.-]");
    }
  }
  std::string expect = name == "GPU" ? "must be a number of GPUs (0, a fraction in (0, 1] or "
                                       "a whole number)"
                                     : "must be a non-negative number";
  if (!c.Number(path, v, out, expect)) return false;
  if (*out < 0) return c.Fail(path, "must not be negative, got " + Describe(v));
  if (name == "GPU") {
    std::string problem = GpuAmountProblem(*out);
    if (!problem.empty()) return c.Fail(path, problem + ", got " + Describe(v));
  }
  return true;
}

bool ParseScaling(Checker& c, const json& doc, JobSpec* spec) {
  spec->num_workers = 1;
  spec->use_gpu = false;
  spec->resources_per_worker.clear();
  spec->placement_strategy = PlacementStrategy::kPack;
  const json* sc = Find(doc, "scaling_config");
  // Where CPU / GPU were given, for conflict and consistency messages.
  std::string cpu_path, gpu_path;
  if (sc != nullptr) {
    if (!c.Object("scaling_config", *sc, "an object")) return false;
    if (!c.Keys("scaling_config", *sc,
                {"num_workers", "use_gpu", "resources_per_worker", "num_cpus_per_worker",
                 "num_gpus_per_worker", "placement_strategy"})) {
      return false;
    }
    if (const json* v = Find(*sc, "num_workers")) {
      std::int64_t n = 0;
      if (!c.Int("scaling_config.num_workers", *v, 1, std::numeric_limits<int>::max(), &n,
                 "must be an integer >= 1")) {
        return false;
      }
      if (n > kMaxWorkers) {
        return c.Fail("scaling_config.num_workers",
                      "must be at most " + std::to_string(kMaxWorkers) + ", got " + Describe(*v));
      }
      spec->num_workers = static_cast<int>(n);
    }
    if (const json* v = Find(*sc, "use_gpu")) {
      if (!c.Bool("scaling_config.use_gpu", *v, &spec->use_gpu)) return false;
    }
    if (const json* rpw = Find(*sc, "resources_per_worker")) {
      const std::string base = "scaling_config.resources_per_worker";
      if (!c.Object(base, *rpw, "an object of resource name -> amount")) return false;
      if (rpw->size() > kMaxResources) {
        return c.Fail(base, "must name at most " + std::to_string(kMaxResources) + " resources");
      }
      for (const auto& item : rpw->items()) {
        std::string path = Child(base, item.key());
        double amount = 0;
        if (!ParseResource(c, path, item.key(), item.value(), &amount)) return false;
        spec->resources_per_worker[item.key()] = amount;
        if (item.key() == "CPU") cpu_path = path;
        if (item.key() == "GPU") gpu_path = path;
      }
    }
    struct Shorthand {
      const char* field;
      const char* resource;
      std::string* given_path;
    };
    for (const Shorthand& sh : {Shorthand{"num_cpus_per_worker", "CPU", &cpu_path},
                                Shorthand{"num_gpus_per_worker", "GPU", &gpu_path}}) {
      const json* v = Find(*sc, sh.field);
      if (v == nullptr) continue;
      std::string path = Child("scaling_config", sh.field);
      double amount = 0;
      if (!ParseResource(c, path, sh.resource, *v, &amount)) return false;
      auto it = spec->resources_per_worker.find(sh.resource);
      if (it != spec->resources_per_worker.end() && it->second != amount) {
        return c.Fail(path, "conflicts with " + *sh.given_path + " (" + FormatNumber(amount) +
                                " vs " + FormatNumber(it->second) + "); give only one");
      }
      spec->resources_per_worker[sh.resource] = amount;
      if (sh.given_path->empty()) *sh.given_path = path;
    }
    if (const json* v = Find(*sc, "placement_strategy")) {
      const std::string path = "scaling_config.placement_strategy";
      const std::string expect = "must be one of PACK, SPREAD, STRICT_PACK, STRICT_SPREAD";
      std::string name;
      if (!c.String(path, *v, &name, expect.c_str())) return false;
      auto ps = PlacementStrategyFromName(name);
      if (!ps) {
        std::string hint;
        std::string upper = name;
        for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
        if (PlacementStrategyFromName(upper)) {
          hint = " (did you mean " + upper + "?)";
        } else {
          std::string near = Closest(name, {"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"});
          if (!near.empty()) hint = " (did you mean " + near + "?)";
        }
        return c.Fail(path, expect + ", got " + Describe(*v) + hint);
      }
      spec->placement_strategy = *ps;
    }
  }
  auto& res = spec->resources_per_worker;
  if (!res.count("CPU")) res["CPU"] = 1;
  if (!res.count("GPU")) {
    res["GPU"] = spec->use_gpu ? 1 : 0;
  } else if (!spec->use_gpu && res["GPU"] > 0) {
    // DESIGN §3's own example asks for GPUs without use_gpu: asking for a GPU means using it.
    spec->use_gpu = true;
  } else if (spec->use_gpu && res["GPU"] == 0) {
    return c.Fail(gpu_path,
                  "is 0 but scaling_config.use_gpu is true; request a positive number of GPUs "
                  "or set use_gpu to false");
  }
  return true;
}

bool ParseRunConfig(Checker& c, const json& doc, JobSpec* spec) {
  spec->storage_path.clear();
  spec->num_to_keep = 0;
  spec->checkpoint_score_attribute.clear();
  spec->checkpoint_score_max = false;
  spec->max_failures = 0;
  const json* rc = Find(doc, "run_config");
  if (rc == nullptr) return true;
  if (!c.Object("run_config", *rc, "an object")) return false;
  if (!c.Keys("run_config", *rc, {"storage_path", "checkpoint_config", "failure_config"})) {
    return false;
  }
  if (const json* v = Find(*rc, "storage_path"); v != nullptr && !v->is_null()) {
    const char* expect = "must be an absolute directory path (or null for the default)";
    if (!c.String("run_config.storage_path", *v, &spec->storage_path, expect)) return false;
    if (!IsAbsolutePath(spec->storage_path)) {
      return c.Fail("run_config.storage_path", std::string(expect) + ", got " + Describe(*v));
    }
  }
  if (const json* cc = Find(*rc, "checkpoint_config")) {
    const std::string base = "run_config.checkpoint_config";
    if (!c.Object(base, *cc, "an object")) return false;
    if (!c.Keys(base, *cc,
                {"num_to_keep", "checkpoint_score_attribute", "checkpoint_score_order"})) {
      return false;
    }
    if (const json* v = Find(*cc, "num_to_keep"); v != nullptr && !v->is_null()) {
      if (!c.Int32(base + ".num_to_keep", *v, 1, std::numeric_limits<int>::max(),
                   &spec->num_to_keep,
                   "must be an integer >= 1 (or null to keep every checkpoint)")) {
        return false;
      }
    }
    if (const json* v = Find(*cc, "checkpoint_score_attribute"); v != nullptr && !v->is_null()) {
      const std::string path = base + ".checkpoint_score_attribute";
      const char* expect = "must be the name of a reported metric (or null for recency)";
      if (!c.String(path, *v, &spec->checkpoint_score_attribute, expect)) return false;
      if (spec->checkpoint_score_attribute.empty() ||
          spec->checkpoint_score_attribute.size() > kMaxShortStringLen) {
        return c.Fail(path, std::string(expect) + ", got " + Describe(*v));
      }
    }
    if (const json* v = Find(*cc, "checkpoint_score_order")) {
      const std::string path = base + ".checkpoint_score_order";
      const char* expect = "must be \"min\" or \"max\"";
      std::string order;
      if (!c.String(path, *v, &order, expect)) return false;
      if (order != "min" && order != "max") {
        return c.Fail(path, std::string(expect) + ", got " + Describe(*v));
      }
      spec->checkpoint_score_max = order == "max";
    }
  }
  if (const json* fc = Find(*rc, "failure_config")) {
    const std::string base = "run_config.failure_config";
    if (!c.Object(base, *fc, "an object")) return false;
    if (!c.Keys(base, *fc, {"max_failures", "restart_backoff_s", "max_restart_backoff_s"})) {
      return false;
    }
    const char* seconds = "must be a number of seconds in [0, 86400]";
    for (auto [key, out] : {std::pair{"restart_backoff_s", &spec->restart_backoff_s},
                            std::pair{"max_restart_backoff_s", &spec->max_restart_backoff_s}}) {
      const json* v = Find(*fc, key);
      if (v == nullptr || v->is_null()) continue;
      const std::string path = base + "." + key;
      if (!c.Number(path, *v, out, seconds)) return false;
      if (!(*out >= 0 && *out <= 86400))
        return c.Fail(path, std::string(seconds) + ", got " + Describe(*v));
    }
    if (const json* v = Find(*fc, "max_failures")) {
      if (!c.Int32(base + ".max_failures", *v, -1, std::numeric_limits<int>::max(),
                   &spec->max_failures,
                   "must be -1 (unlimited restarts), 0 (no restarts) or a positive number of "
                   "restarts")) {
        return false;
      }
    }
  }
  return true;
}

bool ParseDatasets(Checker& c, const json& doc, JobSpec* spec) {
  spec->datasets.clear();
  const json* ds = Find(doc, "datasets");
  if (ds == nullptr) return true;
  if (!c.Object("datasets", *ds, "an object of dataset name -> {\"uri\": ...}")) return false;
  if (ds->size() > kMaxDatasets) {
    return c.Fail("datasets", "must name at most " + std::to_string(kMaxDatasets) + " datasets");
  }
  for (const auto& item : ds->items()) {
    const std::string& name = item.key();
    const std::string path = Child("datasets", name);
    if (!IsValidName(name, kMaxNameLen)) {
      return c.Fail(path, "dataset names must be 1..128 characters of [A-Za-z0-9._-]");
    }
    const json& d = item.value();
    if (!c.Object(path, d, "an object {\"uri\": ..., \"format\": ..., \"split\": ...}")) {
      return false;
    }
    if (!c.Keys(path, d, {"uri", "format", "split"}, /*structural=*/false)) return false;
    DatasetSpec out;
    const json* uri = Find(d, "uri");
    if (uri == nullptr) {
      return c.Fail(Child(path, "uri"), "is required (file://, http:// or https:// URI)");
    }
    const char* uri_expect = "must be a file://, http:// or https:// URI";
    if (!c.String(Child(path, "uri"), *uri, &out.uri, uri_expect)) return false;
    std::string problem = CheckUri(out.uri);
    if (!problem.empty()) {
      return c.Fail(Child(path, "uri"), problem + ", got " + Describe(*uri));
    }
    if (const json* f = Find(d, "format"); f != nullptr && !f->is_null()) {
      const char* expect = "must be one of csv, jsonl, npy (or null to infer it)";
      if (!c.String(Child(path, "format"), *f, &out.format, expect)) return false;
      if (std::find(kFormats.begin(), kFormats.end(), out.format) == kFormats.end()) {
        std::string near = Closest(out.format, kFormats);
        return c.Fail(Child(path, "format"),
                      std::string(expect) + ", got " + Describe(*f) +
                          (near.empty() ? "" : " (did you mean " + near + "?)"));
      }
      if (out.format == "parquet") return c.Fail(Child(path, "format"), kParquetRefused);
    } else if (InferDatasetFormat(out) == "parquet") {
      return c.Fail(Child(path, "uri"),
                    "names Parquet files (the format is inferred from the extension): " +
                        std::string(kParquetRefused));
    }
    out.split = name == "train";
    if (const json* s = Find(d, "split")) {
      if (!c.Bool(Child(path, "split"), *s, &out.split)) return false;
    }
    spec->datasets.emplace(name, std::move(out));
  }
  return true;
}

bool ParseEnv(Checker& c, const json& doc, JobSpec* spec) {
  spec->env.clear();
  const json* env = Find(doc, "env");
  if (env == nullptr) return true;
  if (!c.Object("env", *env, "an object of variable name -> string value")) return false;
  if (env->size() > kMaxEnv) {
    return c.Fail("env", "must set at most " + std::to_string(kMaxEnv) + " variables");
  }
  for (const auto& item : env->items()) {
    const std::string& key = item.key();
    const std::string path = Child("env", key);
    if (!IsEnvName(key)) {
      return c.Fail(path, "environment variable names must match [A-Za-z_][A-Za-z0-9_]*");
    }
    if (key.rfind("TRAINTL_", 0) == 0) {
      return c.Fail(path, "names starting with TRAINTL_ are reserved (the runtime sets them)");
    }
    std::string value;
    if (!c.String(path, item.value(), &value, "must be a string (quote numbers: \"1\")")) {
      return false;
    }
    if (value.size() > kMaxEnvValueLen) {
      return c.Fail(path, "must be shorter than 128 KiB");
    }
    spec->env.emplace(key, std::move(value));
  }
  return true;
}

bool ParseTopLevel(Checker& c, const json& doc, JobSpec* spec) {
  if (!doc.is_object()) {
    return c.Fail("", "the job spec must be a JSON object, got " + Describe(doc));
  }
  if (!c.Keys("", doc,
              {"name", "entrypoint", "train_loop_config", "scaling_config", "run_config",
               "datasets", "env", "priority", "resume_from_checkpoint"})) {
    return false;
  }
  if (JsonDepth(doc, kMaxSpecDepth) > kMaxSpecDepth) {
    // Name the member that is too deep, so the message points somewhere useful.
    for (const auto& item : doc.items()) {
      if (JsonDepth(item.value(), kMaxSpecDepth - 1) > kMaxSpecDepth - 1) {
        return c.Fail(Child("", item.key()),
                      "is nested deeper than " + std::to_string(kMaxSpecDepth) + " levels");
      }
    }
    return c.Fail("", "is nested too deeply");
  }

  const json* name = Find(doc, "name");
  const char* name_expect = "must be 1..128 characters of [A-Za-z0-9._-], not starting with - or .";
  if (name == nullptr) return c.Fail("name", std::string("is required; it ") + name_expect);
  if (!c.String("name", *name, &spec->name, name_expect)) return false;
  if (!IsValidName(spec->name, kMaxNameLen)) {
    return c.Fail("name", std::string(name_expect) + ", got " + Describe(*name));
  }
  // The name becomes a directory name (<storage_path>/<name>-<id>) and appears in shell
  // commands: a leading '-' reads as an option, a leading '.' hides it (or is "." / "..").
  if (spec->name[0] == '-' || spec->name[0] == '.') {
    return c.Fail("name",
                  "must not start with '-' or '.' (it names a directory), got " + Describe(*name));
  }
  if (!ParseEntrypoint(c, doc, spec)) return false;

  spec->train_loop_config = json::object();
  if (const json* v = Find(doc, "train_loop_config")) {
    if (!c.Object("train_loop_config", *v, "an object (passed to the training function)")) {
      return false;
    }
    spec->train_loop_config = *v;
  }
  if (!ParseScaling(c, doc, spec)) return false;
  if (!ParseRunConfig(c, doc, spec)) return false;
  if (!ParseDatasets(c, doc, spec)) return false;
  if (!ParseEnv(c, doc, spec)) return false;

  spec->priority = 0;
  if (const json* v = Find(doc, "priority")) {
    if (!c.Int32("priority", *v, std::numeric_limits<int>::min(), std::numeric_limits<int>::max(),
                 &spec->priority, "must be a 32-bit integer")) {
      return false;
    }
  }
  spec->resume_from_checkpoint.clear();
  if (const json* v = Find(doc, "resume_from_checkpoint"); v != nullptr && !v->is_null()) {
    const char* expect = "must be an absolute checkpoint directory or \"job:<job id>\" (or null)";
    std::string r;
    if (!c.String("resume_from_checkpoint", *v, &r, expect)) return false;
    bool ok = false;
    if (r.rfind("job:", 0) == 0) {
      std::string id = r.substr(4);
      ok = IsLowerHex(id) && id.size() <= 64;
    } else {
      ok = IsAbsolutePath(r);
    }
    if (!ok) return c.Fail("resume_from_checkpoint", std::string(expect) + ", got " + Describe(*v));
    spec->resume_from_checkpoint = r;
  }
  return true;
}

// ---------------------------------------------------------------------------------------
// Strict text parsing: a SAX handler that builds the DOM itself so it can refuse
// duplicate keys and excessive depth while parsing, before anything recursive runs.

class StrictBuilder : public nlohmann::json_sax<json> {
 public:
  explicit StrictBuilder(int max_depth) : max_depth_(max_depth) {}

  bool null() override { return Put(json(nullptr)); }
  bool boolean(bool v) override { return Put(json(v)); }
  bool number_integer(number_integer_t v) override { return Put(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return Put(json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return Put(json(v)); }
  bool string(string_t& v) override { return Put(json(std::move(v))); }
  bool binary(binary_t& v) override { return Put(json::binary(std::move(v))); }

  bool start_object(std::size_t) override { return Open(json::object()); }
  bool start_array(std::size_t) override { return Open(json::array()); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }

  bool key(string_t& k) override {
    Frame& top = stack_.back();
    if (top.node->contains(k)) {
      return Refuse(Child(PathOf(stack_.size()), k), "duplicate key");
    }
    top.key = std::move(k);
    return true;
  }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    std::string what = ex.what();
    // Drop nlohmann's "[json.exception.parse_error.101] " tag; keep the explanation.
    if (auto p = what.find("] "); p != std::string::npos && what[0] == '[') {
      what = what.substr(p + 2);
    }
    std::string where = "invalid JSON at byte " + std::to_string(position);
    // "parse error at line 1, column 5: <why>" -> "... (line 1, column 5): <why>"
    const std::string prefix = "parse error at ";
    if (what.rfind(prefix, 0) == 0) {
      if (auto colon = what.find(": "); colon != std::string::npos) {
        where += " (" + what.substr(prefix.size(), colon - prefix.size()) + ")";
        what = what.substr(colon + 2);
      }
    }
    error_ = {"", where + ": " + ValidUtf8(what)};
    return false;
  }

  json& root() { return root_; }
  const SpecError& error() const { return error_; }

 private:
  struct Frame {
    json* node;
    std::string key;  // pending key when node is an object
  };

  // The path of the container at stack depth `n` (stack_[0..n-1]).
  std::string PathOf(std::size_t n) const {
    std::string path;
    for (std::size_t i = 1; i < n; ++i) {
      const Frame& parent = stack_[i - 1];
      if (parent.node->is_object()) {
        path = Child(path, parent.key);
      } else {
        path += "[" + std::to_string(parent.node->size() - 1) + "]";
      }
    }
    return path;
  }

  json* Insert(json&& v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Frame& top = stack_.back();
    if (top.node->is_array()) {
      top.node->push_back(std::move(v));
      return &top.node->back();
    }
    json& slot = (*top.node)[top.key];
    slot = std::move(v);
    return &slot;
  }

  bool Put(json&& v) {
    Insert(std::move(v));
    return true;
  }

  bool Open(json&& v) {
    if (static_cast<int>(stack_.size()) >= max_depth_) {
      // The top-level member the nesting is in (a full path could be max_depth long).
      std::string field;
      if (stack_.size() >= 1 && stack_[0].node->is_object()) field = Child("", stack_[0].key);
      return Refuse(field, "is nested deeper than " + std::to_string(max_depth_) + " levels");
    }
    json* node = Insert(std::move(v));
    stack_.push_back({node, {}});
    return true;
  }

  bool Close() {
    stack_.pop_back();
    return true;
  }

  bool Refuse(std::string field, std::string message) {
    error_ = {std::move(field), std::move(message)};
    return false;
  }

  int max_depth_;
  json root_;
  std::vector<Frame> stack_;
  SpecError error_;
};

Status Invalid(const SpecError& e, SpecError* out) {
  if (out != nullptr) *out = e;
  return Status::InvalidArgument(e.ToString());
}

}  // namespace

const char* PlacementStrategyName(PlacementStrategy s) {
  switch (s) {
    case PlacementStrategy::kPack:
      return "PACK";
    case PlacementStrategy::kSpread:
      return "SPREAD";
    case PlacementStrategy::kStrictPack:
      return "STRICT_PACK";
    case PlacementStrategy::kStrictSpread:
      return "STRICT_SPREAD";
  }
  return "PACK";
}

std::optional<PlacementStrategy> PlacementStrategyFromName(const std::string& name) {
  for (auto s : {PlacementStrategy::kPack, PlacementStrategy::kSpread,
                 PlacementStrategy::kStrictPack, PlacementStrategy::kStrictSpread}) {
    if (name == PlacementStrategyName(s)) return s;
  }
  return std::nullopt;
}

bool operator==(const DatasetSpec& a, const DatasetSpec& b) {
  return a.uri == b.uri && a.format == b.format && a.split == b.split;
}

bool operator==(const JobSpec& a, const JobSpec& b) {
  return a.name == b.name && a.library == b.library && a.function == b.function &&
         a.train_loop_config == b.train_loop_config && a.num_workers == b.num_workers &&
         a.use_gpu == b.use_gpu && a.resources_per_worker == b.resources_per_worker &&
         a.placement_strategy == b.placement_strategy && a.storage_path == b.storage_path &&
         a.num_to_keep == b.num_to_keep &&
         a.checkpoint_score_attribute == b.checkpoint_score_attribute &&
         a.checkpoint_score_max == b.checkpoint_score_max && a.max_failures == b.max_failures &&
         a.restart_backoff_s == b.restart_backoff_s &&
         a.max_restart_backoff_s == b.max_restart_backoff_s && a.datasets == b.datasets &&
         a.env == b.env && a.priority == b.priority &&
         a.resume_from_checkpoint == b.resume_from_checkpoint;
}

std::string InferDatasetFormat(const DatasetSpec& dataset) {
  if (!dataset.format.empty()) return dataset.format;
  std::string path = dataset.uri;
  if (auto q = path.find_first_of("?#"); q != std::string::npos) path.resize(q);
  auto slash = path.rfind('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  auto dot = base.rfind('.');
  if (dot == std::string::npos) return "";
  std::string ext = Lower(base.substr(dot + 1));
  if (ext == "csv") return "csv";
  if (ext == "jsonl" || ext == "ndjson") return "jsonl";
  if (ext == "npy") return "npy";
  if (ext == "parquet" || ext == "pq") return "parquet";
  return "";
}

Result<double> ParseMemoryAmount(const nlohmann::json& value) {
  const std::string expect =
      "must be a number of bytes or a string like \"2GiB\", \"512MB\" or \"1.5G\"";
  double amount = 0;
  if (value.is_number()) {
    amount = value.get<double>();
    if (!std::isfinite(amount) || amount < 0) {
      return Status::InvalidArgument(expect + ", got " + Describe(value));
    }
  } else if (value.is_string()) {
    const std::string& s = value.get_ref<const std::string&>();
    auto fail = [&]() { return Status::InvalidArgument(expect + ", got " + Describe(value)); };
    if (s.size() > 64) return fail();
    std::size_t i = 0;
    auto skip_spaces = [&]() {
      while (i < s.size() && s[i] == ' ') ++i;
    };
    skip_spaces();
    std::size_t num_start = i;
    bool digits = false, dot = false;
    for (; i < s.size(); ++i) {
      if (std::isdigit(static_cast<unsigned char>(s[i]))) {
        digits = true;
      } else if (s[i] == '.' && !dot) {
        dot = true;
      } else {
        break;
      }
    }
    if (!digits) return fail();
    // The text is digits with at most one '.', so strtod reads exactly it (no sign, hex,
    // inf or nan can sneak in).
    std::string number = s.substr(num_start, i - num_start);
    double base = std::strtod(number.c_str(), nullptr);
    skip_spaces();
    std::size_t unit_start = i;
    while (i < s.size() && s[i] != ' ') ++i;
    std::string unit = Lower(s.substr(unit_start, i - unit_start));
    skip_spaces();
    if (i != s.size()) return fail();
    static const std::map<std::string, double>* kUnits = [] {
      auto* m = new std::map<std::string, double>{{"", 1}, {"b", 1}};
      const char* prefixes = "kmgtp";
      double si = 1, iec = 1;
      for (int p = 0; prefixes[p] != '\0'; ++p) {
        si *= 1000;
        iec *= 1024;
        std::string x(1, prefixes[p]);
        (*m)[x] = si;
        (*m)[x + "b"] = si;
        (*m)[x + "i"] = iec;
        (*m)[x + "ib"] = iec;
      }
      return m;
    }();
    auto it = kUnits->find(unit);
    if (it == kUnits->end()) return fail();
    amount = base * it->second;
  } else {
    return Status::InvalidArgument(expect + ", got " + Describe(value));
  }
  amount = std::floor(amount);
  if (amount > kMaxMemoryBytes) {
    return Status::InvalidArgument("must be at most 2^62 bytes, got " + Describe(value));
  }
  return amount;
}

double RestartBackoffSeconds(double backoff_s, double max_s, int consecutive_failures) {
  if (backoff_s <= 0 || consecutive_failures < 2) return 0;
  const double d = std::ldexp(backoff_s, std::min(consecutive_failures - 2, 60));
  return std::min(d, std::max(max_s, 0.0));
}

Result<nlohmann::json> ParseJsonStrict(const std::string& text, int max_depth,
                                       std::size_t max_bytes, SpecError* error) {
  if (text.size() > max_bytes) {
    return Invalid({"", "the document is larger than " + std::to_string(max_bytes) + " bytes"},
                   error);
  }
  StrictBuilder builder(max_depth);
  bool ok = false;
  try {
    ok = json::sax_parse(text, &builder, json::input_format_t::json, /*strict=*/true,
                         /*ignore_comments=*/false);
  } catch (const std::exception& e) {
    return Invalid({"", std::string("invalid JSON: ") + e.what()}, error);
  }
  if (!ok) {
    SpecError e = builder.error();
    if (e.message.empty()) e.message = "invalid JSON";
    return Invalid(e, error);
  }
  return std::move(builder.root());
}

Result<JobSpec> ParseJobSpec(const nlohmann::json& doc, SpecError* error) {
  Checker c;
  JobSpec spec;
  try {
    if (!ParseTopLevel(c, doc, &spec)) return Invalid(c.error(), error);
  } catch (const std::exception& e) {
    // Validation checks types before every access; this is only a backstop.
    return Invalid({"", std::string("invalid job spec: ") + e.what()}, error);
  }
  return spec;
}

Result<JobSpec> ParseJobSpecText(const std::string& text, SpecError* error) {
  auto doc = ParseJsonStrict(text, kMaxSpecDepth, kMaxSpecTextBytes, error);
  if (!doc.ok()) return doc.status();
  return ParseJobSpec(*doc, error);
}

nlohmann::json JobSpecToJson(const JobSpec& spec) {
  // The backoff keys only when set: a spec stored by this version stays readable by one
  // that does not know them.
  json failure_config = {{"max_failures", spec.max_failures}};
  if (spec.restart_backoff_s != kDefaultRestartBackoffS)
    failure_config["restart_backoff_s"] = spec.restart_backoff_s;
  if (spec.max_restart_backoff_s != kDefaultMaxRestartBackoffS)
    failure_config["max_restart_backoff_s"] = spec.max_restart_backoff_s;
  auto or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  auto amount = [](double x) {
    if (x == std::floor(x) && x >= 0 && x < 9.0e18) return json(static_cast<std::uint64_t>(x));
    return json(x);
  };
  json resources = json::object();
  for (const auto& [name, value] : spec.resources_per_worker) resources[name] = amount(value);
  json datasets = json::object();
  for (const auto& [name, d] : spec.datasets) {
    datasets[name] = {{"uri", d.uri}, {"format", or_null(d.format)}, {"split", d.split}};
  }
  json env = json::object();
  for (const auto& [k, v] : spec.env) env[k] = v;
  return json{
      {"name", spec.name},
      {"entrypoint", {{"library", spec.library}, {"function", or_null(spec.function)}}},
      {"train_loop_config", spec.train_loop_config},
      {"scaling_config",
       {{"num_workers", spec.num_workers},
        {"use_gpu", spec.use_gpu},
        {"resources_per_worker", resources},
        {"placement_strategy", PlacementStrategyName(spec.placement_strategy)}}},
      {"run_config",
       {{"storage_path", or_null(spec.storage_path)},
        {"checkpoint_config",
         {{"num_to_keep", spec.num_to_keep > 0 ? json(spec.num_to_keep) : json(nullptr)},
          {"checkpoint_score_attribute", or_null(spec.checkpoint_score_attribute)},
          {"checkpoint_score_order", spec.checkpoint_score_max ? "max" : "min"}}},
        {"failure_config", failure_config}}},
      {"datasets", datasets},
      {"env", env},
      {"priority", spec.priority},
      {"resume_from_checkpoint", or_null(spec.resume_from_checkpoint)},
  };
}

}  // namespace traintl
