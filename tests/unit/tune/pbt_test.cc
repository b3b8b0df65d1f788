#include "daemon/tune/pbt.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <vector>

namespace traintl::tune {
namespace {

using json = nlohmann::json;
using Action = SchedulerDecision::Action;

const json kMutations = {
    {"train_loop_config", {{"lr", {{"uniform", {0.001, 0.1}}}}, {"batch", {16, 32, 64}}}}};

std::unique_ptr<TrialScheduler> Make(json extra = json::object(), const std::string& mode = "max",
                                     const std::string& metric = "acc", uint64_t seed = 3) {
  json spec = {{"type", "pbt"},
               {"time_attr", "training_iteration"},
               {"perturbation_interval", 2},
               {"hyperparam_mutations", kMutations}};
  spec.update(extra);
  auto s = MakeScheduler(spec, metric, mode, seed);
  REQUIRE(s.ok());
  return std::move(*s);
}

PopulationBasedTraining& Pbt(std::unique_ptr<TrialScheduler>& s) {
  auto* p = dynamic_cast<PopulationBasedTraining*>(s.get());
  REQUIRE(p != nullptr);
  return *p;
}

json Config(double lr, int batch = 32) {
  return {{"train_loop_config", {{"lr", lr}, {"batch", batch}, {"epochs", 5}}},
          {"scaling_config", {{"num_workers", 2}}}};
}

json R(double iter, double value, const std::string& metric = "acc") {
  return {{"training_iteration", iter}, {metric, value}};
}

// Four trials t0..t3 (lr 0.01 .. 0.04) whose scores rise with the index; all pass their
// first perturbation step at iteration 2, in order, so t3 ends it as the top trial.
void FirstRound(TrialScheduler& s, const std::string& metric = "acc", bool high_is_good = true) {
  for (int i = 0; i < 4; ++i) s.OnTrialAdd("t" + std::to_string(i), Config(0.01 * (i + 1)));
  for (int i = 0; i < 4; ++i) {
    const double v = high_is_good ? 0.1 * (i + 1) : 1.0 - 0.1 * (i + 1);
    CHECK(s.OnTrialResult("t" + std::to_string(i), R(1, v, metric)).action == Action::kContinue);
  }
  for (int i = 0; i < 4; ++i) {
    const double v = high_is_good ? 0.1 * (i + 1) : 1.0 - 0.1 * (i + 1);
    CHECK(s.OnTrialResult("t" + std::to_string(i), R(2, v, metric)).action == Action::kContinue);
  }
}

// Whether `v` is what explore may make of `donor`: resampled inside the domain or scaled
// by a perturbation factor.
bool LrExplored(double v, double donor) {
  return (v >= 0.001 && v < 0.1) || v == Approx(donor * 1.2) || v == Approx(donor * 0.8);
}

TEST_CASE("PBT exploits a bottom trial toward a top donor with a mutated config", "[tune][pbt]") {
  auto s = Make();
  FirstRound(*s);
  // t0 is the worst at its next step: it clones t3, the only top-quantile trial.
  auto d = s->OnTrialResult("t0", R(4, 0.1));
  REQUIRE(d.action == Action::kExploit);
  CHECK(d.donor == "t3");
  const json& tlc = d.new_config["train_loop_config"];
  CHECK(LrExplored(tlc["lr"].get<double>(), 0.04));
  CHECK(std::set<int>{16, 32, 64}.count(tlc["batch"].get<int>()) == 1);
  CHECK(tlc["batch"].is_number_integer());
  // Keys not mutated are the donor's, untouched.
  CHECK(tlc["epochs"] == 5);
  CHECK(d.new_config["scaling_config"] == json{{"num_workers", 2}});
  CHECK(d.reason.find("cloning t3") != std::string::npos);
  // The scheduler now holds the new config for t0.
  CHECK(Pbt(s).Config("t0") == d.new_config);
  CHECK(Pbt(s).Config("t3") == Config(0.04));
}

TEST_CASE("PBT does not exploit top or middle trials", "[tune][pbt]") {
  auto s = Make();
  FirstRound(*s);
  CHECK(s->OnTrialResult("t3", R(4, 0.4)).action == Action::kContinue);
  CHECK(s->OnTrialResult("t2", R(4, 0.3)).action == Action::kContinue);
  CHECK(s->OnTrialResult("t1", R(4, 0.2)).action == Action::kContinue);
  CHECK(Pbt(s).Config("t1") == Config(0.02));
}

TEST_CASE("PBT in min mode clones the lowest loss into the highest", "[tune][pbt]") {
  auto s = Make(json::object(), "min", "loss");
  FirstRound(*s, "loss", /*high_is_good=*/false);  // losses 0.9, 0.8, 0.7, 0.6
  CHECK(s->OnTrialResult("t3", R(4, 0.6, "loss")).action == Action::kContinue);
  auto d = s->OnTrialResult("t0", R(4, 0.9, "loss"));
  REQUIRE(d.action == Action::kExploit);
  CHECK(d.donor == "t3");
}

TEST_CASE("PBT respects perturbation_interval and burn_in_period", "[tune][pbt]") {
  auto s = Make();
  FirstRound(*s);
  // Iteration 3 is only 1 past t0's last step (2): no step however bad it looks.
  CHECK(s->OnTrialResult("t0", R(3, -100)).action == Action::kContinue);
  CHECK(s->OnTrialResult("t0", R(4, -100)).action == Action::kExploit);

  auto b = Make({{"burn_in_period", 4}});
  for (int i = 0; i < 4; ++i) b->OnTrialAdd("t" + std::to_string(i), Config(0.01));
  // Before iteration 4 nothing is a step, so nobody is ranked or cloned.
  for (int it = 1; it <= 3; ++it) {
    for (int i = 0; i < 4; ++i) {
      CHECK(b->OnTrialResult("t" + std::to_string(i), R(it, i)).action == Action::kContinue);
    }
  }
  for (int i = 0; i < 4; ++i) {
    CHECK(b->OnTrialResult("t" + std::to_string(i), R(4, i)).action == Action::kContinue);
  }
  CHECK(b->OnTrialResult("t0", R(6, 0)).action == Action::kExploit);
}

TEST_CASE("PBT clones only a trial that was top at its own last step (Ray's checkpoint)",
          "[tune][pbt]") {
  auto s = Make();
  for (int i = 0; i < 4; ++i) s->OnTrialAdd("t" + std::to_string(i), Config(0.01));
  // t3 steps first, alone: no quantiles, so it is no donor although it ends up the best.
  CHECK(s->OnTrialResult("t3", R(2, 0.9)).action == Action::kContinue);
  CHECK(s->OnTrialResult("t2", R(2, 0.3)).action == Action::kContinue);
  CHECK(s->OnTrialResult("t1", R(2, 0.2)).action == Action::kContinue);
  // t0 is at the bottom; the top quantile is t3, which has no checkpoint to give.
  CHECK(s->OnTrialResult("t0", R(2, 0.1)).action == Action::kContinue);
  // Once t3 steps again as the top trial, it is cloned.
  CHECK(s->OnTrialResult("t3", R(4, 0.9)).action == Action::kContinue);
  auto d = s->OnTrialResult("t0", R(4, 0.1));
  CHECK(d.action == Action::kExploit);
  CHECK(d.donor == "t3");
}

TEST_CASE("PBT leaves finished trials out of the ranking", "[tune][pbt]") {
  auto s = Make();
  FirstRound(*s);
  s->OnTrialComplete("t3");
  // Ranked now: t0 t1 t2. t3 was the best, but it ended: t2 (top at its own step) is cloned.
  auto d = s->OnTrialResult("t0", R(4, 0.1));
  REQUIRE(d.action == Action::kExploit);
  CHECK(d.donor == "t2");
  CHECK(s->OnTrialResult("t3", R(6, 1.0)).action == Action::kContinue);
}

TEST_CASE("PBT's explore: lists shift to a neighbour or resample, domains scale or resample",
          "[tune][pbt]") {
  SECTION("never resampling: lr times 1.2 or 0.8, batch one step left or right") {
    auto s = Make({{"resample_probability", 0}});
    std::set<double> lrs;
    std::set<int> batches;
    for (int i = 0; i < 200; ++i) {
      json c = Pbt(s).Explore(Config(0.05, 32));
      lrs.insert(c["train_loop_config"]["lr"].get<double>());
      batches.insert(c["train_loop_config"]["batch"].get<int>());
    }
    CHECK(lrs.size() == 2);
    CHECK(*lrs.begin() == Approx(0.04));
    CHECK(*lrs.rbegin() == Approx(0.06));
    CHECK(batches == std::set<int>{16, 64});
    // At the ends of the list the shift is clamped.
    std::set<int> from16;
    for (int i = 0; i < 100; ++i) {
      from16.insert(Pbt(s).Explore(Config(0.05, 16))["train_loop_config"]["batch"].get<int>());
    }
    CHECK(from16 == std::set<int>{16, 32});
    // A value not in the list is replaced by one that is.
    for (int i = 0; i < 50; ++i) {
      const int b = Pbt(s).Explore(Config(0.05, 48))["train_loop_config"]["batch"].get<int>();
      CHECK(std::set<int>{16, 32, 64}.count(b) == 1);
    }
  }
  SECTION("always resampling: values from the domain and the list") {
    auto s = Make({{"resample_probability", 1}});
    std::set<int> batches;
    for (int i = 0; i < 300; ++i) {
      json c = Pbt(s).Explore(Config(5.0, 32));
      const double lr = c["train_loop_config"]["lr"].get<double>();
      CHECK(lr >= 0.001);
      CHECK(lr < 0.1);
      batches.insert(c["train_loop_config"]["batch"].get<int>());
    }
    CHECK(batches == std::set<int>{16, 32, 64});
  }
  SECTION("integers stay integers; missing keys are sampled; custom factors") {
    auto s = Make({{"resample_probability", 0},
                   {"perturbation_factors", {2.0}},
                   {"hyperparam_mutations",
                    {{"workers", {{"randint", {1, 8}}}}, {"nested", {{"x", {"a", "b"}}}}}}});
    json c = Pbt(s).Explore({{"workers", 3}});
    CHECK(c["workers"] == 6);
    CHECK(c["workers"].is_number_integer());
    CHECK((c["nested"]["x"] == "a" || c["nested"]["x"] == "b"));
    json f = Pbt(s).Explore({{"workers", 3.5}});
    CHECK(f["workers"] == Approx(7.0));
  }
  SECTION("a choice domain is continuous, as in Ray") {
    auto s = Make(
        {{"resample_probability", 0}, {"hyperparam_mutations", {{"n", {{"choice", {10, 100}}}}}}});
    const int n = Pbt(s).Explore({{"n", 10}})["n"].get<int>();
    CHECK((n == 12 || n == 8));
  }
}

TEST_CASE("PBT replays the same exploit for a replayed result", "[tune][pbt]") {
  auto s = Make();
  FirstRound(*s);
  CHECK(s->OnTrialResult("t3", R(4, 0.4)).action == Action::kContinue);
  auto d = s->OnTrialResult("t0", R(4, 0.1));
  REQUIRE(d.action == Action::kExploit);
  const json rng_before = s->SaveState()["rng"];
  auto again = s->OnTrialResult("t0", R(4, 0.1));
  CHECK(again.action == Action::kExploit);
  CHECK(again.donor == d.donor);
  CHECK(again.new_config == d.new_config);
  CHECK(s->SaveState()["rng"] == rng_before);
  // After the exploit t0 carries on from the donor's step time (4): 5 is no step yet.
  CHECK(s->OnTrialResult("t0", R(5, 0.1)).action == Action::kContinue);
}

TEST_CASE("PBT ignores results without the metric or time_attr", "[tune][pbt]") {
  auto s = Make();
  FirstRound(*s);
  CHECK(s->OnTrialResult("t0", {{"training_iteration", 4}}).action == Action::kContinue);
  CHECK(s->OnTrialResult("t0", {{"acc", 0.0}}).action == Action::kContinue);
  CHECK(s->OnTrialResult("t0", {{"training_iteration", 4}, {"acc", "bad"}}).action ==
        Action::kContinue);
  CHECK(s->OnTrialResult("t0", R(4, 0.1)).action == Action::kExploit);
}

TEST_CASE("PBT reloaded mid-run decides exactly as the uninterrupted one", "[tune][pbt]") {
  auto run = [](TrialScheduler& s, int from, int to) {
    std::vector<std::string> log;
    for (int it = from; it <= to; ++it) {
      for (int i = 0; i < 8; ++i) {
        const std::string t = "t" + std::to_string(i);
        const double v = ((i * 5 + it * 3) % 8) / 8.0;
        auto d = s.OnTrialResult(t, R(it, v));
        log.push_back(t + ":" + std::to_string(static_cast<int>(d.action)) + d.donor +
                      d.new_config.dump());
      }
    }
    return log;
  };
  auto whole = Make({{"quantile_fraction", 0.5}, {"resample_probability", 0.5}});
  auto first = Make({{"quantile_fraction", 0.5}, {"resample_probability", 0.5}});
  for (int i = 0; i < 8; ++i) {
    whole->OnTrialAdd("t" + std::to_string(i), Config(0.01 * (i + 1)));
    first->OnTrialAdd("t" + std::to_string(i), Config(0.01 * (i + 1)));
  }
  CHECK(run(*whole, 1, 6) == run(*first, 1, 6));
  auto second = Make({{"quantile_fraction", 0.5}, {"resample_probability", 0.5}});
  REQUIRE(second->LoadState(json::parse(first->SaveState().dump())).ok());
  CHECK(second->SaveState() == first->SaveState());
  const auto a = run(*whole, 7, 20);
  CHECK(a == run(*second, 7, 20));
  int exploits = 0;
  for (const auto& l : a)
    exploits +=
        l.find(":" + std::to_string(static_cast<int>(Action::kExploit))) != std::string::npos;
  CHECK(exploits > 2);
  CHECK(whole->SaveState() == second->SaveState());
  // The seed decides: the same one again gives the same run, another does not.
  auto fresh = [&](uint64_t seed) {
    auto s = Make({{"quantile_fraction", 0.5}, {"resample_probability", 0.5}}, "max", "acc", seed);
    for (int i = 0; i < 8; ++i) s->OnTrialAdd("t" + std::to_string(i), Config(0.01 * (i + 1)));
    return run(*s, 1, 20);
  };
  CHECK(fresh(3) == fresh(3));
  CHECK(fresh(3) != fresh(4));
}

}  // namespace
}  // namespace traintl::tune
