#include "daemon/tune/tune_spec.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>

using Catch::Contains;
using nlohmann::json;
using traintl::tune::ParseTuneSpec;
using traintl::tune::TuneSpec;
using traintl::tune::TuneSpecToJson;

namespace {

json Doc() {
  return json::parse(R"({
    "trainer": {"name": "digits", "entrypoint": {"library": "lib.so"},
                "scaling_config": {"num_workers": 2}},
    "param_space": {"train_loop_config": {"lr": {"loguniform": [1e-4, 0.1]}},
                    "scaling_config": {"num_workers": {"grid_search": [1, 2, 4]}}},
    "tune_config": {"metric": "loss", "mode": "min"}
  })");
}

TuneSpec Parse(const json& doc) {
  auto s = ParseTuneSpec(doc);
  INFO(s.status().message());
  REQUIRE(s.ok());
  return *s;
}

std::string Error(const json& doc) {
  auto s = ParseTuneSpec(doc);
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().code() == traintl::Status::Code::kInvalidArgument);
  return s.status().message();
}

// Doc() with tune_config[key] = value.
json WithTc(const std::string& key, const json& value) {
  json d = Doc();
  d["tune_config"][key] = value;
  return d;
}

}  // namespace

TEST_CASE("A minimal spec gets the defaults") {
  TuneSpec s = Parse(Doc());
  CHECK(s.config.metric == "loss");
  CHECK(s.config.mode == "min");
  CHECK(s.config.num_samples == 1);
  CHECK(s.config.max_concurrent_trials == 0);
  CHECK(s.config.time_budget_s == 0);
  CHECK(s.config.search_alg == "random");
  CHECK_FALSE(s.config.seed.has_value());
  CHECK(s.config.scheduler.is_null());
  CHECK(s.space.GridSize() == 3);
  CHECK(s.TotalTrials() == 3);
  CHECK(s.param_space == Doc()["param_space"]);

  json d = Doc();
  d.erase("param_space");
  TuneSpec bare = Parse(d);
  CHECK(bare.param_space == json::object());
  CHECK(bare.space.params().empty());
  CHECK(bare.TotalTrials() == 1);
}

TEST_CASE("TuneSpecToJson round-trips with defaults filled in") {
  json d = Doc();
  d["tune_config"]["num_samples"] = 4;
  d["tune_config"]["search_alg"] = {{"type", "random"}, {"seed", 12345}};
  d["tune_config"]["scheduler"] = {{"type", "asha"}, {"grace_period", 2}};
  TuneSpec s = Parse(d);
  CHECK(s.TotalTrials() == 12);
  CHECK(s.config.seed == uint64_t{12345});
  CHECK(s.config.scheduler == d["tune_config"]["scheduler"]);
  json out = TuneSpecToJson(s);
  CHECK(out["tune_config"]["max_concurrent_trials"] == 0);
  CHECK(out["tune_config"]["time_budget_s"] == 0);
  CHECK(out["tune_config"]["search_alg"] == d["tune_config"]["search_alg"]);
  CHECK(TuneSpecToJson(Parse(out)) == out);

  json no_seed = TuneSpecToJson(Parse(Doc()));
  CHECK_FALSE(no_seed["tune_config"]["search_alg"].contains("seed"));
  CHECK(no_seed["tune_config"]["scheduler"].is_null());
  CHECK(TuneSpecToJson(Parse(no_seed)) == no_seed);
}

TEST_CASE(
    "search_alg is a bare string or an object with type and seed and grid needs a pure grid") {
  CHECK(Parse(WithTc("search_alg", "random")).config.search_alg == "random");
  json d = WithTc("search_alg", "grid");
  d["param_space"]["train_loop_config"]["lr"] = {{"grid_search", {0.1, 0.01}}};
  TuneSpec grid = Parse(d);
  CHECK(grid.config.search_alg == "grid");
  CHECK(grid.TotalTrials() == 6);
  CHECK(Parse(WithTc("search_alg", {{"seed", 0}})).config.seed == uint64_t{0});

  CHECK(Error(WithTc("search_alg", "grid")) ==
        "tune_config.search_alg: \"grid\" cannot sample param_space.train_loop_config.lr (not a "
        "grid_search); use \"random\"");
  json no_grid = WithTc("search_alg", "grid");
  no_grid.erase("param_space");
  CHECK_THAT(Error(no_grid), Contains("tune_config.search_alg: \"grid\" needs grid_search"));
  CHECK_THAT(Error(WithTc("search_alg", "bayes")),
             Contains("tune_config.search_alg: must be \"random\" or \"grid\""));
  CHECK_THAT(Error(WithTc("search_alg", {{"type", "grd"}})),
             Contains("tune_config.search_alg.type: must be \"random\" or \"grid\", got \"grd\" "
                      "(did you mean \"grid\"?)"));
  CHECK_THAT(Error(WithTc("search_alg", {{"seed", -1}})),
             Contains("tune_config.search_alg.seed: must be an integer >= 0"));
  CHECK_THAT(Error(WithTc("search_alg", {{"seed", 1.5}})),
             Contains("tune_config.search_alg.seed: must be an integer >= 0"));
  CHECK_THAT(Error(WithTc("search_alg", {{"sed", 1}})),
             Contains("tune_config.search_alg.sed: unknown field (did you mean \"seed\"?)"));
  CHECK_THAT(Error(WithTc("search_alg", 3)), Contains("tune_config.search_alg: must be"));
}

TEST_CASE("num_samples is an integer >= 1 or -1 with a time budget") {
  CHECK(Parse(WithTc("num_samples", 2.0)).config.num_samples == 2);
  CHECK_THAT(Error(WithTc("num_samples", 1.5)), Contains("tune_config.num_samples: must be an"));
  CHECK_THAT(Error(WithTc("num_samples", 0)), Contains("tune_config.num_samples: must be an"));
  CHECK_THAT(Error(WithTc("num_samples", "3")), Contains("tune_config.num_samples: must be"));
  CHECK(Error(WithTc("num_samples", -1)) == "tune_config.num_samples: -1 needs time_budget_s > 0");
  json d = WithTc("num_samples", -1);
  d["tune_config"]["time_budget_s"] = 3600;
  TuneSpec s = Parse(d);
  CHECK(s.TotalTrials() == -1);
  CHECK(s.config.time_budget_s == 3600);
  CHECK_THAT(Error(WithTc("num_samples", int64_t{1} << 62)),
             Contains("tune_config.num_samples: times the grid"));
}

TEST_CASE("Every tune_config error names its field") {
  CHECK(Error(WithTc("metrics", "x")) ==
        "tune_config.metrics: unknown field (did you mean \"metric\"?)");
  CHECK_THAT(Error(WithTc("mode", "minimize")),
             Contains("tune_config.mode: must be \"min\" or \"max\""));
  CHECK_THAT(Error(WithTc("metric", "")), Contains("tune_config.metric: must be a non-empty"));
  CHECK_THAT(Error(WithTc("metric", 3)), Contains("tune_config.metric: must be a non-empty"));
  CHECK_THAT(Error(WithTc("max_concurrent_trials", -1)),
             Contains("tune_config.max_concurrent_trials: must be an integer >= 0"));
  CHECK_THAT(Error(WithTc("max_concurrent_trials", 2.5)),
             Contains("tune_config.max_concurrent_trials"));
  CHECK_THAT(Error(WithTc("time_budget_s", -1)), Contains("tune_config.time_budget_s: must be"));
  CHECK_THAT(Error(WithTc("time_budget_s", "1h")), Contains("tune_config.time_budget_s"));
  CHECK_THAT(Error(WithTc("scheduler", "asha")), Contains("tune_config.scheduler: must be an"));
  CHECK(Parse(WithTc("scheduler", nullptr)).config.scheduler.is_null());

  json d = Doc();
  d["tune_config"].erase("metric");
  CHECK(Error(d) == "tune_config.metric: required");
  d = Doc();
  d["tune_config"].erase("mode");
  CHECK_THAT(Error(d), Contains("tune_config.mode: required"));
}

TEST_CASE("Top-level shape is trainer and param_space and tune_config and nothing else") {
  CHECK_THAT(Error(json::array()), Contains("tune spec: must be an object"));
  json d = Doc();
  d["trainr"] = json::object();
  CHECK(Error(d) == "trainr: unknown field (did you mean \"trainer\"?)");
  d = Doc();
  d["extra"] = 1;
  CHECK_THAT(Error(d), Contains("extra: unknown field (known: trainer, param_space, tune_config"));
  d = Doc();
  d.erase("trainer");
  CHECK_THAT(Error(d), Contains("trainer: required"));
  d = Doc();
  d["trainer"] = "job.json";
  CHECK_THAT(Error(d), Contains("trainer: must be an object"));
  d = Doc();
  d.erase("tune_config");
  CHECK_THAT(Error(d), Contains("tune_config: required"));
  d = Doc();
  d["tune_config"] = 1;
  CHECK_THAT(Error(d), Contains("tune_config: must be an object"));
  d = Doc();
  d["param_space"] = json::array();
  CHECK_THAT(Error(d), Contains("param_space: must be an object"));
  d = Doc();
  d["param_space"]["scaling_config"]["num_worker"] = 3;
  CHECK_THAT(Error(d), Contains("param_space.scaling_config.num_worker: no such field in the "
                                "trainer's job spec (did you mean \"num_workers\"?)"));
}
