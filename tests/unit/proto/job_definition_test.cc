// The job definition (proto/job_definition.h): what the head stores after validating a
// spec, and reads instead of the spec.
#include "proto/job_definition.h"

#include <catch2/catch.hpp>
#include <string>

#include "tests/unit/proto/job_spec_test_util.h"

using namespace traintl;
using namespace traintl::spec_testing;

TEST_CASE("a validated spec's definition reads back to the same spec") {
  auto spec = ParseJobSpecText(kDesignExample);
  REQUIRE(spec.ok());
  json d = JobDefinitionToJson(*spec);
  // A library job is still a version 1 record, which older releases read.
  CHECK(d["version"] == 1);
  CHECK(d["scaling"]["placement"] == "PACK");
  auto back = JobDefinitionFromJson(json::parse(d.dump()));
  REQUIRE(back.ok());
  CHECK(*back == *spec);

  // Every strategy, score order and dataset flag survives.
  JobSpec s = *spec;
  s.placement_strategy = PlacementStrategy::kStrictSpread;
  s.checkpoint_score_max = !s.checkpoint_score_max;
  s.datasets["eval"] = DatasetSpec{"http://h/e.jsonl", "jsonl", false, {}};
  s.env["A"] = "b";
  back = JobDefinitionFromJson(JobDefinitionToJson(s));
  REQUIRE(back.ok());
  CHECK(*back == s);

  // peer_recovery is written only when set, so older records read as before.
  CHECK_FALSE(JobDefinitionToJson(s)["failure"].contains("peer_recovery"));
  s.peer_recovery = true;
  CHECK(JobDefinitionToJson(s)["failure"]["peer_recovery"] == true);
  back = JobDefinitionFromJson(JobDefinitionToJson(s));
  REQUIRE(back.ok());
  CHECK(back->peer_recovery);
  CHECK(*back == s);

  // An elastic size: min_workers only then.
  CHECK_FALSE(JobDefinitionToJson(s)["scaling"].contains("min_workers"));
  s.num_workers = 4;
  s.min_workers = 2;
  CHECK(JobDefinitionToJson(s)["scaling"]["min_workers"] == 2);
  back = JobDefinitionFromJson(JobDefinitionToJson(s));
  REQUIRE(back.ok());
  CHECK(back->min_workers == 2);
  CHECK(*back == s);
}

TEST_CASE("a definition is read without the submit rules of this release") {
  // A dataset this release refuses at submit (an s3:// URI) runs as it was accepted.
  auto spec = ParseJobSpecText(kDesignExample);
  REQUIRE(spec.ok());
  JobSpec s = *spec;
  s.datasets["train"].uri = "s3://d/t.csv";
  auto back = JobDefinitionFromJson(JobDefinitionToJson(s));
  REQUIRE(back.ok());
  CHECK(back->datasets.at("train").uri == "s3://d/t.csv");
  // ... while making one from such a spec refuses it, naming the field.
  auto from_spec = JobDefinitionFromSpec(JobSpecToJson(s));
  REQUIRE_FALSE(from_spec.ok());
  CHECK(from_spec.status().message().find("datasets.train") != std::string::npos);
}

TEST_CASE("a malformed or newer definition is refused naming the field") {
  auto spec = ParseJobSpecText(kDesignExample);
  REQUIRE(spec.ok());
  const json good = JobDefinitionToJson(*spec);
  auto refused = [&](const std::function<void(json&)>& edit) {
    json d = good;
    edit(d);
    auto r = JobDefinitionFromJson(d);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Status::Code::kInvalidArgument);
    return r.status().message();
  };
  CHECK(refused([](json& d) { d.erase("version"); }) == "job definition: version: missing");
  CHECK(refused([](json& d) { d["version"] = kJobDefinitionVersion + 1; }).find("version 3") !=
        std::string::npos);
  CHECK(refused([](json& d) { d["scaling"].erase("num_workers"); }) ==
        "job definition: scaling.num_workers: missing");
  CHECK(refused([](json& d) { d["scaling"]["placement"] = "WIDE"; }).find("scaling.placement") !=
        std::string::npos);
  CHECK(refused([](json& d) { d["failure"]["max_failures"] = "3"; }) ==
        "job definition: failure.max_failures: wrong type (string)");
  CHECK(refused([](json& d) {
          d["retention"]["score_order"] = "up";
        }).find("retention.score_order") != std::string::npos);
  CHECK(refused([](json& d) { d["datasets"]["train"].erase("uri"); }) ==
        "job definition: datasets.train.uri: missing");
  CHECK(refused([](json& d) { d["train_loop_config"] = 1; }).find("train_loop_config") !=
        std::string::npos);
  CHECK(refused([](json& d) { d = json::array(); }).find("must be an object") != std::string::npos);

  // Fields a newer release added are ignored.
  json d = good;
  d["scaling"]["elastic"] = true;
  d["tune"] = json::object();
  CHECK(JobDefinitionFromJson(d).ok());
}
