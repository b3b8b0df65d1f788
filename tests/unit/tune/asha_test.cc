#include "daemon/tune/asha.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace traintl::tune {
namespace {

using json = nlohmann::json;
using Action = SchedulerDecision::Action;

std::unique_ptr<TrialScheduler> Make(json spec, const std::string& mode = "max",
                                     const std::string& metric = "acc", uint64_t seed = 5) {
  spec["type"] = "asha";
  auto s = MakeScheduler(spec, metric, mode, seed);
  REQUIRE(s.ok());
  return std::move(*s);
}

AsyncHyperBandScheduler& Asha(std::unique_ptr<TrialScheduler>& s) {
  auto* a = dynamic_cast<AsyncHyperBandScheduler*>(s.get());
  REQUIRE(a != nullptr);
  return *a;
}

json R(double iter, double value, const std::string& metric = "acc") {
  return {{"training_iteration", iter}, {metric, value}};
}

TEST_CASE("ASHA's rungs are Ray's: grace_period * rf^k below max_t, highest first",
          "[tune][asha]") {
  auto s = Make(json::object());
  CHECK(Asha(s).Milestones(0) == std::vector<double>{64, 16, 4, 1});
  auto s2 = Make({{"max_t", 81}, {"grace_period", 1}, {"reduction_factor", 3}, {"brackets", 3}});
  CHECK(Asha(s2).Milestones(0) == std::vector<double>{81, 27, 9, 3, 1});
  CHECK(Asha(s2).Milestones(1) == std::vector<double>{81, 27, 9, 3});
  CHECK(Asha(s2).Milestones(2) == std::vector<double>{81, 27, 9});
}

TEST_CASE("ASHA stops a clearly bad trial at the first rung and keeps a good one", "[tune][asha]") {
  auto s = Make(json::object());
  for (const char* t : {"good", "bad", "better"}) s->OnTrialAdd(t, json::object());
  CHECK(s->OnTrialResult("good", R(1, 0.9)).action == Action::kContinue);  // nothing to beat
  auto bad = s->OnTrialResult("bad", R(1, 0.1));
  CHECK(bad.action == Action::kStop);
  CHECK(bad.reason == "ASHA: acc 0.1 is worse than the rung's cutoff 0.9 at training_iteration 1");
  CHECK(s->OnTrialResult("better", R(1, 0.95)).action == Action::kContinue);
  // Between rungs nothing is decided; the good trial goes on to the next rung.
  for (int i = 2; i <= 3; ++i) {
    CHECK(s->OnTrialResult("good", R(i, 0.0)).action == Action::kContinue);
  }
  CHECK(s->OnTrialResult("good", R(4, 0.9)).action == Action::kContinue);
}

TEST_CASE("ASHA's cutoff is numpy's 75th percentile of the rung with reduction_factor 4",
          "[tune][asha]") {
  auto s = Make(json::object());
  // Recorded values 0.1, 0.5, 0.9 then 0.3: the cutoff each met was 0.1, 0.4, 0.7.
  CHECK(s->OnTrialResult("t1", R(1, 0.1)).action == Action::kContinue);
  CHECK(s->OnTrialResult("t2", R(1, 0.5)).action == Action::kContinue);
  CHECK(s->OnTrialResult("t3", R(1, 0.9)).action == Action::kContinue);
  auto t4 = s->OnTrialResult("t4", R(1, 0.3));
  CHECK(t4.action == Action::kStop);
  CHECK(t4.reason.find("cutoff 0.7 ") != std::string::npos);
  // Sorted 0.1 0.3 0.5 0.9: index 0.75 * 3 = 2.25, so 0.5 + 0.25 * (0.9 - 0.5) = 0.6.
  REQUIRE(Asha(s).Cutoff(0, 1).has_value());
  CHECK(*Asha(s).Cutoff(0, 1) == Approx(0.6));
  CHECK_FALSE(Asha(s).Cutoff(0, 4).has_value());
  auto low = s->OnTrialResult("t5", R(1, 0.55));
  CHECK(low.action == Action::kStop);
  CHECK(low.reason == "ASHA: acc 0.55 is worse than the rung's cutoff 0.6 at training_iteration 1");
  // 0.1 0.3 0.5 0.55 0.9: index 3 -> 0.55.
  CHECK(s->OnTrialResult("t6", R(1, 0.56)).action == Action::kContinue);
}

TEST_CASE("ASHA in min mode stops the higher loss and reports the cutoff as a loss",
          "[tune][asha]") {
  auto s = Make(json::object(), "min", "loss");
  CHECK(s->OnTrialResult("t1", R(1, 0.1, "loss")).action == Action::kContinue);
  CHECK(s->OnTrialResult("t2", R(1, 0.5, "loss")).action == Action::kStop);
  CHECK(s->OnTrialResult("t3", R(1, 0.9, "loss")).action == Action::kStop);
  // Its cutoff was -0.1 - 0.4 * 0.5, a hair below -0.3: numpy's rounding, kept.
  CHECK(s->OnTrialResult("t4", R(1, 0.3, "loss")).action == Action::kContinue);
  // Losses 0.1 0.3 0.5 0.9: Ray negates them, so the cutoff is their 25th percentile.
  CHECK(*Asha(s).Cutoff(0, 1) == Approx(0.25));
  auto worse = s->OnTrialResult("t5", R(1, 0.3, "loss"));
  CHECK(worse.action == Action::kStop);
  CHECK(worse.reason ==
        "ASHA: loss 0.3 is worse than the rung's cutoff 0.25 at training_iteration 1");
  CHECK(s->OnTrialResult("t6", R(1, 0.2, "loss")).action == Action::kContinue);

  // The same values in max mode stop the opposite trials.
  auto m = Make(json::object(), "max", "loss");
  CHECK(m->OnTrialResult("t1", R(1, 0.1, "loss")).action == Action::kContinue);
  CHECK(m->OnTrialResult("t2", R(1, 0.5, "loss")).action == Action::kContinue);
}

TEST_CASE("ASHA stops a trial at max_t unless stop_last_trials is false", "[tune][asha]") {
  auto s = Make({{"max_t", 10}, {"grace_period", 1}});
  CHECK(s->OnTrialResult("t", R(9, 1)).action == Action::kContinue);
  auto d = s->OnTrialResult("t", R(10, 1));
  CHECK(d.action == Action::kStop);
  CHECK(d.reason == "reached max_t 10");

  auto keep = Make({{"max_t", 10}, {"stop_last_trials", false}});
  for (int i = 1; i <= 30; ++i)
    CHECK(keep->OnTrialResult("t", R(i, 1)).action == Action::kContinue);
}

TEST_CASE("ASHA records a trial's last result at its end (Ray's on_trial_complete)",
          "[tune][asha]") {
  auto s = Make({{"max_t", 16}});                                    // rungs 16, 4, 1
  CHECK(s->OnTrialResult("a", R(16, 0.9)).action == Action::kStop);  // max_t: no record
  CHECK_FALSE(Asha(s).Cutoff(0, 16).has_value());
  s->OnTrialComplete("a");
  REQUIRE(Asha(s).Cutoff(0, 16).has_value());
  CHECK(*Asha(s).Cutoff(0, 16) == Approx(0.9));
  // A completed trial takes no further part (a stopped one is still told to stop).
  CHECK(s->OnTrialResult("a", R(17, 0.0)).action == Action::kStop);
  CHECK(s->OnTrialResult("b", R(1, 0.95)).action == Action::kContinue);
  s->OnTrialComplete("b");
  CHECK(Asha(s).BracketOf("b") == -1);
  CHECK(s->OnTrialResult("b", R(4, 0.0)).action == Action::kContinue);
  CHECK_FALSE(Asha(s).Cutoff(0, 4).has_value());
}

TEST_CASE("ASHA is idempotent per (trial, milestone): replays do not record again",
          "[tune][asha]") {
  auto s = Make(json::object());
  CHECK(s->OnTrialResult("a", R(1, 0.9)).action == Action::kContinue);
  auto stop = s->OnTrialResult("b", R(1, 0.1));
  REQUIRE(stop.action == Action::kStop);
  const json before = s->SaveState();
  // Replays (even with another value) change nothing; the stop stands for every later result.
  CHECK(s->OnTrialResult("a", R(1, 0.0)).action == Action::kContinue);
  auto again = s->OnTrialResult("b", R(1, 0.1));
  CHECK(again.action == Action::kStop);
  CHECK(again.reason == stop.reason);
  CHECK(s->OnTrialResult("b", R(2, 5.0)).action == Action::kStop);
  CHECK(s->SaveState()["brackets"] == before["brackets"]);
  CHECK(*Asha(s).Cutoff(0, 1) == Approx(0.1 + 0.8 * 0.75));
}

TEST_CASE("ASHA ignores results without a numeric metric or time_attr", "[tune][asha]") {
  auto s = Make(json::object());
  CHECK(s->OnTrialResult("a", R(1, 0.9)).action == Action::kContinue);
  CHECK(s->OnTrialResult("b", {{"training_iteration", 1}}).action == Action::kContinue);
  CHECK(s->OnTrialResult("b", {{"acc", 0.0}}).action == Action::kContinue);
  CHECK(s->OnTrialResult("b", {{"training_iteration", 1}, {"acc", "low"}}).action ==
        Action::kContinue);
  CHECK(s->OnTrialResult("b", {{"training_iteration", "1"}, {"acc", 0.0}}).action ==
        Action::kContinue);
  CHECK(s->OnTrialResult("b", json::array()).action == Action::kContinue);
  CHECK(*Asha(s).Cutoff(0, 1) == Approx(0.9));
}

TEST_CASE("ASHA assigns brackets by softmax of their rung counts, from the seed", "[tune][asha]") {
  // Rung counts 4, 3, 2: probabilities 0.665, 0.245, 0.090.
  auto s = Make({{"brackets", 3}});
  std::map<int, int> count;
  for (int i = 0; i < 3000; ++i) {
    const std::string t = "t" + std::to_string(i);
    s->OnTrialAdd(t, json::object());
    ++count[Asha(s).BracketOf(t)];
  }
  CHECK(count.size() == 3);
  CHECK(count[0] == Approx(3000 * 0.665).margin(120));
  CHECK(count[1] == Approx(3000 * 0.245).margin(120));
  CHECK(count[2] == Approx(3000 * 0.090).margin(80));
  // The same seed assigns the same brackets; another seed does not.
  auto same = Make({{"brackets", 3}});
  auto other = Make({{"brackets", 3}}, "max", "acc", 6);
  int diff_same = 0, diff_other = 0;
  for (int i = 0; i < 200; ++i) {
    const std::string t = "t" + std::to_string(i);
    same->OnTrialAdd(t, json::object());
    other->OnTrialAdd(t, json::object());
    diff_same += Asha(same).BracketOf(t) != Asha(s).BracketOf(t);
    diff_other += Asha(other).BracketOf(t) != Asha(s).BracketOf(t);
  }
  CHECK(diff_same == 0);
  CHECK(diff_other > 0);
}

// A deterministic workload: trials added over time, each reporting values that depend on
// its index, some ending early.
struct Step {
  enum Kind { kAdd, kResult, kComplete } kind;
  std::string trial;
  json result;
};

std::vector<Step> Workload() {
  std::vector<Step> steps;
  for (int round = 0; round < 6; ++round) {
    for (int k = 0; k < 5; ++k) {
      const int i = round * 5 + k;
      steps.push_back({Step::kAdd, "t" + std::to_string(i), {}});
    }
    for (int it = 1; it <= 20; ++it) {
      for (int i = 0; i < (round + 1) * 5; ++i) {
        const double v = ((i * 37) % 23) / 23.0 + 0.01 * it;
        steps.push_back({Step::kResult, "t" + std::to_string(i), R(it + round * 3, v)});
      }
    }
    steps.push_back({Step::kComplete, "t" + std::to_string(round * 3), {}});
  }
  return steps;
}

std::string Run(TrialScheduler& s, const Step& step) {
  switch (step.kind) {
    case Step::kAdd:
      s.OnTrialAdd(step.trial, json::object());
      return "";
    case Step::kComplete:
      s.OnTrialComplete(step.trial);
      return "";
    case Step::kResult: {
      auto d = s.OnTrialResult(step.trial, step.result);
      return std::to_string(static_cast<int>(d.action)) + d.reason;
    }
  }
  return "";
}

TEST_CASE("ASHA reloaded mid-run decides exactly as the uninterrupted one", "[tune][asha]") {
  const json spec = {{"brackets", 3}, {"max_t", 50}, {"reduction_factor", 2}};
  auto whole = Make(spec);
  auto first = Make(spec);
  const auto steps = Workload();
  const size_t half = steps.size() / 2;
  for (size_t i = 0; i < half; ++i) CHECK(Run(*whole, steps[i]) == Run(*first, steps[i]));
  // Through text, as the head stores it.
  const json saved = json::parse(first->SaveState().dump());
  auto second = Make(spec);
  REQUIRE(second->LoadState(saved).ok());
  CHECK(second->SaveState() == first->SaveState());
  int stops_after = 0;
  for (size_t i = half; i < steps.size(); ++i) {
    const std::string a = Run(*whole, steps[i]);
    CHECK(a == Run(*second, steps[i]));
    stops_after += a.rfind(std::to_string(static_cast<int>(Action::kStop)), 0) == 0;
  }
  CHECK(stops_after > 0);
  CHECK(whole->SaveState() == second->SaveState());

  // State from other parameters is refused and leaves the scheduler as it was.
  auto other = Make({{"brackets", 2}});
  const json before = other->SaveState();
  CHECK_FALSE(other->LoadState(saved).ok());
  CHECK(other->SaveState() == before);
}

}  // namespace
}  // namespace traintl::tune
