#include "daemon/tune/hyperband.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace traintl::tune {
namespace {

using json = nlohmann::json;
using sched_internal::FormatNumber;
using sched_internal::NumberAt;

// Ray's int(): truncation toward zero, kept within int64 for absurd parameters.
int64_t PyInt(double v) {
  if (!(v < 9.0e18)) return std::numeric_limits<int64_t>::max() / 4;
  return static_cast<int64_t>(v);
}

void Erase(std::vector<std::string>& v, const std::string& s) {
  v.erase(std::remove(v.begin(), v.end(), s), v.end());
}

}  // namespace

HyperBandScheduler::HyperBandScheduler(HyperBandOptions options, std::string metric,
                                       const std::string& mode)
    : opt_(std::move(options)), metric_(std::move(metric)), max_mode_(mode != "min") {
  // np.round rounds half to even, as nearbyint does in the default rounding mode.
  s_max_1_ =
      static_cast<int>(std::nearbyint(std::log(opt_.max_t) / std::log(opt_.reduction_factor))) + 1;
}

int64_t HyperBandScheduler::N0(int s) const {
  return PyInt(std::ceil(static_cast<double>(s_max_1_) / (s + 1) *
                         std::pow(opt_.reduction_factor, static_cast<double>(s))));
}

double HyperBandScheduler::R0(int s) const {
  return static_cast<double>(
      PyInt(opt_.max_t * std::pow(opt_.reduction_factor, -static_cast<double>(s))));
}

HyperBandScheduler::Live* HyperBandScheduler::FindLive(Bracket& b, const std::string& trial) {
  for (auto& l : b.live) {
    if (l.trial == trial) return &l;
  }
  return nullptr;
}

bool HyperBandScheduler::CurIterDone(const Bracket& b) const {
  for (const auto& l : b.live) {
    if (TimeOf(l) < b.cumul_r) return false;
  }
  return true;
}

bool HyperBandScheduler::Finished(const Bracket& b) const {
  return opt_.stop_last_trials && b.halves == 0 && CurIterDone(b);
}

bool HyperBandScheduler::ContinueTrial(const Bracket& b, const Live& l) const {
  if (!opt_.stop_last_trials && b.halves == 0) return true;
  return TimeOf(l) < b.cumul_r;
}

void HyperBandScheduler::Remove(Bracket& b, const std::string& trial) {
  b.live.erase(
      std::remove_if(b.live.begin(), b.live.end(), [&](const Live& l) { return l.trial == trial; }),
      b.live.end());
}

void HyperBandScheduler::Forget(const std::string& trial) {
  trial_bracket_.erase(trial);
  paused_.erase(trial);
  Erase(to_resume_, trial);
}

void HyperBandScheduler::OnTrialAdd(const std::string& trial, const json& config) {
  if (trial_bracket_.count(trial) != 0 || stopped_.count(trial) != 0 ||
      completed_.count(trial) != 0) {
    return;
  }
  // Filled by the trials that joined it, not those still live: with trials added as they
  // start, a bracket's first trials may end before its last joins (Ray adds every trial
  // up front, so for it the two counts agree).
  if (cur_bracket_ < 0 || brackets_[cur_bracket_].joined >= brackets_[cur_bracket_].n) {
    for (;;) {
      if (static_cast<int>(bands_[band_idx_].size()) == s_max_1_) {
        bands_.emplace_back();
        ++band_idx_;
      }
      const int s = static_cast<int>(bands_[band_idx_].size());
      if (R0(s) == 0) {  // too small a bracket for max_t: Ray skips it
        bands_[band_idx_].push_back(-1);
        continue;
      }
      Bracket b;
      b.s = s;
      b.n = N0(s);
      b.r = b.cumul_r = R0(s);
      b.halves = s;
      brackets_.push_back(std::move(b));
      cur_bracket_ = static_cast<int>(brackets_.size()) - 1;
      bands_[band_idx_].push_back(cur_bracket_);
      break;
    }
  }
  brackets_[cur_bracket_].live.push_back({trial});
  ++brackets_[cur_bracket_].joined;
  trial_bracket_[trial] = cur_bracket_;
}

SchedulerDecision HyperBandScheduler::OnTrialResult(const std::string& trial, const json& result) {
  if (auto it = stopped_.find(trial); it != stopped_.end()) {
    return {SchedulerDecision::Action::kStop, it->second, "", nullptr};
  }
  if (completed_.count(trial) != 0) return {};
  double time = 0, metric = 0;
  if (!NumberAt(result, opt_.time_attr, &time) || !NumberAt(result, metric_, &metric)) return {};
  if (trial_bracket_.count(trial) == 0) OnTrialAdd(trial, json::object());
  const int idx = trial_bracket_[trial];
  Bracket& b = brackets_[idx];
  // It reports, so it runs: neither paused nor waiting to be resumed.
  paused_.erase(trial);
  Erase(to_resume_, trial);
  Live* l = FindLive(b, trial);
  l->has_result = true;
  l->time = time;
  l->value = Signed(metric);
  if (ContinueTrial(b, *l)) return {};
  return ProcessBracket(idx, trial);
}

void HyperBandScheduler::StopTrial(Bracket& b, const std::string& trial, const std::string& current,
                                   const std::string& reason, SchedulerDecision* decision) {
  Remove(b, trial);
  Forget(trial);
  stopped_[trial] = reason;
  if (trial == current) {
    decision->action = SchedulerDecision::Action::kStop;
    decision->reason = reason;
  } else {
    to_stop_.emplace_back(trial, reason);
  }
}

SchedulerDecision HyperBandScheduler::ProcessBracket(int idx, const std::string& current) {
  Bracket& b = brackets_[idx];
  SchedulerDecision d;
  d.action = SchedulerDecision::Action::kPause;
  const std::string name = "bracket " + std::to_string(idx);
  while (!b.live.empty() && CurIterDone(b)) {
    if (Finished(b)) {
      const std::string reason = "HyperBand: " + name + " finished at its last milestone, " +
                                 opt_.time_attr + " " + FormatNumber(b.cumul_r);
      std::vector<std::string> all;
      for (const auto& l : b.live) all.push_back(l.trial);
      for (const auto& t : all) StopTrial(b, t, current, reason, &d);
      return d;
    }
    const double milestone = b.cumul_r;
    // Ray's successive_halving: keep the top ceil(n / eta), move the milestone on.
    std::vector<Live> good = b.live, bad;
    // (With stop_last_trials a bracket at halves 0 is finished above; without, all go on.)
    if (b.halves > 0) {
      --b.halves;
      b.n = PyInt(std::ceil(static_cast<double>(b.n) / opt_.reduction_factor));
      b.r = static_cast<double>(PyInt(std::min(b.r * opt_.reduction_factor, opt_.max_t)));
      b.cumul_r = b.r;
      auto key = [](const Live& l) {
        return std::isnan(l.value) ? -std::numeric_limits<double>::infinity() : l.value;
      };
      std::stable_sort(good.begin(), good.end(),
                       [&](const Live& x, const Live& y) { return key(x) < key(y); });
      const size_t keep = std::min(good.size(), static_cast<size_t>(std::max<int64_t>(b.n, 0)));
      bad.assign(good.begin(), good.end() - static_cast<std::ptrdiff_t>(keep));
      good.erase(good.begin(), good.end() - static_cast<std::ptrdiff_t>(keep));
    }
    for (const auto& l : bad) {
      StopTrial(b, l.trial, current,
                "HyperBand: " + metric_ + " " + FormatNumber(Signed(l.value)) +
                    " is not among the top " + std::to_string(good.size()) + " of " + name +
                    " at " + opt_.time_attr + " " + FormatNumber(milestone),
                &d);
    }
    for (const auto& g : good) {
      Live* l = FindLive(b, g.trial);
      if (l == nullptr) continue;
      if (ContinueTrial(b, *l)) {
        if (g.trial == current) {
          d.action = SchedulerDecision::Action::kContinue;
        } else if (paused_.erase(g.trial) != 0) {
          to_resume_.push_back(g.trial);
        }
      } else if (Finished(b)) {
        StopTrial(b, g.trial, current,
                  "HyperBand: " + name + " finished at its last milestone, " + opt_.time_attr +
                      " " + FormatNumber(b.cumul_r),
                  &d);
      }
    }
    // Without stop_last_trials the last stage runs on: nothing more to decide.
    if (!opt_.stop_last_trials && b.halves == 0) break;
  }
  if (d.action == SchedulerDecision::Action::kPause) {
    if (current.empty() || trial_bracket_.count(current) == 0) return {};
    paused_.insert(current);
    d.reason = "HyperBand: waiting for the other trials of " + name + " to reach " +
               opt_.time_attr + " " + FormatNumber(b.cumul_r);
  }
  return d;
}

void HyperBandScheduler::OnTrialComplete(const std::string& trial) {
  completed_.insert(trial);
  auto it = trial_bracket_.find(trial);
  if (it == trial_bracket_.end()) return;
  const int idx = it->second;
  Remove(brackets_[idx], trial);
  Forget(trial);
  // Paused trials may have been waiting for this one only; that includes trials at the
  // bracket's last milestone, which Ray would leave paused.
  ProcessBracket(idx, "");
}

std::vector<std::string> HyperBandScheduler::TakeTrialsToResume() {
  std::vector<std::string> out;
  out.swap(to_resume_);
  return out;
}

std::vector<std::pair<std::string, std::string>> HyperBandScheduler::TakeTrialsToStop() {
  std::vector<std::pair<std::string, std::string>> out;
  out.swap(to_stop_);
  return out;
}

int HyperBandScheduler::BracketOf(const std::string& trial) const {
  auto it = trial_bracket_.find(trial);
  return it == trial_bracket_.end() ? -1 : it->second;
}

double HyperBandScheduler::Milestone(int bracket) const {
  if (bracket < 0 || static_cast<size_t>(bracket) >= brackets_.size()) return 0;
  return brackets_[bracket].cumul_r;
}

int64_t HyperBandScheduler::Capacity(int bracket) const {
  if (bracket < 0 || static_cast<size_t>(bracket) >= brackets_.size()) return 0;
  return brackets_[bracket].n;
}

json HyperBandScheduler::SaveState() const {
  json brackets = json::array();
  for (const auto& b : brackets_) {
    json live = json::array();
    for (const auto& l : b.live) {
      json j = {{"trial", l.trial}};
      if (l.has_result) {
        j["time"] = l.time;
        j["value"] = std::isnan(l.value) ? json(nullptr) : json(l.value);
      }
      live.push_back(std::move(j));
    }
    brackets.push_back({{"s", b.s},
                        {"n", b.n},
                        {"r", b.r},
                        {"cumul_r", b.cumul_r},
                        {"halves", b.halves},
                        {"joined", b.joined},
                        {"live", std::move(live)}});
  }
  json to_stop = json::array();
  for (const auto& [t, reason] : to_stop_) to_stop.push_back({t, reason});
  return {{"type", "hyperband"},     {"brackets", std::move(brackets)}, {"bands", bands_},
          {"band_idx", band_idx_},   {"bracket", cur_bracket_},         {"paused", paused_},
          {"to_resume", to_resume_}, {"to_stop", std::move(to_stop)},   {"stopped", stopped_},
          {"completed", completed_}};
}

Status HyperBandScheduler::LoadState(const json& state) {
  TRAINTL_RETURN_IF_ERROR(sched_internal::CheckStateType(state, "hyperband"));
  auto bad = [](const std::string& what) {
    return Status::InvalidArgument("HyperBand scheduler state: " + what);
  };
  try {
    std::vector<Bracket> brackets;
    std::map<std::string, int> trial_bracket;
    for (const json& jb : state.at("brackets")) {
      Bracket b;
      b.s = jb.at("s").get<int>();
      b.n = jb.at("n").get<int64_t>();
      b.r = jb.at("r").get<double>();
      b.cumul_r = jb.at("cumul_r").get<double>();
      b.halves = jb.at("halves").get<int>();
      b.joined = jb.value("joined", static_cast<int64_t>(jb.at("live").size()));
      for (const json& jl : jb.at("live")) {
        Live l;
        l.trial = jl.at("trial").get<std::string>();
        if (jl.contains("time")) {
          l.has_result = true;
          l.time = jl.at("time").get<double>();
          const json& v = jl.at("value");
          l.value = v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>();
        }
        trial_bracket[l.trial] = static_cast<int>(brackets.size());
        b.live.push_back(std::move(l));
      }
      brackets.push_back(std::move(b));
    }
    auto bands = state.at("bands").get<std::vector<std::vector<int>>>();
    const int band_idx = state.at("band_idx").get<int>();
    const int cur = state.at("bracket").get<int>();
    const int count = static_cast<int>(brackets.size());
    if (bands.empty() || band_idx < 0 || band_idx >= static_cast<int>(bands.size()) || cur < -1 ||
        cur >= count) {
      return bad("band or bracket index out of range");
    }
    for (const auto& band : bands) {
      for (int i : band) {
        if (i < -1 || i >= count) return bad("band names a bracket that does not exist");
      }
    }
    std::vector<std::pair<std::string, std::string>> to_stop;
    for (const json& p : state.at("to_stop")) {
      to_stop.emplace_back(p.at(0).get<std::string>(), p.at(1).get<std::string>());
    }
    auto paused = state.at("paused").get<std::set<std::string>>();
    auto to_resume = state.at("to_resume").get<std::vector<std::string>>();
    auto stopped = state.at("stopped").get<std::map<std::string, std::string>>();
    auto completed = state.at("completed").get<std::set<std::string>>();
    brackets_ = std::move(brackets);
    bands_ = std::move(bands);
    band_idx_ = band_idx;
    cur_bracket_ = cur;
    trial_bracket_ = std::move(trial_bracket);
    paused_ = std::move(paused);
    to_resume_ = std::move(to_resume);
    to_stop_ = std::move(to_stop);
    stopped_ = std::move(stopped);
    completed_ = std::move(completed);
  } catch (const json::exception& e) {
    return bad(e.what());
  }
  return Status::Ok();
}

}  // namespace traintl::tune
