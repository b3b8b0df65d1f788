#include "daemon/tune/search_space.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

using Catch::Contains;
using nlohmann::json;
using traintl::tune::Domain;
using traintl::tune::SearchSpace;

namespace {

json Trainer() {
  return json::parse(R"({
    "name": "digits",
    "entrypoint": {"library": "libdigits.so", "function": "train_loop"},
    "train_loop_config": {"lr": 0.001, "epochs": 20},
    "scaling_config": {"num_workers": 2, "use_gpu": false}
  })");
}

SearchSpace Parse(const json& param_space) {
  auto s = SearchSpace::Parse(param_space, Trainer());
  INFO(s.status().message());
  REQUIRE(s.ok());
  return *s;
}

std::string Error(const json& param_space) {
  auto s = SearchSpace::Parse(param_space, Trainer());
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().code() == traintl::Status::Code::kInvalidArgument);
  return s.status().message();
}

}  // namespace

TEST_CASE("Parse lists domains in sorted depth-first order and keeps constants") {
  SearchSpace s = Parse(json::parse(R"({
    "train_loop_config": {"lr": {"loguniform": [1e-4, 0.1]}, "hidden": {"choice": [32, 64]},
                          "extra": {"nested": {"randint": [1, 4]}}, "epochs": 5},
    "scaling_config": {"num_workers": {"grid_search": [1, 2]}}
  })"));
  std::vector<std::string> paths;
  for (const auto& p : s.params()) {
    std::string dotted;
    for (const auto& k : p.path) dotted += (dotted.empty() ? "" : ".") + k;
    paths.push_back(dotted);
  }
  CHECK(paths == std::vector<std::string>{"scaling_config.num_workers",
                                          "train_loop_config.extra.nested",
                                          "train_loop_config.hidden", "train_loop_config.lr"});
  CHECK(s.has_grid());
  CHECK(s.has_random());
  CHECK(s.GridSize() == 2);
  json c = s.TrialConfig(1, 0);
  CHECK(c["train_loop_config"]["epochs"] == 5);
  CHECK(c["train_loop_config"]["extra"]["nested"].is_number_integer());
  CHECK(c["scaling_config"]["num_workers"] == 1);
}

TEST_CASE("Outside train_loop_config every path must exist in the trainer") {
  CHECK(Error({{"scaling_config", {{"num_worker", {{"grid_search", {1, 2}}}}}}}) ==
        "param_space.scaling_config.num_worker: no such field in the trainer's job spec (did "
        "you mean \"num_workers\"?)");
  CHECK_THAT(Error({{"run_config", {{"storage_path", "/tmp"}}}}),
             Contains("param_space.run_config: no such field"));
  CHECK_THAT(Error({{"name", {{"suffix", "x"}}}}),
             Contains("param_space.name.suffix: no such field"));
  // train_loop_config is the user's dict: new keys are fine, at any depth.
  SearchSpace s = Parse({{"train_loop_config", {{"new", {{"deep", {{"uniform", {0, 1}}}}}}}}});
  CHECK(s.params().size() == 1);
  // A domain may replace a value of any type, a whole section included.
  CHECK(Parse({{"scaling_config", {{"use_gpu", {{"choice", {true, false}}}}}}}).has_random());
  CHECK(Parse({{"entrypoint", {{"grid_search", json::array({json{{"library", "a.so"}}})}}}})
            .has_grid());
}

TEST_CASE("Domain errors carry the param_space path") {
  CHECK(Error({{"train_loop_config", {{"lr", {{"logunifrm", {1e-4, 0.1}}}}}}}) ==
        "param_space.train_loop_config.lr: unknown distribution \"logunifrm\" (did you mean "
        "\"loguniform\"?)");
  CHECK_THAT(Error({{"scaling_config", {{"num_workers", {{"grid_search", json::array()}}}}}}),
             Contains("param_space.scaling_config.num_workers: grid_search needs a non-empty"));
  CHECK_THAT(Error(json::array()), Contains("param_space: must be an object"));
  CHECK_THAT(Error(3), Contains("param_space: must be an object"));
}

TEST_CASE("A grid too large to run is refused") {
  json tlc = json::object();
  for (int i = 0; i < 20; ++i) tlc["p" + std::to_string(i)] = {{"grid_search", {1, 2}}};
  CHECK_THAT(Error({{"train_loop_config", tlc}}), Contains("grid points"));
}

TEST_CASE("Grid points follow Ray's order: the first grid in path order turns fastest") {
  SearchSpace s = Parse({{"train_loop_config",
                          {{"a", {{"grid_search", {1, 2}}}},
                           {"b", {{"grid_search", {"x", "y", "z"}}}},
                           {"lr", {{"uniform", {0, 1}}}}}}});
  REQUIRE(s.GridSize() == 6);
  std::vector<std::string> got;
  for (int i = 0; i < 12; ++i) {
    json c = s.TrialConfig(9, i)["train_loop_config"];
    got.push_back(c["a"].dump() + c["b"].get<std::string>());
  }
  CHECK(got == std::vector<std::string>{"1x", "2x", "1y", "2y", "1z", "2z",    // sample 1
                                        "1x", "2x", "1y", "2y", "1z", "2z"});  // sample 2
  // A repeated grid point gets fresh random draws: the index, not the point, seeds them.
  CHECK(s.TrialConfig(9, 0)["train_loop_config"]["lr"] !=
        s.TrialConfig(9, 6)["train_loop_config"]["lr"]);
}

TEST_CASE("Trial configs are a pure function of seed and index") {
  SearchSpace s = Parse({{"train_loop_config",
                          {{"lr", {{"loguniform", {1e-4, 0.1}}}},
                           {"hidden", {{"choice", {16, 32, 64, 128}}}},
                           {"seed", {{"randint", {0, 1000000}}}}}}});
  CHECK(s.GridSize() == 1);
  CHECK_FALSE(s.has_grid());
  for (int i = 0; i < 5; ++i) CHECK(s.TrialConfig(3, i) == s.TrialConfig(3, i));
  std::set<std::string> distinct;
  for (int i = 0; i < 50; ++i) distinct.insert(s.TrialConfig(3, i).dump());
  CHECK(distinct.size() == 50);
  CHECK(s.TrialConfig(3, 0) != s.TrialConfig(4, 0));
}

TEST_CASE("Apply deep-merges the config into the trainer") {
  json trainer = Trainer();
  json config = {{"train_loop_config", {{"lr", 0.01}, {"new", {{"a", 1}}}}},
                 {"scaling_config", {{"num_workers", 4}}},
                 {"entrypoint", {{"function", "other"}}}};
  json out = SearchSpace::Apply(trainer, config);
  CHECK(out["train_loop_config"] == json{{"lr", 0.01}, {"epochs", 20}, {"new", {{"a", 1}}}});
  CHECK(out["scaling_config"] == json{{"num_workers", 4}, {"use_gpu", false}});
  CHECK(out["entrypoint"] == json{{"library", "libdigits.so"}, {"function", "other"}});
  CHECK(out["name"] == "digits");
  // Anything but two objects replaces.
  CHECK(SearchSpace::Apply(trainer, {{"train_loop_config", {1, 2}}})["train_loop_config"] ==
        json{1, 2});
  CHECK(SearchSpace::Apply(json{{"a", 1}}, json{{"a", {{"b", 2}}}}) == json{{"a", {{"b", 2}}}});
}

TEST_CASE("ShortName names leaves by their last key in walk order") {
  json config = {
      {"train_loop_config", {{"lr", 0.0031}, {"hidden", 64}, {"act", "relu"}, {"sizes", {1, 2}}}},
      {"scaling_config", {{"num_workers", 2}, {"use_gpu", true}}}};
  CHECK(SearchSpace::ShortName(config) ==
        "num_workers=2,use_gpu=true,act=relu,hidden=64,lr=0.0031,sizes=[1,2]");
  CHECK(SearchSpace::ShortName({{"x", 123.456789}}) == "x=123.5");
  CHECK(SearchSpace::ShortName(json::object()).empty());
}

TEST_CASE("ParamValues keeps only the searched values for a trial name") {
  SearchSpace s = Parse({{"train_loop_config",
                          {{"lr", {{"grid_search", {0.1, 0.01}}}},
                           {"hidden", {{"grid_search", {64}}}},
                           {"epochs", 5}}}});
  json c = s.TrialConfig(0, 1);
  CHECK(c["train_loop_config"]["epochs"] == 5);
  CHECK(s.ParamValues(c) == json{{"train_loop_config", {{"lr", 0.01}, {"hidden", 64}}}});
  CHECK(SearchSpace::ShortName(s.ParamValues(c)) == "hidden=64,lr=0.01");
}
