#include "daemon/tune/tune_spec.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/spelling.h"

namespace traintl::tune {
namespace {

using json = nlohmann::json;

Status SpecError(const std::string& field, const std::string& what) {
  return Status::InvalidArgument(field + ": " + what);
}

// Unknown fields are errors, as in the job spec: a misspelt "num_sample" silently left at
// its default would run a different experiment than the one asked for.
Status CheckKnown(const json& obj, const std::string& prefix,
                  const std::vector<std::string>& known) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool found = false;
    for (const auto& k : known) found = found || k == it.key();
    if (found) continue;
    std::string msg = "unknown field";
    std::string near = Closest(it.key(), known);
    if (!near.empty()) {
      msg += " (did you mean \"" + near + "\"?)";
    } else {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      msg += " (known: " + list + ")";
    }
    return SpecError(prefix + it.key(), msg);
  }
  return Status::Ok();
}

// A JSON integer, or a float with an integral value (1e3 is a thousand; 1.5 is refused).
bool AsInt64(const json& v, int64_t* out) {
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return false;
    }
    *out = static_cast<int64_t>(v.get<uint64_t>());
    return true;
  }
  if (v.is_number_integer()) {
    *out = v.get<int64_t>();
    return true;
  }
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  if (!std::isfinite(d) || std::floor(d) != d || std::fabs(d) >= 9.2e18) return false;
  *out = static_cast<int64_t>(d);
  return true;
}

const json* Find(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

Status ParseSearchAlg(const json& v, TuneConfig* c) {
  if (v.is_string()) {
    c->search_alg = v.get<std::string>();
  } else if (v.is_object()) {
    TRAINTL_RETURN_IF_ERROR(CheckKnown(v, "tune_config.search_alg.", {"type", "seed"}));
    if (const json* type = Find(v, "type")) {
      if (!type->is_string()) {
        return SpecError("tune_config.search_alg.type", "must be \"random\" or \"grid\"");
      }
      c->search_alg = type->get<std::string>();
    }
    if (const json* seed = Find(v, "seed"); seed != nullptr && !seed->is_null()) {
      int64_t s = 0;
      if (seed->is_number_unsigned()) {
        c->seed = seed->get<uint64_t>();
      } else if (AsInt64(*seed, &s) && s >= 0) {
        c->seed = static_cast<uint64_t>(s);
      } else {
        return SpecError("tune_config.search_alg.seed",
                         "must be an integer >= 0, got " + seed->dump());
      }
    }
  } else {
    return SpecError(
        "tune_config.search_alg",
        "must be \"random\", \"grid\" or {\"type\": ..., \"seed\": N}, got " + v.dump());
  }
  if (c->search_alg != "random" && c->search_alg != "grid") {
    std::string near = Closest(c->search_alg, {"random", "grid"});
    return SpecError(v.is_object() ? "tune_config.search_alg.type" : "tune_config.search_alg",
                     "must be \"random\" or \"grid\", got \"" + c->search_alg + "\"" +
                         (near.empty() ? "" : " (did you mean \"" + near + "\"?)"));
  }
  return Status::Ok();
}

Status ParseTuneConfig(const json& tc, TuneConfig* c) {
  TRAINTL_RETURN_IF_ERROR(CheckKnown(tc, "tune_config.",
                                     {"metric", "mode", "num_samples", "max_concurrent_trials",
                                      "time_budget_s", "search_alg", "scheduler"}));
  const json* metric = Find(tc, "metric");
  if (metric == nullptr) return SpecError("tune_config.metric", "required");
  if (!metric->is_string() || metric->get<std::string>().empty()) {
    return SpecError("tune_config.metric", "must be a non-empty string (a reported metric's name)");
  }
  c->metric = metric->get<std::string>();

  const json* mode = Find(tc, "mode");
  if (mode == nullptr) return SpecError("tune_config.mode", "required (\"min\" or \"max\")");
  if (!mode->is_string() || (*mode != "min" && *mode != "max")) {
    return SpecError("tune_config.mode", "must be \"min\" or \"max\", got " + mode->dump());
  }
  c->mode = mode->get<std::string>();

  if (const json* t = Find(tc, "time_budget_s")) {
    if (!t->is_number() || !std::isfinite(t->get<double>()) || t->get<double>() < 0) {
      return SpecError("tune_config.time_budget_s",
                       "must be a number of seconds >= 0 (0: no budget), got " + t->dump());
    }
    c->time_budget_s = t->get<double>();
  }

  if (const json* n = Find(tc, "num_samples")) {
    if (!AsInt64(*n, &c->num_samples) || (c->num_samples < 1 && c->num_samples != -1)) {
      return SpecError(
          "tune_config.num_samples",
          "must be an integer >= 1, or -1 (as many as time_budget_s allows), got " + n->dump());
    }
    if (c->num_samples == -1 && !(c->time_budget_s > 0)) {
      return SpecError("tune_config.num_samples", "-1 needs time_budget_s > 0");
    }
  }

  if (const json* m = Find(tc, "max_concurrent_trials")) {
    int64_t v = 0;
    if (!AsInt64(*m, &v) || v < 0 || v > std::numeric_limits<int>::max()) {
      return SpecError("tune_config.max_concurrent_trials",
                       "must be an integer >= 0 (0: no limit), got " + m->dump());
    }
    c->max_concurrent_trials = static_cast<int>(v);
  }

  if (const json* s = Find(tc, "search_alg")) TRAINTL_RETURN_IF_ERROR(ParseSearchAlg(*s, c));

  c->scheduler = nullptr;
  if (const json* s = Find(tc, "scheduler")) {
    if (!s->is_null() && !s->is_object()) {
      return SpecError("tune_config.scheduler",
                       "must be an object ({\"type\": \"asha\", ...}) or null, got " + s->dump());
    }
    c->scheduler = *s;
  }
  return Status::Ok();
}

}  // namespace

int64_t TuneSpec::TotalTrials() const {
  return config.num_samples < 0 ? -1 : config.num_samples * space.GridSize();
}

Result<TuneSpec> ParseTuneSpec(const json& doc) {
  if (!doc.is_object()) {
    return Status::InvalidArgument(
        "tune spec: must be an object {\"trainer\", \"param_space\", \"tune_config\"}");
  }
  TRAINTL_RETURN_IF_ERROR(CheckKnown(doc, "", {"trainer", "param_space", "tune_config"}));
  TuneSpec spec;

  const json* trainer = Find(doc, "trainer");
  if (trainer == nullptr) return SpecError("trainer", "required (the job spec each trial runs)");
  if (!trainer->is_object()) return SpecError("trainer", "must be an object (a job spec)");
  spec.trainer = *trainer;

  spec.param_space = json::object();
  if (const json* ps = Find(doc, "param_space")) spec.param_space = *ps;
  auto space = SearchSpace::Parse(spec.param_space, spec.trainer);
  if (!space.ok()) return space.status();
  spec.space = std::move(space).value();

  const json* tc = Find(doc, "tune_config");
  if (tc == nullptr) return SpecError("tune_config", "required (at least metric and mode)");
  if (!tc->is_object()) return SpecError("tune_config", "must be an object");
  TRAINTL_RETURN_IF_ERROR(ParseTuneConfig(*tc, &spec.config));

  if (spec.config.search_alg == "grid") {
    if (!spec.space.has_grid()) {
      return SpecError("tune_config.search_alg",
                       "\"grid\" needs grid_search values in param_space");
    }
    for (const auto& p : spec.space.params()) {
      if (p.domain.kind == Domain::Kind::kGridSearch) continue;
      std::string where = "param_space";
      for (const auto& k : p.path) where += "." + k;
      return SpecError("tune_config.search_alg",
                       "\"grid\" cannot sample " + where + " (not a grid_search); use \"random\"");
    }
  }
  if (spec.config.num_samples > std::numeric_limits<int64_t>::max() / spec.space.GridSize()) {
    return SpecError("tune_config.num_samples", "times the grid's points is too many trials");
  }
  return spec;
}

json TuneSpecToJson(const TuneSpec& spec) {
  json search_alg = {{"type", spec.config.search_alg}};
  if (spec.config.seed) search_alg["seed"] = *spec.config.seed;
  return {{"trainer", spec.trainer},
          {"param_space", spec.param_space},
          {"tune_config",
           {{"metric", spec.config.metric},
            {"mode", spec.config.mode},
            {"num_samples", spec.config.num_samples},
            {"max_concurrent_trials", spec.config.max_concurrent_trials},
            {"time_budget_s", spec.config.time_budget_s},
            {"search_alg", std::move(search_alg)},
            {"scheduler", spec.config.scheduler}}}};
}

}  // namespace traintl::tune
