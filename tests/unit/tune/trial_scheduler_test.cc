#include "daemon/tune/trial_scheduler.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "daemon/tune/domain.h"

namespace traintl::tune {
namespace {

using json = nlohmann::json;
using Action = SchedulerDecision::Action;

// The error MakeScheduler gives for `spec` (mode max, metric "acc"), or "" if it accepts it.
std::string Error(const json& spec, const std::string& mode = "max",
                  const std::string& metric = "acc") {
  auto s = MakeScheduler(spec, metric, mode, 1);
  if (s.ok()) return "";
  CHECK(s.status().code() == Status::Code::kInvalidArgument);
  return s.status().message();
}

const json kMutations = {{"train_loop_config", {{"lr", {{"loguniform", {1e-4, 0.1}}}}}}};

TEST_CASE("MakeScheduler: null, absent type fifo and a string give FIFO, which always continues",
          "[tune][scheduler]") {
  for (const json& spec : {json(nullptr), json{{"type", "fifo"}}, json("fifo")}) {
    auto s = MakeScheduler(spec, "", "", 7);
    REQUIRE(s.ok());
    TrialScheduler& fifo = **s;
    fifo.OnTrialAdd("t0", {{"lr", 0.1}});
    for (int i = 1; i <= 200; ++i) {
      CHECK(fifo.OnTrialResult("t0", {{"training_iteration", i}, {"acc", -i}}).action ==
            Action::kContinue);
    }
    CHECK(fifo.CanAddTrial());
    CHECK(fifo.TakeTrialsToResume().empty());
    CHECK(fifo.TakeTrialsToStop().empty());
    CHECK(fifo.SaveState() == json{{"type", "fifo"}});
    CHECK(fifo.LoadState(fifo.SaveState()).ok());
    CHECK_FALSE(fifo.LoadState({{"type", "asha"}}).ok());
  }
}

TEST_CASE("MakeScheduler builds each type, async_hyperband is ASHA", "[tune][scheduler]") {
  for (const char* type : {"asha", "async_hyperband", "hyperband"}) {
    auto s = MakeScheduler({{"type", type}}, "acc", "max", 1);
    REQUIRE(s.ok());
  }
  auto alias = MakeScheduler({{"type", "async_hyperband"}}, "acc", "max", 1);
  REQUIRE(alias.ok());
  CHECK((*alias)->SaveState()["type"] == "asha");
  auto pbt =
      MakeScheduler({{"type", "pbt"}, {"hyperparam_mutations", kMutations}}, "acc", "min", 1);
  REQUIRE(pbt.ok());
  CHECK((*pbt)->SaveState()["type"] == "pbt");
}

TEST_CASE("MakeScheduler names the type it does not know", "[tune][scheduler]") {
  CHECK(Error({{"type", "ashaa"}}) ==
        "tune_config.scheduler.type: unknown scheduler \"ashaa\" (did you mean \"asha\"?)");
  CHECK(Error({{"type", "median_stopping_rule"}}).find("not supported") != std::string::npos);
  CHECK(Error({{"max_t", 3}}).rfind("tune_config.scheduler.type: required", 0) == 0);
  CHECK(Error(json::array()).rfind("tune_config.scheduler: must be an object", 0) == 0);
}

TEST_CASE("MakeScheduler names unknown fields with a did-you-mean", "[tune][scheduler]") {
  CHECK(Error({{"type", "asha"}, {"reduction_factr", 3}}) ==
        "tune_config.scheduler.reduction_factr: unknown field (did you mean "
        "\"reduction_factor\"?)");
  CHECK(Error({{"type", "hyperband"}, {"grace_period", 3}})
            .rfind("tune_config.scheduler.grace_period: unknown field", 0) == 0);
  CHECK(Error({{"type", "fifo"}, {"max_t", 3}}).rfind("tune_config.scheduler.max_t: unknown", 0) ==
        0);
  CHECK(Error({{"type", "pbt"}, {"hyperparam_mutations", kMutations}, {"perturbation_intrval", 5}})
            .find("did you mean \"perturbation_interval\"?") != std::string::npos);
  CHECK(Error({{"type", "asha"}, {"metric", "acc"}}).rfind("tune_config.scheduler.metric:", 0) ==
        0);
}

TEST_CASE("MakeScheduler checks ASHA's and HyperBand's values", "[tune][scheduler]") {
  CHECK(Error({{"type", "asha"}, {"reduction_factor", 1}}) ==
        "tune_config.scheduler.reduction_factor: must be > 1, got 1");
  CHECK(Error({{"type", "asha"}, {"max_t", 0}})
            .rfind("tune_config.scheduler.max_t: must be > 0", 0) == 0);
  CHECK(Error({{"type", "asha"}, {"max_t", "10"}})
            .rfind("tune_config.scheduler.max_t: must be a number", 0) == 0);
  CHECK(Error({{"type", "asha"}, {"grace_period", 0}})
            .rfind("tune_config.scheduler.grace_period: must be > 0", 0) == 0);
  CHECK(Error({{"type", "asha"}, {"max_t", 5}, {"grace_period", 10}})
            .rfind("tune_config.scheduler.grace_period: must be <= max_t", 0) == 0);
  CHECK(Error({{"type", "asha"}, {"brackets", 0}}).rfind("tune_config.scheduler.brackets:", 0) ==
        0);
  CHECK(Error({{"type", "asha"}, {"brackets", 1.5}}).rfind("tune_config.scheduler.brackets:", 0) ==
        0);
  CHECK(Error({{"type", "asha"}, {"stop_last_trials", 1}})
            .rfind("tune_config.scheduler.stop_last_trials: must be true or false", 0) == 0);
  CHECK(Error({{"type", "asha"}, {"time_attr", ""}}).rfind("tune_config.scheduler.time_attr:", 0) ==
        0);
  CHECK(Error({{"type", "asha"},
               {"time_attr", "time_total_s"},
               {"max_t", 30.5},
               {"brackets", 3},
               {"stop_last_trials", false}}) == "");
  CHECK(Error({{"type", "hyperband"}, {"max_t", 0.5}})
            .rfind("tune_config.scheduler.max_t: must be >= 1", 0) == 0);
  CHECK(Error({{"type", "hyperband"}, {"reduction_factor", 0.5}})
            .rfind("tune_config.scheduler.reduction_factor: must be > 1", 0) == 0);
}

TEST_CASE("MakeScheduler checks PBT's values", "[tune][scheduler]") {
  auto pbt = [](json extra) {
    json spec = {{"type", "pbt"}, {"hyperparam_mutations", kMutations}};
    spec.update(extra);
    return spec;
  };
  CHECK(Error({{"type", "pbt"}}).rfind("tune_config.scheduler.hyperparam_mutations: required", 0) ==
        0);
  CHECK(Error(pbt({{"hyperparam_mutations", json::object()}}))
            .rfind("tune_config.scheduler.hyperparam_mutations: must name at least one", 0) == 0);
  CHECK(Error(pbt({{"quantile_fraction", 0.6}})) ==
        "tune_config.scheduler.quantile_fraction: must be between 0 and 0.5, got 0.6");
  CHECK(Error(pbt({{"resample_probability", 1.5}}))
            .rfind("tune_config.scheduler.resample_probability:", 0) == 0);
  CHECK(Error(pbt({{"perturbation_interval", 0}}))
            .rfind("tune_config.scheduler.perturbation_interval: must be > 0", 0) == 0);
  CHECK(Error(pbt({{"burn_in_period", -1}})).rfind("tune_config.scheduler.burn_in_period:", 0) ==
        0);
  CHECK(Error(pbt({{"perturbation_factors", json::array()}}))
            .rfind("tune_config.scheduler.perturbation_factors:", 0) == 0);
  CHECK(Error(pbt({{"perturbation_factors", {1.2, "x"}}}))
            .rfind("tune_config.scheduler.perturbation_factors:", 0) == 0);
  CHECK(Error(pbt({{"custom_explore_fn", "f"}}))
            .rfind("tune_config.scheduler.custom_explore_fn: not supported", 0) == 0);
  CHECK(Error(pbt({{"synch", true}})).rfind("tune_config.scheduler.synch:", 0) == 0);
  CHECK(Error(pbt({{"synch", false}, {"perturbation_factors", {1.5, 0.5, 1.0}}})) == "");
  // Mutation specs are checked where they stand.
  CHECK(Error(pbt({{"hyperparam_mutations",
                    {{"train_loop_config", {{"lr", {{"logunifrm", {1e-4, 0.1}}}}}}}}}))
            .rfind("tune_config.scheduler.hyperparam_mutations.train_loop_config.lr: unknown "
                   "distribution \"logunifrm\" (did you mean \"loguniform\"?)",
                   0) == 0);
  CHECK(Error(pbt({{"hyperparam_mutations", {{"batch", json::array()}}}})) ==
        "tune_config.scheduler.hyperparam_mutations.batch: needs a non-empty list of values");
  CHECK(Error(pbt({{"hyperparam_mutations", {{"batch", {{"grid_search", {1, 2}}}}}}}))
            .rfind("tune_config.scheduler.hyperparam_mutations.batch: grid_search", 0) == 0);
  CHECK(Error(pbt({{"hyperparam_mutations", {{"batch", 32}}}}))
            .rfind("tune_config.scheduler.hyperparam_mutations.batch: must be", 0) == 0);
  CHECK(Error(pbt({{"hyperparam_mutations", {{"loguniform", {1e-4, 0.1}}}}}))
            .rfind("tune_config.scheduler.hyperparam_mutations:", 0) == 0);
}

TEST_CASE("MakeScheduler needs the experiment's metric and mode for all but FIFO",
          "[tune][scheduler]") {
  CHECK(Error({{"type", "asha"}}, "maximize").rfind("tune_config.mode:", 0) == 0);
  CHECK(Error({{"type", "hyperband"}}, "min", "").rfind("tune_config.metric: required", 0) == 0);
  CHECK(Error(nullptr, "", "") == "");
}

TEST_CASE("Each scheduler's LoadState refuses another's state", "[tune][scheduler]") {
  std::vector<std::unique_ptr<TrialScheduler>> all;
  for (const json& spec : {json(nullptr), json{{"type", "asha"}}, json{{"type", "hyperband"}},
                           json{{"type", "pbt"}, {"hyperparam_mutations", kMutations}}}) {
    auto s = MakeScheduler(spec, "acc", "max", 3);
    REQUIRE(s.ok());
    all.push_back(std::move(*s));
  }
  for (size_t i = 0; i < all.size(); ++i) {
    for (size_t j = 0; j < all.size(); ++j) {
      const Status st = all[i]->LoadState(all[j]->SaveState());
      CHECK(st.ok() == (i == j));
      if (i != j) CHECK(st.message().find("saved by a") != std::string::npos);
    }
    CHECK_FALSE(all[i]->LoadState(json::array()).ok());
    CHECK_FALSE(all[i]->LoadState(json{{"type", 3}}).ok());
  }
}

TEST_CASE("Rng state round-trips and its JSON form is checked", "[tune][scheduler]") {
  Rng a(42);
  for (int i = 0; i < 5; ++i) a.Next();
  auto saved = sched_internal::RngStateToJson(a.state());
  auto back = sched_internal::RngStateFromJson(saved);
  REQUIRE(back.ok());
  Rng b = Rng::FromState(*back);
  for (int i = 0; i < 10; ++i) CHECK(a.Next() == b.Next());
  CHECK_FALSE(sched_internal::RngStateFromJson({"0", "0", "0", "0"}).ok());
  CHECK_FALSE(sched_internal::RngStateFromJson({"1", "2", "3"}).ok());
  CHECK_FALSE(sched_internal::RngStateFromJson({"1", "2", "3", "xyz"}).ok());
  CHECK_FALSE(sched_internal::RngStateFromJson({"1", "2", "3", "11112222333344445"}).ok());
}

TEST_CASE("FormatNumber writes integers without a fraction", "[tune][scheduler]") {
  CHECK(sched_internal::FormatNumber(4) == "4");
  CHECK(sched_internal::FormatNumber(-0.0) == "0");
  CHECK(sched_internal::FormatNumber(0.6000000000000001) == "0.6");
  CHECK(sched_internal::FormatNumber(1e-4) == "0.0001");
}

}  // namespace
}  // namespace traintl::tune
