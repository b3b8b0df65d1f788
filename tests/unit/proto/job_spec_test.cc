// ParseJobSpec: the DESIGN example, defaults, round trips, and the checks of the whole
// document (names, entrypoint, unknown fields, types).
#include <catch2/catch.hpp>
#include <string>

#include "proto/job_spec.h"
#include "tests/unit/proto/job_spec_test_util.h"

using namespace traintl;
using namespace traintl::spec_testing;
using json = nlohmann::json;

TEST_CASE("the DESIGN example parses (GPU variant)") {
  JobSpec s = MustParse(Example());
  CHECK(s.name == "digits-ddp");
  CHECK(s.library == "build/examples/libdigits_train.so");
  CHECK(s.function == "train_loop");
  CHECK(s.train_loop_config == json{{"lr", 0.001}, {"epochs", 20}});
  CHECK(s.num_workers == 2);
  CHECK(s.use_gpu);
  CHECK(s.resources_per_worker.at("CPU") == 1);
  CHECK(s.resources_per_worker.at("GPU") == 0.5);
  CHECK(s.resources_per_worker.at("memory") == 2147483648.0);
  CHECK(s.resources_per_worker.at("my_custom") == 1);
  CHECK(s.resources_per_worker.size() == 4);
  CHECK(s.placement_strategy == PlacementStrategy::kPack);
  CHECK(s.storage_path == "/shared/traintl-results");
  CHECK(s.num_to_keep == 3);
  CHECK(s.checkpoint_score_attribute == "loss");
  CHECK_FALSE(s.checkpoint_score_max);
  CHECK(s.max_failures == 3);
  REQUIRE(s.datasets.size() == 2);
  CHECK(s.datasets.at("train").uri == "file:///data/digits/train-*.csv");
  CHECK(s.datasets.at("train").format == "csv");
  CHECK(s.datasets.at("train").split);
  CHECK(s.datasets.at("val").format == "");
  CHECK_FALSE(s.datasets.at("val").split);
  CHECK(s.env == std::map<std::string, std::string>{{"OMP_NUM_THREADS", "1"}});
  CHECK(s.priority == 0);
  CHECK(s.resume_from_checkpoint == "");
}

TEST_CASE("the DESIGN example as written: a GPU request turns use_gpu on") {
  JobSpec s = MustParse(Example(false));
  CHECK(s.use_gpu);
  CHECK(s.resources_per_worker.at("GPU") == 0.5);
}

TEST_CASE("a full spec round-trips through JobSpecToJson") {
  json doc = Example();
  doc["resume_from_checkpoint"] = "job:3f9c2a1b7d4e";
  doc["priority"] = -7;
  doc["run_config"]["checkpoint_config"]["checkpoint_score_order"] = "max";
  doc["scaling_config"]["placement_strategy"] = "STRICT_SPREAD";
  doc["train_loop_config"]["nested"] = {{"a", {1, 2.5, "x", nullptr}}, {"b", {{"c", true}}}};
  JobSpec s = MustParse(doc);
  json canonical = JobSpecToJson(s);
  JobSpec back = MustParse(canonical);
  CHECK(back == s);
  // Canonical form is a fixed point.
  CHECK(JobSpecToJson(back) == canonical);
  // And it survives text.
  auto from_text = ParseJobSpecText(canonical.dump(2));
  REQUIRE(from_text.ok());
  CHECK(*from_text == s);
  CHECK(canonical["scaling_config"]["placement_strategy"] == "STRICT_SPREAD");
  CHECK(canonical["run_config"]["checkpoint_config"]["checkpoint_score_order"] == "max");
  CHECK(canonical["scaling_config"]["resources_per_worker"]["memory"] == 2147483648ULL);
}

TEST_CASE("a minimal spec gets every default") {
  JobSpec s = MustParse(Minimal());
  CHECK(s.function == "");
  CHECK(s.train_loop_config == json::object());
  CHECK(s.num_workers == 1);
  CHECK_FALSE(s.use_gpu);
  CHECK(s.resources_per_worker == std::map<std::string, double>{{"CPU", 1}, {"GPU", 0}});
  CHECK(s.placement_strategy == PlacementStrategy::kPack);
  CHECK(s.storage_path == "");
  CHECK(s.num_to_keep == 0);
  CHECK(s.checkpoint_score_attribute == "");
  CHECK_FALSE(s.checkpoint_score_max);
  CHECK(s.max_failures == 0);
  CHECK(s.datasets.empty());
  CHECK(s.env.empty());
  CHECK(s.priority == 0);
  CHECK(s.resume_from_checkpoint == "");

  json c = JobSpecToJson(s);
  CHECK(c["entrypoint"]["function"].is_null());
  CHECK(c["run_config"]["storage_path"].is_null());
  CHECK(c["run_config"]["checkpoint_config"]["num_to_keep"].is_null());
  CHECK(c["run_config"]["checkpoint_config"]["checkpoint_score_order"] == "min");
  CHECK(c["run_config"]["failure_config"]["max_failures"] == 0);
  CHECK(c["scaling_config"]["resources_per_worker"] == json{{"CPU", 1}, {"GPU", 0}});
  CHECK(MustParse(c) == s);
}

TEST_CASE("use_gpu defaults GPU to 1, datasets default split only for train") {
  JobSpec s = MustParse(With("/scaling_config/use_gpu", true));
  CHECK(s.resources_per_worker.at("GPU") == 1);
  json doc = Minimal();
  doc["datasets"] = {{"train", {{"uri", "file:///d/t.csv"}}},
                     {"eval", {{"uri", "https://example.com/e.jsonl"}}}};
  s = MustParse(doc);
  CHECK(s.datasets.at("train").split);
  CHECK_FALSE(s.datasets.at("eval").split);
  CHECK(InferDatasetFormat(s.datasets.at("train")) == "csv");
  CHECK(InferDatasetFormat(s.datasets.at("eval")) == "jsonl");
  CHECK(InferDatasetFormat(DatasetSpec{"file:///d/x", "", false, {}}) == "");
  CHECK(InferDatasetFormat(DatasetSpec{"file:///d/x", "npy", false, {}}) == "npy");
}

TEST_CASE("null means not given for Ray's None-defaulted fields") {
  json doc = Minimal();
  doc["entrypoint"]["function"] = nullptr;
  doc["run_config"] = {
      {"storage_path", nullptr},
      {"checkpoint_config", {{"num_to_keep", nullptr}, {"checkpoint_score_attribute", nullptr}}}};
  doc["resume_from_checkpoint"] = nullptr;
  JobSpec s = MustParse(doc);
  CHECK(s.num_to_keep == 0);
  CHECK(s.storage_path.empty());
}

TEST_CASE("integers given as 2.0 are accepted, 2.5 is not") {
  CHECK(MustParse(With("/scaling_config/num_workers", 2.0)).num_workers == 2);
  ExpectError(With("/scaling_config/num_workers", 2.5), "scaling_config.num_workers",
              "must be an integer >= 1, got 2.5");
  ExpectError(With("/priority", 1.5), "priority", "must be a 32-bit integer, got 1.5");
  ExpectError(With("/priority", 1099511627776LL), "priority",
              "is too large: at most 2147483647, got 1099511627776");
  ExpectError(With("/priority", -1099511627776LL), "priority", "must be a 32-bit integer");
  ExpectError(With("/scaling_config/num_workers", 1e300), "scaling_config.num_workers",
              "is too large: at most 4096, got 1e+300");
}

TEST_CASE("the document must be an object") {
  ExpectError(json::array({1}), "", "must be a JSON object, got an array");
  ExpectError(json("x"), "", "must be a JSON object");
}

TEST_CASE("name: required, 1..128 chars of [A-Za-z0-9._-]") {
  json doc = Minimal();
  doc.erase("name");
  ExpectError(doc, "name", "is required");
  ExpectError(With("/name", "my job/1"), "name", "not starting with - or ., got \"my job/1\"");
  ExpectError(With("/name", ""), "name", "1..128 characters");
  ExpectError(With("/name", std::string(129, 'a')), "name", "1..128 characters");
  CHECK(MustParse(With("/name", std::string(128, 'a'))).name.size() == 128);
  ExpectError(With("/name", ".."), "name", "must not start with '-' or '.'");
  ExpectError(With("/name", "."), "name", "must not start with '-' or '.'");
  ExpectError(With("/name", "-rf"), "name", "(it names a directory), got \"-rf\"");
  ExpectError(With("/name", ".hidden"), "name", "must not start with '-' or '.'");
  CHECK(MustParse(With("/name", "a.-_b-")).name == "a.-_b-");
  ExpectError(With("/name", 7), "name", "got 7");
  ExpectError(With("/name", std::string("a\0b", 3)), "name", "NUL");
}

TEST_CASE("entrypoint: library required, function an identifier") {
  json doc = Minimal();
  doc.erase("entrypoint");
  ExpectError(doc, "entrypoint", "is required");
  ExpectError(With("/entrypoint", "/x.so"), "entrypoint", "must be an object");
  ExpectError(With("/entrypoint", json::object()), "entrypoint", "needs one of {\"library\"");
  ExpectError(With("/entrypoint/library", ""), "entrypoint.library", "non-empty");
  ExpectError(With("/entrypoint/library", 3), "entrypoint.library", "got 3");
  ExpectError(With("/entrypoint/function", "train loop"), "entrypoint.function", "C identifier");
  ExpectError(With("/entrypoint/libary", "/x.so"), "entrypoint.libary",
              "unknown field (did you mean library?)");
}

TEST_CASE("unknown fields name their full path, with a hint") {
  ExpectError(With("/nme", "x"), "nme", "unknown field (did you mean name?)");
  ExpectError(With("/scaling_config/num_worker", 2), "scaling_config.num_worker",
              "unknown field (did you mean num_workers?)");
  ExpectError(With("/run_config/checkpoint_config/num_to_kep", 2),
              "run_config.checkpoint_config.num_to_kep", "did you mean num_to_keep?");
  ExpectError(With("/run_config/failure_config/max_failure", 2),
              "run_config.failure_config.max_failure", "did you mean max_failures?");
  // A field at the wrong level points at where it belongs.
  ExpectError(With("/num_workers", 2), "num_workers", "did you mean scaling_config.num_workers?");
  ExpectError(With("/run_config/name", "x"), "run_config.name",
              "did you mean the top-level field name?");
  // Ray options traintl lacks say so.
  ExpectError(With("/run_config/failure_config/fail_fast", true),
              "run_config.failure_config.fail_fast", "Ray Train option");
  // Nothing close: the allowed fields are listed.
  ExpectError(With("/datasets/train", {{"uri", "file:///x.csv"}, {"zzzzzz", 1}}),
              "datasets.train.zzzzzz", "datasets.train has: uri, format, split");
  // Keys that are not plain identifiers are quoted.
  ExpectError(With("/scaling_config/a b", 1), "scaling_config[\"a b\"]", "unknown field");
  // Keys are clipped in messages.
  json doc = With("/" + std::string(5000, 'k'), 1);
  SpecError err;
  REQUIRE_FALSE(ParseJobSpec(doc, &err).ok());
  CHECK(err.field.size() < 100);
}

TEST_CASE("wrong types are refused with what was expected") {
  ExpectError(With("/scaling_config/num_workers", "two"), "scaling_config.num_workers",
              "must be an integer >= 1, got \"two\"");
  ExpectError(With("/scaling_config/num_workers", 0), "scaling_config.num_workers",
              "must be an integer >= 1, got 0");
  ExpectError(With("/scaling_config/num_workers", 5000), "scaling_config.num_workers",
              "is too large: at most 4096, got 5000");
  // Huge numbers say they are too large, not that they are not integers >= 1.
  ExpectError(With("/scaling_config/num_workers", 1000000000000), "scaling_config.num_workers",
              "is too large: at most 4096, got 1000000000000");
  ExpectError(With("/scaling_config/num_workers", 18446744073709551615ull),
              "scaling_config.num_workers", "is too large: at most 4096");
  ExpectError(With("/scaling_config/num_workers", 1e30), "scaling_config.num_workers",
              "is too large: at most 4096");
  ExpectError(With("/scaling_config/use_gpu", "yes"), "scaling_config.use_gpu",
              "must be true or false, got \"yes\"");
  ExpectError(With("/scaling_config/use_gpu", 1), "scaling_config.use_gpu", "true or false");
  ExpectError(With("/scaling_config", 4), "scaling_config", "must be an object, got 4");
  ExpectError(With("/run_config", json::array()), "run_config", "must be an object");
  ExpectError(With("/scaling_config/resources_per_worker", "CPU=1"),
              "scaling_config.resources_per_worker", "must be an object");
  ExpectError(With("/priority", "high"), "priority", "got \"high\"");
  ExpectError(With("/datasets", json::array()), "datasets", "must be an object");
  ExpectError(With("/env", "A=1"), "env", "must be an object");
}
