#include "proto/job_spec.h"

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

#include "proto/job_spec_internal.h"

namespace traintl {

using spec_internal::Checker;
using spec_internal::Child;
using spec_internal::Describe;
using spec_internal::Find;
using spec_internal::Invalid;
using spec_internal::IsAbsolutePath;
using spec_internal::IsLowerHex;
using spec_internal::IsValidName;
using spec_internal::json;
using spec_internal::JsonDepth;
using spec_internal::kMaxMemoryBytes;
using spec_internal::kMaxNameLen;
using spec_internal::ParseDatasets;
using spec_internal::ParseEntrypoint;
using spec_internal::ParseEnv;
using spec_internal::ParseFramework;
using spec_internal::ParseRunConfig;
using spec_internal::ParseScaling;

namespace {

bool ParseTopLevel(Checker& c, const json& doc, JobSpec* spec) {
  if (!doc.is_object()) {
    return c.Fail("", "the job spec must be a JSON object, got " + Describe(doc));
  }
  if (!c.Keys("", doc,
              {"name", "entrypoint", "framework", "train_loop_config", "scaling_config",
               "run_config", "datasets", "env", "priority", "resume_from_checkpoint"})) {
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
  if (!ParseFramework(c, doc, spec)) return false;

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

const char* EntrypointKindName(EntrypointKind kind) {
  switch (kind) {
    case EntrypointKind::kLibrary:
      return "library";
    case EntrypointKind::kPython:
      return "python";
    case EntrypointKind::kCommand:
      return "command";
  }
  return "library";
}

bool operator==(const DatasetSpec& a, const DatasetSpec& b) {
  return a.uri == b.uri && a.format == b.format && a.split == b.split && a.items == b.items;
}

bool operator==(const JobSpec& a, const JobSpec& b) {
  return a.name == b.name && a.entry_kind == b.entry_kind && a.library == b.library &&
         a.function == b.function && a.python == b.python && a.command == b.command &&
         a.working_dir == b.working_dir && a.excludes == b.excludes && a.framework == b.framework &&
         a.train_loop_config == b.train_loop_config && a.num_workers == b.num_workers &&
         a.min_workers == b.min_workers && a.use_gpu == b.use_gpu &&
         a.resources_per_worker == b.resources_per_worker &&
         a.placement_strategy == b.placement_strategy && a.storage_path == b.storage_path &&
         a.num_to_keep == b.num_to_keep &&
         a.checkpoint_score_attribute == b.checkpoint_score_attribute &&
         a.checkpoint_score_max == b.checkpoint_score_max && a.max_failures == b.max_failures &&
         a.restart_backoff_s == b.restart_backoff_s &&
         a.max_restart_backoff_s == b.max_restart_backoff_s && a.peer_recovery == b.peer_recovery &&
         a.time_limit_s == b.time_limit_s && a.datasets == b.datasets && a.env == b.env &&
         a.priority == b.priority && a.resume_from_checkpoint == b.resume_from_checkpoint;
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

}  // namespace traintl
