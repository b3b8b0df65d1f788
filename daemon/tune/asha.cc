#include "daemon/tune/asha.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace traintl::tune {
namespace {

using json = nlohmann::json;
using sched_internal::FormatNumber;
using sched_internal::NumberAt;

// numpy.nanpercentile(values, q) with the default "linear" method, computed as numpy does
// it (q / 100 times n - 1, and its two-sided lerp), so cutoffs match Ray's to the last bit.
double NanPercentile(std::vector<double> values, double q) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return std::isnan(v); }),
               values.end());
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const double virtual_index = (q / 100.0) * static_cast<double>(values.size() - 1);
  const double prev = std::floor(virtual_index);
  const size_t lo = std::min(static_cast<size_t>(prev), values.size() - 1);
  const size_t hi = std::min(lo + 1, values.size() - 1);
  const double t = virtual_index - prev;
  const double a = values[lo], b = values[hi], diff = b - a;
  return t >= 0.5 ? b - diff * (1 - t) : a + diff * t;
}

}  // namespace

AsyncHyperBandScheduler::AsyncHyperBandScheduler(AshaOptions options, std::string metric,
                                                 const std::string& mode, uint64_t seed)
    : opt_(std::move(options)), metric_(std::move(metric)), max_mode_(mode != "min"), rng_(seed) {
  const double rf = opt_.reduction_factor;
  for (int64_t s = 0; s < opt_.brackets; ++s) {
    Bracket b;
    const double rungs =
        std::log(opt_.max_t / opt_.grace_period) / std::log(rf) - static_cast<double>(s) + 1;
    // Python's int() truncates toward zero; brackets past the last rung get none.
    const int64_t max_rungs = static_cast<int64_t>(rungs);
    for (int64_t k = max_rungs - 1; k >= 0; --k) {
      b.rungs.push_back({opt_.grace_period * std::pow(rf, static_cast<double>(k + s)), {}});
    }
    brackets_.push_back(std::move(b));
  }
}

void AsyncHyperBandScheduler::OnTrialAdd(const std::string& trial, const json& config) {
  if (trials_.count(trial) != 0 || completed_.count(trial) != 0) return;
  int idx = 0;
  // One bracket needs no draw; several are chosen as np.random.choice over softmax(sizes).
  if (brackets_.size() > 1) {
    size_t max_size = 0;
    for (const auto& b : brackets_) max_size = std::max(max_size, b.rungs.size());
    std::vector<double> cdf;
    double total = 0;
    for (const auto& b : brackets_) {
      total += std::exp(static_cast<double>(b.rungs.size()) - static_cast<double>(max_size));
      cdf.push_back(total);
    }
    const double u = rng_.Uniform01() * total;
    idx = static_cast<int>(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
    idx = std::min(idx, static_cast<int>(brackets_.size()) - 1);
  }
  trials_[trial].bracket = idx;
}

SchedulerDecision AsyncHyperBandScheduler::OnTrialResult(const std::string& trial,
                                                         const json& result) {
  if (auto it = stopped_.find(trial); it != stopped_.end()) {
    return {SchedulerDecision::Action::kStop, it->second, "", nullptr};
  }
  if (completed_.count(trial) != 0) return {};
  double time = 0, metric = 0;
  if (!NumberAt(result, opt_.time_attr, &time) || !NumberAt(result, metric_, &metric)) return {};
  if (trials_.count(trial) == 0) OnTrialAdd(trial, json::object());
  TrialInfo& info = trials_[trial];
  info.has_last = true;
  info.last_time = time;
  info.last_value = Signed(metric);

  SchedulerDecision d;
  if (time >= opt_.max_t && opt_.stop_last_trials) {
    d.action = SchedulerDecision::Action::kStop;
    d.reason = "reached max_t " + FormatNumber(opt_.max_t);
  } else {
    d = OnBracketResult(brackets_[info.bracket], trial, time, info.last_value);
  }
  if (d.action == SchedulerDecision::Action::kStop) stopped_[trial] = d.reason;
  return d;
}

SchedulerDecision AsyncHyperBandScheduler::OnBracketResult(Bracket& bracket,
                                                           const std::string& trial, double time,
                                                           double value) {
  SchedulerDecision d;
  for (Rung& rung : bracket.rungs) {
    const bool recorded = rung.recorded.count(trial) != 0;
    // Ray: once recorded at the rung reached, the decision there stands (without
    // stop_last_trials a trial past max_t is never reconsidered at lower rungs).
    if (time >= rung.milestone && recorded && !opt_.stop_last_trials) break;
    if (time < rung.milestone || recorded) continue;
    if (!rung.recorded.empty()) {
      std::vector<double> values;
      for (const auto& [name, v] : rung.recorded) values.push_back(v);
      const double cutoff = NanPercentile(values, (1 - 1 / opt_.reduction_factor) * 100);
      if (value < cutoff) {
        d.action = SchedulerDecision::Action::kStop;
        d.reason = "ASHA: " + metric_ + " " + FormatNumber(Signed(value)) +
                   " is worse than the rung's cutoff " + FormatNumber(Signed(cutoff)) + " at " +
                   opt_.time_attr + " " + FormatNumber(rung.milestone);
      }
    }
    rung.recorded[trial] = value;
    break;
  }
  return d;
}

void AsyncHyperBandScheduler::OnTrialComplete(const std::string& trial) {
  auto it = trials_.find(trial);
  if (it != trials_.end()) {
    // Ray records the final result in the trial's bracket, so later trials are measured
    // against how far it got.
    if (it->second.has_last) {
      // The trial has ended: only the record matters, not the decision.
      OnBracketResult(brackets_[it->second.bracket], trial, it->second.last_time,
                      it->second.last_value);
    }
    trials_.erase(it);
  }
  completed_.insert(trial);
}

std::vector<double> AsyncHyperBandScheduler::Milestones(size_t bracket) const {
  std::vector<double> out;
  if (bracket >= brackets_.size()) return out;
  for (const auto& r : brackets_[bracket].rungs) out.push_back(r.milestone);
  return out;
}

std::optional<double> AsyncHyperBandScheduler::Cutoff(size_t bracket, double milestone) const {
  if (bracket >= brackets_.size()) return std::nullopt;
  for (const auto& r : brackets_[bracket].rungs) {
    if (r.milestone != milestone || r.recorded.empty()) continue;
    std::vector<double> values;
    for (const auto& [name, v] : r.recorded) values.push_back(v);
    return Signed(NanPercentile(values, (1 - 1 / opt_.reduction_factor) * 100));
  }
  return std::nullopt;
}

int AsyncHyperBandScheduler::BracketOf(const std::string& trial) const {
  auto it = trials_.find(trial);
  return it == trials_.end() ? -1 : it->second.bracket;
}

json AsyncHyperBandScheduler::SaveState() const {
  json brackets = json::array();
  for (const auto& b : brackets_) {
    json rungs = json::array();
    for (const auto& r : b.rungs) {
      json rec = json::object();
      // NaN has no JSON form; null stands for it.
      for (const auto& [name, v] : r.recorded) rec[name] = std::isnan(v) ? json(nullptr) : json(v);
      rungs.push_back({{"milestone", r.milestone}, {"recorded", std::move(rec)}});
    }
    brackets.push_back(std::move(rungs));
  }
  json trials = json::object();
  for (const auto& [name, t] : trials_) {
    json j = {{"bracket", t.bracket}};
    if (t.has_last) {
      j["last_time"] = t.last_time;
      j["last_value"] = std::isnan(t.last_value) ? json(nullptr) : json(t.last_value);
    }
    trials[name] = std::move(j);
  }
  return {{"type", "asha"},
          {"rng", sched_internal::RngStateToJson(rng_.state())},
          {"brackets", std::move(brackets)},
          {"trials", std::move(trials)},
          {"stopped", stopped_},
          {"completed", completed_}};
}

Status AsyncHyperBandScheduler::LoadState(const json& state) {
  TRAINTL_RETURN_IF_ERROR(sched_internal::CheckStateType(state, "asha"));
  auto bad = [](const std::string& what) {
    return Status::InvalidArgument("ASHA scheduler state: " + what);
  };
  try {
    auto rng = sched_internal::RngStateFromJson(state.at("rng"));
    if (!rng.ok()) return rng.status();
    auto value_of = [](const json& v) {
      return v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>();
    };
    std::vector<Bracket> brackets = brackets_;
    const json& jb = state.at("brackets");
    if (!jb.is_array() || jb.size() != brackets.size()) {
      return bad("it has a different number of brackets than these parameters give");
    }
    for (size_t i = 0; i < brackets.size(); ++i) {
      const json& rungs = jb[i];
      if (!rungs.is_array() || rungs.size() != brackets[i].rungs.size()) {
        return bad("bracket " + std::to_string(i) + " has different rungs");
      }
      for (size_t k = 0; k < rungs.size(); ++k) {
        if (rungs[k].at("milestone").get<double>() != brackets[i].rungs[k].milestone) {
          return bad("bracket " + std::to_string(i) + " has different milestones");
        }
        brackets[i].rungs[k].recorded.clear();
        for (const auto& [name, v] : rungs[k].at("recorded").items()) {
          brackets[i].rungs[k].recorded[name] = value_of(v);
        }
      }
    }
    std::map<std::string, TrialInfo> trials;
    for (const auto& [name, j] : state.at("trials").items()) {
      TrialInfo t;
      t.bracket = j.at("bracket").get<int>();
      if (t.bracket < 0 || static_cast<size_t>(t.bracket) >= brackets.size()) {
        return bad("trial " + name + " is in a bracket that does not exist");
      }
      if (j.contains("last_time")) {
        t.has_last = true;
        t.last_time = j.at("last_time").get<double>();
        t.last_value = value_of(j.at("last_value"));
      }
      trials[name] = t;
    }
    auto stopped = state.at("stopped").get<std::map<std::string, std::string>>();
    auto completed = state.at("completed").get<std::set<std::string>>();
    rng_ = Rng::FromState(*rng);
    brackets_ = std::move(brackets);
    trials_ = std::move(trials);
    stopped_ = std::move(stopped);
    completed_ = std::move(completed);
  } catch (const json::exception& e) {
    return bad(e.what());
  }
  return Status::Ok();
}

}  // namespace traintl::tune
