// The job spec's section parsers: entrypoint, scaling_config (workers, resources,
// placement), run_config (storage, checkpoint retention, failure handling), datasets and
// env (job_spec_internal.h).
#include "proto/job_spec_internal.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace traintl {
namespace spec_internal {
namespace {

const std::vector<std::string> kFormats = {"csv", "jsonl", "npy", "parquet"};

}  // namespace

namespace {

// "pkg.mod:fn": a dotted module path, ':', a function name; ASCII identifiers (a C
// identifier is a Python one), which is what modules and functions are named in practice.
bool IsPythonEntry(const std::string& s) {
  auto colon = s.find(':');
  if (colon == std::string::npos || s.find(':', colon + 1) != std::string::npos) return false;
  if (!IsCIdentifier(s.substr(colon + 1))) return false;
  std::string module = s.substr(0, colon);
  size_t start = 0;
  for (;;) {
    size_t dot = module.find('.', start);
    std::string part = module.substr(start, dot == std::string::npos ? dot : dot - start);
    if (!IsCIdentifier(part)) return false;
    if (dot == std::string::npos) return true;
    start = dot + 1;
  }
}

bool ParseLibraryEntry(Checker& c, const json& ep, JobSpec* spec) {
  const json* lib = Find(ep, "library");
  const char* lib_expect = "must be a non-empty path of a shared library";
  if (!c.String("entrypoint.library", *lib, &spec->library, lib_expect)) return false;
  if (spec->library.empty()) {
    return c.Fail("entrypoint.library", std::string(lib_expect) + ", got \"\"");
  }
  if (spec->library.size() > kMaxPathLen) {
    return c.Fail("entrypoint.library", "must be at most 4096 characters");
  }
  if (const json* fn = Find(ep, "function"); fn != nullptr && !fn->is_null()) {
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

bool ParseCommand(Checker& c, const json& v, JobSpec* spec) {
  const char* expect = "must be a non-empty array of strings: the program and its arguments";
  if (!v.is_array() || v.empty())
    return c.Fail("entrypoint.command", std::string(expect) + ", got " + Describe(v));
  if (v.size() > kMaxCommandArgs) {
    return c.Fail("entrypoint.command",
                  "has too many arguments: at most " + std::to_string(kMaxCommandArgs));
  }
  std::size_t total = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string path = "entrypoint.command[" + std::to_string(i) + "]";
    std::string arg;
    if (!c.String(path, v[i], &arg, "must be a string")) return false;
    if (i == 0 && arg.empty()) return c.Fail(path, "must name the program to run, got \"\"");
    total += arg.size() + 1;
    if (total > kMaxCommandBytes) {
      return c.Fail("entrypoint.command",
                    "is too long: at most " + std::to_string(kMaxCommandBytes) + " bytes in all");
    }
    spec->command.push_back(std::move(arg));
  }
  return true;
}

bool ParseWorkingDir(Checker& c, const json& ep, JobSpec* spec) {
  if (const json* wd = Find(ep, "working_dir"); wd != nullptr && !wd->is_null()) {
    const char* expect = "must be the path of a directory (packed and shipped with the job)";
    if (!c.String("entrypoint.working_dir", *wd, &spec->working_dir, expect)) return false;
    if (spec->working_dir.empty()) {
      return c.Fail("entrypoint.working_dir", std::string(expect) + ", got \"\"");
    }
    if (spec->working_dir.size() > kMaxPathLen) {
      return c.Fail("entrypoint.working_dir", "must be at most 4096 characters");
    }
  }
  if (const json* ex = Find(ep, "excludes"); ex != nullptr && !ex->is_null()) {
    if (spec->working_dir.empty()) {
      return c.Fail("entrypoint.excludes", "applies to a working_dir, and none is given");
    }
    if (!ex->is_array() || ex->size() > 10000) {
      return c.Fail("entrypoint.excludes",
                    "must be an array of .gitignore-style patterns, got " + Describe(*ex));
    }
    for (std::size_t i = 0; i < ex->size(); ++i) {
      std::string pattern;
      if (!c.String("entrypoint.excludes[" + std::to_string(i) + "]", (*ex)[i], &pattern)) {
        return false;
      }
      spec->excludes.push_back(std::move(pattern));
    }
  }
  return true;
}

}  // namespace

bool ParseEntrypoint(Checker& c, const json& doc, JobSpec* spec) {
  spec->entry_kind = EntrypointKind::kLibrary;
  spec->library.clear();
  spec->function.clear();
  spec->python.clear();
  spec->command.clear();
  spec->working_dir.clear();
  spec->excludes.clear();
  const char* kinds =
      "{\"library\": \"libtrain.so\"}, {\"python\": \"module:function\", \"working_dir\": "
      "\"dir\"} or {\"command\": [\"prog\", \"arg\", ...]}";
  const json* ep = Find(doc, "entrypoint");
  if (ep == nullptr) return c.Fail("entrypoint", std::string("is required: ") + kinds);
  if (!c.Object("entrypoint", *ep,
                "an object: {\"library\": ...}, {\"python\": ...} or {\"command\": ...}")) {
    return false;
  }
  if (!c.Keys("entrypoint", *ep,
              {"library", "function", "python", "command", "working_dir", "excludes"})) {
    return false;
  }
  std::vector<std::string> given;
  for (const char* k : {"library", "python", "command"}) {
    if (Find(*ep, k) != nullptr) given.push_back(k);
  }
  if (given.empty()) return c.Fail("entrypoint", std::string("needs one of ") + kinds);
  if (given.size() > 1) {
    return c.Fail("entrypoint", "has both \"" + given[0] + "\" and \"" + given[1] +
                                    "\": give exactly one of library, python or command");
  }
  const std::string& kind = given[0];
  if (kind != "library") {
    if (Find(*ep, "function") != nullptr) {
      return c.Fail("entrypoint.function",
                    kind == "python" ? "belongs to a library entry point; a Python one names its "
                                       "function in \"python\": \"module:function\""
                                     : "belongs to a library entry point, not a command");
    }
  } else {
    for (const char* k : {"working_dir", "excludes"}) {
      if (Find(*ep, k) != nullptr) {
        return c.Fail(std::string("entrypoint.") + k,
                      "applies to python and command entry points, not to a library (which "
                      "is uploaded by itself)");
      }
    }
  }
  if (kind == "library") return ParseLibraryEntry(c, *ep, spec);
  if (kind == "python") {
    spec->entry_kind = EntrypointKind::kPython;
    const json* py = Find(*ep, "python");
    const char* expect =
        "must be \"module:function\" (a dotted module path in the working_dir and the "
        "function's name, e.g. \"train:train_fn\")";
    if (!c.String("entrypoint.python", *py, &spec->python, expect)) return false;
    if (spec->python.size() > kMaxNameLen * 4 || !IsPythonEntry(spec->python)) {
      return c.Fail("entrypoint.python", std::string(expect) + ", got " + Describe(*py));
    }
  } else {
    spec->entry_kind = EntrypointKind::kCommand;
    if (!ParseCommand(c, *Find(*ep, "command"), spec)) return false;
  }
  return ParseWorkingDir(c, *ep, spec);
}

bool ParseFramework(Checker& c, const json& doc, JobSpec* spec) {
  spec->framework.clear();
  const json* fw = Find(doc, "framework");
  if (fw == nullptr || fw->is_null()) return true;
  const char* expect = "must be \"torch\", \"tensorflow\" or \"xgboost\"";
  if (!c.String("framework", *fw, &spec->framework, expect)) return false;
  const std::vector<std::string> known = {"torch", "tensorflow", "xgboost"};
  if (std::find(known.begin(), known.end(), spec->framework) == known.end()) {
    std::string near = Closest(spec->framework, known);
    return c.Fail("framework", std::string(expect) + ", got " + Describe(*fw) +
                                   (near.empty() ? "" : " (did you mean " + near + "?)"));
  }
  if (spec->entry_kind == EntrypointKind::kLibrary && spec->framework == "tensorflow") {
    return c.Fail("framework",
                  "\"tensorflow\" applies to python and command entry points, not to a C++ "
                  "library");
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
  spec->min_workers = 0;
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
    if (const json* v = Find(*sc, "num_workers"); v != nullptr && v->is_object()) {
      // Elastic: {"min": m, "max": n}.
      const std::string base = "scaling_config.num_workers";
      if (!c.Keys(base, *v, {"min", "max"})) return false;
      std::int64_t lo = 0, hi = 0;
      const json* min = Find(*v, "min");
      const json* max = Find(*v, "max");
      if (min == nullptr) return c.Fail(base + ".min", "is required in an elastic size");
      if (max == nullptr) return c.Fail(base + ".max", "is required in an elastic size");
      if (!c.Int(base + ".min", *min, 1, kMaxWorkers, &lo, "must be an integer >= 1") ||
          !c.Int(base + ".max", *max, 1, kMaxWorkers, &hi, "must be an integer >= 1")) {
        return false;
      }
      if (hi < lo) {
        return c.Fail(base + ".max",
                      "must be >= min (" + std::to_string(lo) + "), got " + std::to_string(hi));
      }
      spec->min_workers = lo < hi ? static_cast<int>(lo) : 0;
      spec->num_workers = static_cast<int>(hi);
    } else if (v != nullptr) {
      std::int64_t n = 0;
      if (!c.Int("scaling_config.num_workers", *v, 1, kMaxWorkers, &n, "must be an integer >= 1")) {
        return false;
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
  spec->peer_recovery = false;
  spec->time_limit_s = 0;
  // Regroups rebuild Gloo groups; a dead NCCL peer can only end the attempt (for now).
  if (spec->elastic() && spec->use_gpu) {
    return c.Fail("scaling_config.num_workers",
                  "an elastic size {min, max} needs CPU (Gloo) collectives: use_gpu jobs have a "
                  "fixed size for now");
  }
  const json* rc = Find(doc, "run_config");
  if (rc == nullptr) return true;
  if (!c.Object("run_config", *rc, "an object")) return false;
  if (!c.Keys("run_config", *rc,
              {"storage_path", "checkpoint_config", "failure_config", "time_limit_s"})) {
    return false;
  }
  if (const json* v = Find(*rc, "time_limit_s"); v != nullptr && !v->is_null()) {
    const char* expect = "must be a number of seconds in (0, 31536000] (or null for no limit)";
    if (!c.Number("run_config.time_limit_s", *v, &spec->time_limit_s, expect)) return false;
    if (!(spec->time_limit_s > 0 && spec->time_limit_s <= 31536000))
      return c.Fail("run_config.time_limit_s", std::string(expect) + ", got " + Describe(*v));
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
    if (!c.Keys(base, *fc,
                {"max_failures", "restart_backoff_s", "max_restart_backoff_s", "peer_recovery"})) {
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
    if (const json* v = Find(*fc, "peer_recovery"); v != nullptr && !v->is_null()) {
      const std::string path = base + ".peer_recovery";
      if (!c.Bool(path, *v, &spec->peer_recovery)) return false;
      if (spec->peer_recovery && spec->max_failures == 0) {
        return c.Fail(path,
                      "needs max_failures -1 or >= 1: each rank replaced counts as a failure");
      }
      if (spec->peer_recovery && spec->use_gpu) {
        return c.Fail(path,
                      "needs CPU (Gloo) collectives: a use_gpu job restarts from its checkpoint "
                      "for now");
      }
      if (spec->peer_recovery && spec->entry_kind == EntrypointKind::kCommand) {
        return c.Fail(path,
                      "is supported for library and python entry points (run_steps) only; "
                      "a command job restarts from its checkpoint");
      }
    }
  }
  return true;
}

// "items": an array of at most kMaxInlineItems items and kMaxInlineItemsBytes as JSON; an
// item that is not an object becomes {"item": it}, as ray.data.from_items does.
bool ParseInlineItems(Checker& c, const std::string& path, const json& items, json* out) {
  if (!items.is_array() || items.empty()) {
    return c.Fail(path,
                  "must be a non-empty array of items (objects, as ray.data.from_items "
                  "takes), got " +
                      Describe(items));
  }
  if (items.size() > kMaxInlineItems) {
    return c.Fail(path, "holds " + std::to_string(items.size()) + " items; at most " +
                            std::to_string(kMaxInlineItems) +
                            " fit in a job spec: put larger data in a file and give its \"uri\"");
  }
  const size_t bytes = items.dump().size();
  if (bytes > kMaxInlineItemsBytes) {
    return c.Fail(path, "is " + std::to_string(bytes) + " bytes as JSON; at most " +
                            std::to_string(kMaxInlineItemsBytes) +
                            " fit in a job spec: put larger data in a file and give its \"uri\"");
  }
  *out = json::array();
  for (const json& item : items) out->push_back(item.is_object() ? item : json{{"item", item}});
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
    if (!c.Keys(path, d, {"uri", "format", "split", "items"}, /*structural=*/false)) return false;
    DatasetSpec out;
    const json* uri = Find(d, "uri");
    if (const json* items = Find(d, "items"); items != nullptr) {
      if (uri != nullptr)
        return c.Fail(Child(path, "items"), "give either \"uri\" or \"items\", not both");
      if (!ParseInlineItems(c, Child(path, "items"), *items, &out.items)) return false;
      if (const json* f = Find(d, "format"); f != nullptr && !f->is_null() && *f != "jsonl") {
        return c.Fail(Child(path, "format"),
                      "must be jsonl or null for inline items (they are read as JSON records), "
                      "got " +
                          Describe(*f));
      }
      out.format = "jsonl";
      out.split = name == "train";
      if (const json* s = Find(d, "split")) {
        if (!c.Bool(Child(path, "split"), *s, &out.split)) return false;
      }
      spec->datasets.emplace(name, std::move(out));
      continue;
    }
    if (uri == nullptr) {
      return c.Fail(Child(path, "uri"),
                    "is required (file://, http:// or https:// URI), or \"items\" for inline "
                    "items");
    }
    const char* uri_expect = "must be a file://, http:// or https:// URI";
    if (!c.String(Child(path, "uri"), *uri, &out.uri, uri_expect)) return false;
    std::string problem = CheckUri(out.uri);
    if (!problem.empty()) {
      return c.Fail(Child(path, "uri"), problem + ", got " + Describe(*uri));
    }
    if (const json* f = Find(d, "format"); f != nullptr && !f->is_null()) {
      const char* expect = "must be one of csv, jsonl, npy, parquet (or null to infer it)";
      if (!c.String(Child(path, "format"), *f, &out.format, expect)) return false;
      if (std::find(kFormats.begin(), kFormats.end(), out.format) == kFormats.end()) {
        std::string near = Closest(out.format, kFormats);
        return c.Fail(Child(path, "format"),
                      std::string(expect) + ", got " + Describe(*f) +
                          (near.empty() ? "" : " (did you mean " + near + "?)"));
      }
    }
    out.split = name == "train";
    if (const json* s = Find(d, "split")) {
      if (!c.Bool(Child(path, "split"), *s, &out.split)) return false;
    }
    spec->datasets.emplace(name, std::move(out));
  }
  return true;
}

// The runtime's knobs a job may set in its env (worker/torch/shm_group.h).
bool IsUserTunable(const std::string& key) {
  static const char* const kTunable[] = {"TRAINTL_SHM_COLLECTIVES", "TRAINTL_SHM_CHUNK_KB",
                                         "TRAINTL_SHM_SPIN_US", "TRAINTL_SHM_ASYNC"};
  for (const char* t : kTunable) {
    if (key == t) return true;
  }
  return false;
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
    if (key.rfind("TRAINTL_", 0) == 0 && !IsUserTunable(key)) {
      return c.Fail(path,
                    "names starting with TRAINTL_ are reserved (the runtime sets them); a job "
                    "may set only TRAINTL_SHM_COLLECTIVES, TRAINTL_SHM_CHUNK_KB, "
                    "TRAINTL_SHM_SPIN_US and TRAINTL_SHM_ASYNC");
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

}  // namespace spec_internal
}  // namespace traintl
