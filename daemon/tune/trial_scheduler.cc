#include "daemon/tune/trial_scheduler.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <map>
#include <utility>

#include "common/spelling.h"
#include "daemon/tune/asha.h"
#include "daemon/tune/hyperband.h"
#include "daemon/tune/pbt.h"

namespace traintl::tune {
namespace {

using json = nlohmann::json;

// Ray's FIFOScheduler: every trial runs until it ends by itself.
class FifoScheduler : public TrialScheduler {
 public:
  void OnTrialAdd(const std::string&, const json&) override {}
  SchedulerDecision OnTrialResult(const std::string&, const json&) override { return {}; }
  void OnTrialComplete(const std::string&) override {}
  bool DecidesOnResults() const override { return false; }
  json SaveState() const override { return {{"type", "fifo"}}; }
  Status LoadState(const json& state) override {
    return sched_internal::CheckStateType(state, "fifo");
  }
};

const char kPrefix[] = "tune_config.scheduler";

Status SchedulerError(const std::string& field, const std::string& what) {
  return Status::InvalidArgument(std::string(kPrefix) + (field.empty() ? "" : ".") + field + ": " +
                                 what);
}

std::string Join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// Ray's parameter names this release knows but does not carry out, and why: refused by
// name rather than as a typo.
const std::map<std::string, std::string>& Unsupported() {
  static const std::map<std::string, std::string> kWhy = {
      {"metric", "not a scheduler parameter here: the scheduler uses tune_config.metric"},
      {"mode", "not a scheduler parameter here: the scheduler uses tune_config.mode"},
      {"custom_explore_fn",
       "not supported: a spec cannot carry a function; use "
       "hyperparam_mutations"},
      {"log_config", "not supported (PBT's policy logs are not written)"},
      {"require_attrs", "not supported: results without the metric or time_attr are skipped"},
      {"reward_attr", "not supported: the scheduler uses tune_config.metric"},
  };
  return kWhy;
}

// The object's fields are all in `known` (plus "type"); otherwise names the first one
// that is not, with a did-you-mean.
Status CheckFields(const json& obj, std::vector<std::string> known) {
  known.insert(known.begin(), "type");
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool found = false;
    for (const auto& k : known) found = found || k == it.key();
    if (found) continue;
    if (auto u = Unsupported().find(it.key()); u != Unsupported().end()) {
      return SchedulerError(it.key(), u->second);
    }
    std::string near = Closest(it.key(), known);
    if (!near.empty())
      return SchedulerError(it.key(), "unknown field (did you mean \"" + near + "\"?)");
    return SchedulerError(it.key(), "unknown field (known: " + Join(known) + ")");
  }
  return Status::Ok();
}

Status GetNumber(const json& obj, const char* field, double* out) {
  auto it = obj.find(field);
  if (it == obj.end()) return Status::Ok();
  if (!it->is_number() || !std::isfinite(it->get<double>())) {
    return SchedulerError(field, "must be a number, got " + it->dump());
  }
  *out = it->get<double>();
  return Status::Ok();
}

Status GetBool(const json& obj, const char* field, bool* out) {
  auto it = obj.find(field);
  if (it == obj.end()) return Status::Ok();
  if (!it->is_boolean()) return SchedulerError(field, "must be true or false, got " + it->dump());
  *out = it->get<bool>();
  return Status::Ok();
}

Status GetTimeAttr(const json& obj, std::string* out) {
  auto it = obj.find("time_attr");
  if (it == obj.end()) return Status::Ok();
  if (!it->is_string() || it->get<std::string>().empty()) {
    return SchedulerError("time_attr", "must be the name of a reported result, got " + it->dump());
  }
  *out = it->get<std::string>();
  return Status::Ok();
}

std::string FormatNum(double v) { return sched_internal::FormatNumber(v); }

Status CheckReductionFactor(double rf) {
  if (!(rf > 1)) return SchedulerError("reduction_factor", "must be > 1, got " + FormatNum(rf));
  return Status::Ok();
}

Result<std::unique_ptr<TrialScheduler>> MakeAsha(const json& p, const std::string& metric,
                                                 const std::string& mode, uint64_t seed) {
  TRAINTL_RETURN_IF_ERROR(CheckFields(p, {"time_attr", "max_t", "grace_period", "reduction_factor",
                                          "brackets", "stop_last_trials"}));
  AshaOptions o;
  TRAINTL_RETURN_IF_ERROR(GetTimeAttr(p, &o.time_attr));
  TRAINTL_RETURN_IF_ERROR(GetNumber(p, "max_t", &o.max_t));
  TRAINTL_RETURN_IF_ERROR(GetNumber(p, "grace_period", &o.grace_period));
  TRAINTL_RETURN_IF_ERROR(GetNumber(p, "reduction_factor", &o.reduction_factor));
  TRAINTL_RETURN_IF_ERROR(GetBool(p, "stop_last_trials", &o.stop_last_trials));
  if (auto it = p.find("brackets"); it != p.end()) {
    const bool integral =
        it->is_number_integer() ||
        (it->is_number_float() && std::floor(it->get<double>()) == it->get<double>());
    if (!integral || it->get<double>() < 1 || it->get<double>() > 1000) {
      return SchedulerError("brackets", "must be an integer from 1 to 1000, got " + it->dump());
    }
    o.brackets = static_cast<int64_t>(it->get<double>());
  }
  if (!(o.max_t > 0)) return SchedulerError("max_t", "must be > 0, got " + FormatNum(o.max_t));
  if (!(o.grace_period > 0)) {
    return SchedulerError("grace_period", "must be > 0, got " + FormatNum(o.grace_period));
  }
  if (o.grace_period > o.max_t) {
    return SchedulerError("grace_period", "must be <= max_t (" + FormatNum(o.max_t) + "), got " +
                                              FormatNum(o.grace_period));
  }
  TRAINTL_RETURN_IF_ERROR(CheckReductionFactor(o.reduction_factor));
  return std::unique_ptr<TrialScheduler>(
      std::make_unique<AsyncHyperBandScheduler>(std::move(o), metric, mode, seed));
}

Result<std::unique_ptr<TrialScheduler>> MakeHyperBand(const json& p, const std::string& metric,
                                                      const std::string& mode) {
  TRAINTL_RETURN_IF_ERROR(
      CheckFields(p, {"time_attr", "max_t", "reduction_factor", "stop_last_trials"}));
  HyperBandOptions o;
  TRAINTL_RETURN_IF_ERROR(GetTimeAttr(p, &o.time_attr));
  TRAINTL_RETURN_IF_ERROR(GetNumber(p, "max_t", &o.max_t));
  TRAINTL_RETURN_IF_ERROR(GetNumber(p, "reduction_factor", &o.reduction_factor));
  TRAINTL_RETURN_IF_ERROR(GetBool(p, "stop_last_trials", &o.stop_last_trials));
  // Ray asserts max_t > 0, but below 1 no bracket has a first milestone and it loops.
  if (!(o.max_t >= 1)) return SchedulerError("max_t", "must be >= 1, got " + FormatNum(o.max_t));
  TRAINTL_RETURN_IF_ERROR(CheckReductionFactor(o.reduction_factor));
  if (std::log(o.max_t) / std::log(o.reduction_factor) > 64) {
    return SchedulerError("reduction_factor", "too close to 1 for max_t " + FormatNum(o.max_t) +
                                                  " (more than 64 halvings)");
  }
  return std::unique_ptr<TrialScheduler>(
      std::make_unique<HyperBandScheduler>(std::move(o), metric, mode));
}

Result<std::unique_ptr<TrialScheduler>> MakePbt(const json& p, const std::string& metric,
                                                const std::string& mode, uint64_t seed) {
  TRAINTL_RETURN_IF_ERROR(CheckFields(
      p, {"time_attr", "perturbation_interval", "burn_in_period", "hyperparam_mutations",
          "quantile_fraction", "resample_probability", "perturbation_factors", "synch"}));
  PbtOptions o;
  TRAINTL_RETURN_IF_ERROR(GetTimeAttr(p, &o.time_attr));
  TRAINTL_RETURN_IF_ERROR(GetNumber(p, "perturbation_interval", &o.perturbation_interval));
  TRAINTL_RETURN_IF_ERROR(GetNumber(p, "burn_in_period", &o.burn_in_period));
  TRAINTL_RETURN_IF_ERROR(GetNumber(p, "quantile_fraction", &o.quantile_fraction));
  TRAINTL_RETURN_IF_ERROR(GetNumber(p, "resample_probability", &o.resample_probability));
  bool synch = false;
  TRAINTL_RETURN_IF_ERROR(GetBool(p, "synch", &synch));
  if (synch) return SchedulerError("synch", "true is not supported: PBT runs asynchronously here");
  if (!(o.perturbation_interval > 0)) {
    return SchedulerError("perturbation_interval",
                          "must be > 0, got " + FormatNum(o.perturbation_interval));
  }
  if (!(o.burn_in_period >= 0)) {
    return SchedulerError("burn_in_period", "must be >= 0, got " + FormatNum(o.burn_in_period));
  }
  if (!(o.quantile_fraction >= 0 && o.quantile_fraction <= 0.5)) {
    return SchedulerError("quantile_fraction",
                          "must be between 0 and 0.5, got " + FormatNum(o.quantile_fraction));
  }
  if (!(o.resample_probability >= 0 && o.resample_probability <= 1)) {
    return SchedulerError("resample_probability",
                          "must be between 0 and 1, got " + FormatNum(o.resample_probability));
  }
  if (auto it = p.find("perturbation_factors"); it != p.end()) {
    bool ok = it->is_array() && !it->empty();
    for (const auto& f : *it) ok = ok && f.is_number() && std::isfinite(f.get<double>());
    if (!ok) return SchedulerError("perturbation_factors", "must be a non-empty list of numbers");
    o.perturbation_factors = it->get<std::vector<double>>();
  }
  auto m = p.find("hyperparam_mutations");
  if (m == p.end() || m->is_null()) {
    return SchedulerError("hyperparam_mutations", "required: the config keys PBT may mutate");
  }
  TRAINTL_ASSIGN_OR_RETURN(o.mutations,
                           ParsePbtMutations(*m, std::string(kPrefix) + ".hyperparam_mutations"));
  return std::unique_ptr<TrialScheduler>(
      std::make_unique<PopulationBasedTraining>(std::move(o), metric, mode, seed));
}

}  // namespace

Result<std::unique_ptr<TrialScheduler>> MakeScheduler(const json& scheduler,
                                                      const std::string& metric,
                                                      const std::string& mode, uint64_t seed) {
  if (scheduler.is_null()) return std::unique_ptr<TrialScheduler>(new FifoScheduler());
  json spec = scheduler;
  if (spec.is_string()) spec = {{"type", scheduler}};  // Ray's create_scheduler("asha")
  if (!spec.is_object()) {
    return SchedulerError(
        "",
        "must be an object like {\"type\": \"asha\", ...} or null (FIFO), got " + scheduler.dump());
  }
  static const std::vector<std::string> kTypes = {"fifo", "asha", "async_hyperband", "hyperband",
                                                  "pbt"};
  static const std::vector<std::string> kRayOthers = {
      "median_stopping_rule", "hb_bohb", "bohb", "pb2", "pbt_replay", "resource_changing"};
  auto t = spec.find("type");
  if (t == spec.end() || !t->is_string()) {
    return SchedulerError("type", "required: one of " + Join(kTypes));
  }
  const std::string type = t->get<std::string>();
  bool known = false;
  for (const auto& k : kTypes) known = known || k == type;
  if (!known) {
    for (const auto& k : kRayOthers) {
      if (k == type) {
        return SchedulerError(
            "type", "\"" + type + "\" is not supported (supported: " + Join(kTypes) + ")");
      }
    }
    std::string near = Closest(type, kTypes);
    if (!near.empty()) {
      return SchedulerError("type",
                            "unknown scheduler \"" + type + "\" (did you mean \"" + near + "\"?)");
    }
    return SchedulerError("type",
                          "unknown scheduler \"" + type + "\" (supported: " + Join(kTypes) + ")");
  }
  if (type == "fifo") {
    TRAINTL_RETURN_IF_ERROR(CheckFields(spec, {}));
    return std::unique_ptr<TrialScheduler>(new FifoScheduler());
  }
  if (mode != "min" && mode != "max") {
    return Status::InvalidArgument("tune_config.mode: must be \"min\" or \"max\" for the " + type +
                                   " scheduler");
  }
  if (metric.empty()) {
    return Status::InvalidArgument("tune_config.metric: required by the " + type + " scheduler");
  }
  if (type == "asha" || type == "async_hyperband") return MakeAsha(spec, metric, mode, seed);
  if (type == "hyperband") return MakeHyperBand(spec, metric, mode);
  return MakePbt(spec, metric, mode, seed);
}

namespace sched_internal {

bool NumberAt(const json& result, const std::string& key, double* out) {
  if (!result.is_object()) return false;
  auto it = result.find(key);
  if (it == result.end() || !it->is_number()) return false;
  *out = it->get<double>();
  return true;
}

std::string FormatNumber(double v) {
  char buf[64];
  if (v == 0) return "0";  // and not "-0"
  if (std::isfinite(v) && std::floor(v) == v && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.6g", v);
  }
  return buf;
}

json RngStateToJson(const std::array<uint64_t, 4>& state) {
  json out = json::array();
  for (uint64_t s : state) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016" PRIx64, s);
    out.push_back(buf);
  }
  return out;
}

Result<std::array<uint64_t, 4>> RngStateFromJson(const json& v) {
  const Status bad =
      Status::InvalidArgument("scheduler state: rng must be four 64-bit hex strings, not all zero");
  if (!v.is_array() || v.size() != 4) return bad;
  std::array<uint64_t, 4> out{};
  bool nonzero = false;
  for (size_t i = 0; i < 4; ++i) {
    if (!v[i].is_string()) return bad;
    const std::string& s = v[i].get_ref<const std::string&>();
    if (s.empty() || s.size() > 16) return bad;
    uint64_t x = 0;
    for (char c : s) {
      int d = c >= '0' && c <= '9'   ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                     : -1;
      if (d < 0) return bad;
      x = (x << 4) | static_cast<uint64_t>(d);
    }
    out[i] = x;
    nonzero = nonzero || x != 0;
  }
  // xoshiro's all-zero state only ever yields zeros.
  if (!nonzero) return bad;
  return out;
}

Status CheckStateType(const json& state, const std::string& type) {
  if (!state.is_object()) {
    return Status::InvalidArgument("scheduler state: must be an object, got " +
                                   std::string(state.type_name()));
  }
  auto t = state.find("type");
  if (t == state.end() || !t->is_string()) {
    return Status::InvalidArgument("scheduler state: no \"type\"");
  }
  if (t->get<std::string>() != type) {
    return Status::InvalidArgument("scheduler state: saved by a " + t->get<std::string>() +
                                   " scheduler, not " + type);
  }
  return Status::Ok();
}

}  // namespace sched_internal
}  // namespace traintl::tune
