#include "daemon/tune/pbt.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace traintl::tune {
namespace {

using json = nlohmann::json;
using sched_internal::FormatNumber;
using sched_internal::NumberAt;

Status PbtError(const std::string& where, const std::string& what) {
  return Status::InvalidArgument(where + ": " + what);
}

double RankKey(double score) {
  return std::isnan(score) ? -std::numeric_limits<double>::infinity() : score;
}

}  // namespace

Result<std::vector<PbtMutation>> ParsePbtMutations(const json& v, const std::string& where) {
  if (!v.is_object()) {
    return PbtError(where, "must be an object mapping config keys to a domain or a list of values");
  }
  if (v.empty()) return PbtError(where, "must name at least one key to mutate");
  // A distribution here would read as a config key named after it: surely a mistake.
  if (IsDomain(v)) {
    return PbtError(where, "must map config keys to mutations, not be a distribution itself");
  }
  std::vector<PbtMutation> out;
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string at = where + "." + it.key();
    PbtMutation m;
    m.key = it.key();
    const json& spec = it.value();
    if (IsDomain(spec)) {
      TRAINTL_ASSIGN_OR_RETURN(Domain d, ParseDomain(spec, at));
      if (d.kind == Domain::Kind::kGridSearch) {
        return PbtError(at, "grid_search cannot be mutated: give a list of values instead");
      }
      m.kind = PbtMutation::Kind::kDomain;
      m.domain = std::move(d);
    } else if (spec.is_array()) {
      if (spec.empty()) return PbtError(at, "needs a non-empty list of values");
      m.kind = PbtMutation::Kind::kList;
      m.values = spec;
    } else if (spec.is_object()) {
      TRAINTL_ASSIGN_OR_RETURN(m.children, ParsePbtMutations(spec, at));
      m.kind = PbtMutation::Kind::kNested;
    } else {
      return PbtError(at,
                      "must be a domain (e.g. {\"uniform\": [lo, hi]}), a list of values, or an "
                      "object of them for nested keys");
    }
    out.push_back(std::move(m));
  }
  return out;
}

PopulationBasedTraining::PopulationBasedTraining(PbtOptions options, std::string metric,
                                                 const std::string& mode, uint64_t seed)
    : opt_(std::move(options)), metric_(std::move(metric)), max_mode_(mode != "min"), rng_(seed) {}

void PopulationBasedTraining::OnTrialAdd(const std::string& trial, const json& config) {
  auto it = trials_.find(trial);
  if (it != trials_.end()) return;
  order_.push_back(trial);
  trials_[trial].config = config.is_object() ? config : json::object();
}

json PopulationBasedTraining::Config(const std::string& trial) const {
  auto it = trials_.find(trial);
  return it == trials_.end() ? json(nullptr) : it->second.config;
}

json PopulationBasedTraining::Explore(const json& config) {
  return ExploreLevel(config.is_object() ? config : json::object(), opt_.mutations);
}

json PopulationBasedTraining::ExploreLevel(const json& config,
                                           const std::vector<PbtMutation>& mutations) {
  json out = config;
  for (const PbtMutation& m : mutations) {
    auto cur = config.find(m.key);
    const bool has = cur != config.end();
    switch (m.kind) {
      case PbtMutation::Kind::kNested:
        out[m.key] = ExploreLevel(has && cur->is_object() ? *cur : json::object(), m.children);
        break;
      case PbtMutation::Kind::kList: {
        // Ray draws the resample coin first, whatever the value.
        const bool resample = rng_.Uniform01() < opt_.resample_probability;
        size_t idx = m.values.size();
        if (has) {
          for (size_t i = 0; i < m.values.size(); ++i) {
            if (m.values[i] == *cur) {
              idx = i;
              break;
            }
          }
        }
        if (resample || idx == m.values.size()) {
          out[m.key] = m.values[rng_.Below(m.values.size())];
        } else {
          const bool right = rng_.Below(2) == 1;  // random.choice([-1, 1])
          size_t next = idx;
          if (right && idx + 1 < m.values.size()) next = idx + 1;
          if (!right && idx > 0) next = idx - 1;
          out[m.key] = m.values[next];
        }
        break;
      }
      case PbtMutation::Kind::kDomain: {
        const bool resample = rng_.Uniform01() < opt_.resample_probability;
        json value;
        if (resample || !has || !cur->is_number()) {
          value = m.domain.Sample(rng_);
        } else {
          const double factor =
              opt_.perturbation_factors[rng_.Below(opt_.perturbation_factors.size())];
          value = cur->get<double>() * factor;
        }
        // An integer hyperparameter (a batch size) stays one: Python's int() truncates.
        if (has && cur->is_number_integer() && value.is_number()) {
          const double x = std::trunc(value.get<double>());
          if (std::fabs(x) < 9.0e18) value = static_cast<int64_t>(x);
        }
        out[m.key] = std::move(value);
        break;
      }
    }
  }
  return out;
}

SchedulerDecision PopulationBasedTraining::OnTrialResult(const std::string& trial,
                                                         const json& result) {
  double time = 0, metric = 0;
  if (!NumberAt(result, opt_.time_attr, &time) || !NumberAt(result, metric_, &metric)) return {};
  if (trials_.count(trial) == 0) OnTrialAdd(trial, json::object());
  TrialState& st = trials_[trial];
  if (st.finished) return {};
  if (st.has_exploit && time == st.exploit_time) {
    return {SchedulerDecision::Action::kExploit, st.exploit_reason, st.exploit_donor,
            st.exploit_config};
  }
  if (time < opt_.burn_in_period) return {};
  if (time - st.last_perturbation_time < opt_.perturbation_interval) return {};

  st.has_score = true;
  st.last_score = Signed(metric);
  st.last_train_time = time;
  st.last_perturbation_time = time;

  // Ray's _quantiles: live trials with a score, worst first, ties in the order added.
  std::vector<std::string> ranked;
  for (const auto& name : order_) {
    const TrialState& t = trials_[name];
    if (t.has_score && !t.finished) ranked.push_back(name);
  }
  std::stable_sort(ranked.begin(), ranked.end(), [&](const std::string& a, const std::string& b) {
    return RankKey(trials_[a].last_score) < RankKey(trials_[b].last_score);
  });
  size_t q = 0;
  if (ranked.size() > 1) {
    q = static_cast<size_t>(std::ceil(static_cast<double>(ranked.size()) * opt_.quantile_fraction));
    if (static_cast<double>(q) > static_cast<double>(ranked.size()) / 2) q = ranked.size() / 2;
  }
  const std::vector<std::string> lower(ranked.begin(), ranked.begin() + q);
  const std::vector<std::string> upper(ranked.end() - q, ranked.end());
  auto in = [&](const std::vector<std::string>& v) {
    return std::find(v.begin(), v.end(), trial) != v.end();
  };
  st.donor_candidate = in(upper);
  if (!in(lower)) return {};

  const std::string donor = upper[rng_.Below(upper.size())];
  TrialState& ds = trials_[donor];
  // Ray clones only a trial it checkpointed as a top one at that trial's own last step.
  if (!ds.donor_candidate) return {};
  SchedulerDecision d;
  d.action = SchedulerDecision::Action::kExploit;
  d.donor = donor;
  d.new_config = Explore(ds.config);
  d.reason = "PBT: " + metric_ + " " + FormatNumber(metric) + " is in the bottom " +
             FormatNumber(opt_.quantile_fraction * 100) + "% at " + opt_.time_attr + " " +
             FormatNumber(time) + "; cloning " + donor + " (" + metric_ + " " +
             FormatNumber(Signed(ds.last_score)) + ")";
  st.config = d.new_config;
  st.last_perturbation_time = ds.last_perturbation_time;
  st.last_train_time = ds.last_train_time;
  st.has_exploit = true;
  st.exploit_time = time;
  st.exploit_donor = donor;
  st.exploit_config = d.new_config;
  st.exploit_reason = d.reason;
  return d;
}

void PopulationBasedTraining::OnTrialComplete(const std::string& trial) {
  if (trials_.count(trial) == 0) OnTrialAdd(trial, json::object());
  trials_[trial].finished = true;
}

json PopulationBasedTraining::SaveState() const {
  json trials = json::array();
  for (const auto& name : order_) {
    const TrialState& t = trials_.at(name);
    json j = {{"trial", name},
              {"config", t.config},
              {"last_perturbation_time", t.last_perturbation_time},
              {"last_train_time", t.last_train_time},
              {"donor_candidate", t.donor_candidate},
              {"finished", t.finished}};
    if (t.has_score)
      j["last_score"] = std::isnan(t.last_score) ? json(nullptr) : json(t.last_score);
    if (t.has_exploit) {
      j["exploit"] = {{"time", t.exploit_time},
                      {"donor", t.exploit_donor},
                      {"config", t.exploit_config},
                      {"reason", t.exploit_reason}};
    }
    trials.push_back(std::move(j));
  }
  return {{"type", "pbt"},
          {"rng", sched_internal::RngStateToJson(rng_.state())},
          {"trials", std::move(trials)}};
}

Status PopulationBasedTraining::LoadState(const json& state) {
  TRAINTL_RETURN_IF_ERROR(sched_internal::CheckStateType(state, "pbt"));
  try {
    auto rng = sched_internal::RngStateFromJson(state.at("rng"));
    if (!rng.ok()) return rng.status();
    std::vector<std::string> order;
    std::map<std::string, TrialState> trials;
    for (const json& j : state.at("trials")) {
      const std::string name = j.at("trial").get<std::string>();
      if (trials.count(name) != 0) {
        return Status::InvalidArgument("PBT scheduler state: trial " + name + " twice");
      }
      TrialState t;
      t.config = j.at("config");
      t.last_perturbation_time = j.at("last_perturbation_time").get<double>();
      t.last_train_time = j.at("last_train_time").get<double>();
      t.donor_candidate = j.at("donor_candidate").get<bool>();
      t.finished = j.at("finished").get<bool>();
      if (auto s = j.find("last_score"); s != j.end()) {
        t.has_score = true;
        t.last_score = s->is_null() ? std::numeric_limits<double>::quiet_NaN() : s->get<double>();
      }
      if (auto e = j.find("exploit"); e != j.end()) {
        t.has_exploit = true;
        t.exploit_time = e->at("time").get<double>();
        t.exploit_donor = e->at("donor").get<std::string>();
        t.exploit_config = e->at("config");
        t.exploit_reason = e->at("reason").get<std::string>();
      }
      order.push_back(name);
      trials[name] = std::move(t);
    }
    rng_ = Rng::FromState(*rng);
    order_ = std::move(order);
    trials_ = std::move(trials);
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("PBT scheduler state: ") + e.what());
  }
  return Status::Ok();
}

}  // namespace traintl::tune
