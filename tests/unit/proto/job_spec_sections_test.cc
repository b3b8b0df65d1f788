// ParseJobSpec: the rules of each section (resources, memory, placement, run_config,
// datasets, env, resume_from_checkpoint, train_loop_config, failure_config).
#include <catch2/catch.hpp>
#include <string>

#include "proto/job_definition.h"
#include "proto/job_spec.h"
#include "tests/unit/proto/job_spec_test_util.h"

using namespace traintl;
using namespace traintl::spec_testing;
using json = nlohmann::json;

TEST_CASE("resources: non-negative, GPU fractional only up to 1, names checked") {
  ExpectError(With("/scaling_config/resources_per_worker/CPU", -1),
              "scaling_config.resources_per_worker.CPU", "must not be negative");
  ExpectError(With("/scaling_config/resources_per_worker/my_custom", -0.5),
              "scaling_config.resources_per_worker.my_custom", "must not be negative");
  ExpectError(With("/scaling_config/resources_per_worker/CPU", "1"),
              "scaling_config.resources_per_worker.CPU", "non-negative number, got \"1\"");

  json gpu = With("/scaling_config/use_gpu", true);
  ExpectError(With("/scaling_config/resources_per_worker/GPU", 1.5, gpu),
              "scaling_config.resources_per_worker.GPU", "whole number of GPUs, got 1.5");
  ExpectError(With("/scaling_config/num_gpus_per_worker", 2.5, gpu),
              "scaling_config.num_gpus_per_worker", "whole number");
  ExpectError(With("/scaling_config/resources_per_worker/GPU", -1, gpu),
              "scaling_config.resources_per_worker.GPU", "must not be negative");
  CHECK(MustParse(With("/scaling_config/resources_per_worker/GPU", 0.25, gpu))
            .resources_per_worker.at("GPU") == 0.25);
  CHECK(MustParse(With("/scaling_config/resources_per_worker/GPU", 4, gpu))
            .resources_per_worker.at("GPU") == 4);
  ExpectError(With("/scaling_config/resources_per_worker/GPU", 0, gpu),
              "scaling_config.resources_per_worker.GPU", "use_gpu is true");
  CHECK(MustParse(With("/scaling_config/num_gpus_per_worker", 1)).use_gpu);

  ExpectError(With("/scaling_config/resources_per_worker/bad!name", 1),
              "scaling_config.resources_per_worker[\"bad!name\"]", "[A-Za-z0-9_.-]");
  ExpectError(With("/scaling_config/resources_per_worker/gpu", 1),
              "scaling_config.resources_per_worker.gpu", "did you mean GPU?");
  JobSpec s = MustParse(With("/scaling_config/resources_per_worker/accel.A100-x_1", 0.5));
  CHECK(s.resources_per_worker.at("accel.A100-x_1") == 0.5);
  // The fractional CPU is fine (Ray allows it).
  CHECK(MustParse(With("/scaling_config/resources_per_worker/CPU", 0.5))
            .resources_per_worker.at("CPU") == 0.5);
}

TEST_CASE("shorthands: num_cpus_per_worker / num_gpus_per_worker") {
  json doc = Minimal();
  doc["scaling_config"] = {
      {"num_cpus_per_worker", 4}, {"num_gpus_per_worker", 2}, {"use_gpu", true}};
  JobSpec s = MustParse(doc);
  CHECK(s.resources_per_worker.at("CPU") == 4);
  CHECK(s.resources_per_worker.at("GPU") == 2);
  CHECK(MustParse(JobSpecToJson(s)) == s);

  // Both forms with the same value are fine.
  doc["scaling_config"]["resources_per_worker"] = {{"CPU", 4}};
  CHECK(MustParse(doc).resources_per_worker.at("CPU") == 4);

  doc["scaling_config"]["resources_per_worker"] = {{"CPU", 8}};
  ExpectError(doc, "scaling_config.num_cpus_per_worker",
              "conflicts with scaling_config.resources_per_worker.CPU (4 vs 8)");
  doc["scaling_config"]["resources_per_worker"] = {{"GPU", 1}};
  ExpectError(doc, "scaling_config.num_gpus_per_worker",
              "conflicts with scaling_config.resources_per_worker.GPU (2 vs 1)");
  ExpectError(With("/scaling_config/num_cpus_per_worker", "four"),
              "scaling_config.num_cpus_per_worker", "got \"four\"");
}

TEST_CASE("memory amounts") {
  CHECK(*ParseMemoryAmount(json("2GiB")) == 2147483648.0);
  CHECK(*ParseMemoryAmount(json("512MB")) == 512e6);
  CHECK(*ParseMemoryAmount(json("512Mi")) == 512.0 * 1024 * 1024);
  CHECK(*ParseMemoryAmount(json("1.5G")) == 1.5e9);
  CHECK(*ParseMemoryAmount(json("1.5 gib")) == 1.5 * 1024 * 1024 * 1024);
  CHECK(*ParseMemoryAmount(json("1024")) == 1024);
  CHECK(*ParseMemoryAmount(json("100b")) == 100);
  CHECK(*ParseMemoryAmount(json(4096)) == 4096);
  CHECK(*ParseMemoryAmount(json(1000.7)) == 1000);
  CHECK(*ParseMemoryAmount(json("0")) == 0);
  for (const char* bad : {"", "lots", "-1GiB", "1..5G", "2 XB", "1e9", "GiB", "0x10", "inf", "nan",
                          "1 G B", "2GiBs"}) {
    INFO(bad);
    auto r = ParseMemoryAmount(json(bad));
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Status::Code::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Contains("\"2GiB\""));
  }
  CHECK_FALSE(ParseMemoryAmount(json(-1)).ok());
  CHECK_FALSE(ParseMemoryAmount(json(true)).ok());
  CHECK_FALSE(ParseMemoryAmount(json::object()).ok());
  CHECK_FALSE(ParseMemoryAmount(json("99999999999P")).ok());
  CHECK_FALSE(ParseMemoryAmount(json(1e300)).ok());

  ExpectError(With("/scaling_config/resources_per_worker/memory", "2 gigs"),
              "scaling_config.resources_per_worker.memory", "got \"2 gigs\"");
  ExpectError(With("/scaling_config/resources_per_worker/memory", -5),
              "scaling_config.resources_per_worker.memory", "number of bytes");
  ExpectError(With("/scaling_config/resources_per_worker/Memory", "1G"),
              "scaling_config.resources_per_worker.Memory", "did you mean memory?");
}

TEST_CASE("placement strategy") {
  CHECK(MustParse(With("/scaling_config/placement_strategy", "STRICT_PACK")).placement_strategy ==
        PlacementStrategy::kStrictPack);
  ExpectError(With("/scaling_config/placement_strategy", "pack"),
              "scaling_config.placement_strategy", "did you mean PACK?");
  ExpectError(With("/scaling_config/placement_strategy", "DENSE"),
              "scaling_config.placement_strategy",
              "must be one of PACK, SPREAD, STRICT_PACK, STRICT_SPREAD, got \"DENSE\"");
  ExpectError(With("/scaling_config/placement_strategy", 3), "scaling_config.placement_strategy",
              "got 3");
  for (auto s : {PlacementStrategy::kPack, PlacementStrategy::kSpread,
                 PlacementStrategy::kStrictPack, PlacementStrategy::kStrictSpread}) {
    CHECK(PlacementStrategyFromName(PlacementStrategyName(s)) == s);
  }
  CHECK_FALSE(PlacementStrategyFromName("spread").has_value());
}

TEST_CASE("scaling_config.num_workers: a size, or an elastic {min, max}") {
  JobSpec fixed = MustParse(With("/scaling_config/num_workers", 3));
  CHECK(fixed.num_workers == 3);
  CHECK(!fixed.elastic());
  JobSpec e = MustParse(With("/scaling_config/num_workers", json{{"min", 2}, {"max", 4}}));
  CHECK(e.num_workers == 4);
  CHECK(e.min_workers == 2);
  CHECK(e.elastic());
  CHECK(JobSpecToJson(e)["scaling_config"]["num_workers"] == json{{"min", 2}, {"max", 4}});
  CHECK(MustParse(JobSpecToJson(e)) == e);
  CHECK(!MustParse(With("/scaling_config/num_workers", json{{"min", 3}, {"max", 3}})).elastic());
  ExpectError(With("/scaling_config/num_workers", json{{"min", 3}, {"max", 2}}),
              "scaling_config.num_workers.max", "must be >= min (3), got 2");
  ExpectError(With("/scaling_config/num_workers", json{{"max", 2}}),
              "scaling_config.num_workers.min", "is required");
  ExpectError(With("/scaling_config/num_workers", json{{"min", 0}, {"max", 2}}),
              "scaling_config.num_workers.min", "must be an integer >= 1");
  ExpectError(With("/scaling_config/use_gpu", true,
                   With("/scaling_config/num_workers", json{{"min", 1}, {"max", 2}})),
              "scaling_config.num_workers", "CPU (Gloo)");
  ExpectError(With("/scaling_config/num_workers", json{{"min", 1}, {"max", 2}, {"most", 3}}),
              "scaling_config.num_workers.most", "has: min, max");
}

TEST_CASE("run_config fields") {
  ExpectError(With("/run_config/storage_path", "results"), "run_config.storage_path",
              "absolute directory path");
  ExpectError(With("/run_config/storage_path", ""), "run_config.storage_path", "absolute");
  ExpectError(With("/run_config/checkpoint_config/num_to_keep", 0),
              "run_config.checkpoint_config.num_to_keep", "must be an integer >= 1");
  ExpectError(With("/run_config/checkpoint_config/checkpoint_score_order", "asc"),
              "run_config.checkpoint_config.checkpoint_score_order",
              "must be \"min\" or \"max\", got \"asc\"");
  ExpectError(With("/run_config/checkpoint_config/checkpoint_score_attribute", ""),
              "run_config.checkpoint_config.checkpoint_score_attribute", "metric");
  ExpectError(With("/run_config/failure_config/max_failures", -2),
              "run_config.failure_config.max_failures", "must be -1 (unlimited restarts)");
  ExpectError(With("/run_config/failure_config/max_failures", "3"),
              "run_config.failure_config.max_failures", "got \"3\"");
  CHECK(MustParse(With("/run_config/failure_config/max_failures", -1)).max_failures == -1);
  CHECK(MustParse(With("/run_config/failure_config/max_failures", 100)).max_failures == 100);

  // peer_recovery: a boolean, with a budget of replacements, for library entry points.
  const json recovering = With("/run_config/failure_config/max_failures", 2);
  CHECK(
      MustParse(With("/run_config/failure_config/peer_recovery", true, recovering)).peer_recovery);
  CHECK_FALSE(MustParse(recovering).peer_recovery);
  ExpectError(With("/run_config/failure_config/peer_recovery", "yes", recovering),
              "run_config.failure_config.peer_recovery", "got \"yes\"");
  ExpectError(With("/run_config/failure_config/peer_recovery", true),
              "run_config.failure_config.peer_recovery", "needs max_failures -1 or >= 1");
  json command = With("/run_config/failure_config/peer_recovery", true, recovering);
  command["entrypoint"] = {{"command", {"python3", "train.py"}}, {"working_dir", "."}};
  ExpectError(command, "run_config.failure_config.peer_recovery", "library and python");
  ExpectError(With("/scaling_config/use_gpu", true,
                   With("/run_config/failure_config/peer_recovery", true, recovering)),
              "run_config.failure_config.peer_recovery", "CPU (Gloo)");
  // It round-trips through the stored JSON.
  JobSpec a = MustParse(With("/run_config/failure_config/peer_recovery", true, recovering));
  CHECK(MustParse(JobSpecToJson(a)).peer_recovery);
}

TEST_CASE("datasets") {
  auto ds = [](json d) { return With("/datasets/train", std::move(d)); };
  ExpectError(ds({{"uri", "s3://bucket/x.csv"}}), "datasets.train.uri",
              "must be a file://, http:// or https:// URI, got \"s3://bucket/x.csv\"");
  ExpectError(ds({{"uri", "/data/x.csv"}}), "datasets.train.uri", "file://");
  ExpectError(ds({{"uri", "file://data/x.csv"}}), "datasets.train.uri", "absolute path");
  ExpectError(ds({{"uri", "http:///x.csv"}}), "datasets.train.uri", "must name a host");
  ExpectError(ds({{"uri", "file:///a b.csv"}}), "datasets.train.uri", "spaces");
  ExpectError(ds(json::object()), "datasets.train.uri", "is required");
  ExpectError(ds("file:///x.csv"), "datasets.train", "must be an object");
  ExpectError(ds({{"uri", "file:///x"}, {"format", "xls"}}), "datasets.train.format",
              "must be one of csv, jsonl, npy, parquet (or null to infer it), got \"xls\"");
  ExpectError(ds({{"uri", "file:///x"}, {"format", "jsnl"}}), "datasets.train.format",
              "did you mean jsonl?");
  ExpectError(ds({{"uri", "file:///x"}, {"split", "yes"}}), "datasets.train.split",
              "true or false");
  ExpectError(With("/datasets/a b", {{"uri", "file:///x"}}), "datasets[\"a b\"]", "dataset names");
  JobSpec s = MustParse(ds({{"uri", "file://localhost/x.npy"}, {"split", false}}));
  CHECK_FALSE(s.datasets.at("train").split);
  CHECK(
      MustParse(With("/datasets/my.data", {{"uri", "http://h/x?y=1"}})).datasets.count("my.data") ==
      1);
}

TEST_CASE("datasets: inline items, as ray.data.from_items") {
  auto ds = [](json d) { return With("/datasets/train", std::move(d)); };
  JobSpec s = MustParse(ds({{"items", json::array({{{"x", 1}}, 7, "a"})}}));
  const DatasetSpec& d = s.datasets.at("train");
  CHECK(d.uri.empty());
  CHECK(d.format == "jsonl");
  CHECK(d.split);
  CHECK(d.items == json::array({{{"x", 1}}, {{"item", 7}}, {{"item", "a"}}}));
  // The stored definition (resubmit) and the spec's JSON keep them.
  auto back = JobDefinitionFromJson(JobDefinitionToJson(s));
  REQUIRE(back.ok());
  CHECK(*back == s);
  CHECK(JobSpecToJson(s)["datasets"]["train"]["items"] == d.items);
  CHECK(MustParse(JobSpecToJson(s)) == s);

  ExpectError(ds({{"items", json::array()}}), "datasets.train.items", "non-empty array");
  ExpectError(ds({{"items", "x"}}), "datasets.train.items", "non-empty array");
  ExpectError(ds({{"items", json::array({1})}, {"uri", "file:///x.csv"}}), "datasets.train.items",
              "either \"uri\" or \"items\", not both");
  ExpectError(ds({{"items", json::array({1})}, {"format", "npy"}}), "datasets.train.format",
              "must be jsonl or null for inline items");
  ExpectError(ds({{"items", json(std::vector<int>(kMaxInlineItems + 1, 0))}}),
              "datasets.train.items", "at most 10000 fit in a job spec");
  ExpectError(ds({{"items", json::array({std::string(kMaxInlineItemsBytes, 'x')})}}),
              "datasets.train.items", "bytes as JSON; at most 262144");
}

TEST_CASE("datasets: parquet is accepted, given or inferred from .parquet / .pq") {
  auto ds = [](json d) { return With("/datasets/train", std::move(d)); };
  JobSpec given = MustParse(ds({{"uri", "file:///d/x.bin"}, {"format", "parquet"}}));
  CHECK(given.datasets.at("train").format == "parquet");
  for (const char* uri : {"file:///d/x.parquet", "file:///d/part-*.parquet",
                          "https://h/data/X.PARQUET?sig=1", "file:///d/x.pq"}) {
    INFO(uri);
    JobSpec s = MustParse(ds({{"uri", uri}}));
    CHECK(s.datasets.at("train").format.empty());  // inferred when read
    CHECK(InferDatasetFormat(s.datasets.at("train")) == "parquet");
    MustParse(ds({{"uri", uri}, {"format", nullptr}}));
  }
  // An explicit format wins over the extension.
  JobSpec s = MustParse(ds({{"uri", "file:///d/x.parquet"}, {"format", "csv"}}));
  CHECK(s.datasets.at("train").format == "csv");
  ExpectError(ds({{"uri", "file:///d/x"}, {"format", "parquett"}}), "datasets.train.format",
              "did you mean parquet?");
}

TEST_CASE("env") {
  ExpectError(With("/env/TRAINTL_X", "1"), "env.TRAINTL_X", "reserved");
  ExpectError(With("/env/TRAINTL_CONTEXT_FILE", "/x"), "env.TRAINTL_CONTEXT_FILE", "reserved");
  // The collectives' knobs are the job's to set.
  CHECK(MustParse(With("/env/TRAINTL_SHM_COLLECTIVES", "0")).env.at("TRAINTL_SHM_COLLECTIVES") ==
        "0");
  ExpectError(With("/env/1ABC", "1"), "env.1ABC", "[A-Za-z_][A-Za-z0-9_]*");
  ExpectError(With("/env/A-B", "1"), "env.A-B", "[A-Za-z_][A-Za-z0-9_]*");
  ExpectError(With("/env/A.B", "1"), "env[\"A.B\"]", "names must match");
  ExpectError(With("/env/OMP_NUM_THREADS", 1), "env.OMP_NUM_THREADS", "must be a string");
  ExpectError(With("/env/X", std::string("a\0b", 3)), "env.X", "NUL");
  CHECK(MustParse(With("/env/traintl_lower", "ok")).env.at("traintl_lower") == "ok");
  CHECK(MustParse(With("/env/_X1", "")).env.at("_X1").empty());
}

TEST_CASE("resume_from_checkpoint") {
  CHECK(MustParse(With("/resume_from_checkpoint", "/ckpt/dir")).resume_from_checkpoint ==
        "/ckpt/dir");
  CHECK(MustParse(With("/resume_from_checkpoint", "job:3f9c2a1b7d4e")).resume_from_checkpoint ==
        "job:3f9c2a1b7d4e");
  ExpectError(With("/resume_from_checkpoint", "relative/dir"), "resume_from_checkpoint",
              "\"job:<job id>\"");
  ExpectError(With("/resume_from_checkpoint", "job:XYZ"), "resume_from_checkpoint", "job:");
  ExpectError(With("/resume_from_checkpoint", "job:"), "resume_from_checkpoint", "job:");
  ExpectError(With("/resume_from_checkpoint", 12), "resume_from_checkpoint", "got 12");
}

TEST_CASE("train_loop_config: any object, deep nesting is user data") {
  json deep = json::object();
  json* cur = &deep;
  for (int i = 0; i < 90; ++i) cur = &((*cur)["k"] = json::object());
  JobSpec s = MustParse(With("/train_loop_config", deep));
  CHECK(s.train_loop_config == deep);
  CHECK(MustParse(JobSpecToJson(s)) == s);
  // Also through text.
  REQUIRE(ParseJobSpecText(With("/train_loop_config", deep).dump()).ok());

  ExpectError(With("/train_loop_config", json::array({1, 2})), "train_loop_config",
              "must be an object");
  ExpectError(With("/train_loop_config", nullptr), "train_loop_config", "got null");
  ExpectError(With("/train_loop_config", "lr=1"), "train_loop_config", "must be an object");
}

TEST_CASE("run_config.time_limit_s: seconds, absent by default, kept through the definition") {
  JobSpec d = MustParse(Minimal());
  CHECK(d.time_limit_s == 0);
  CHECK_FALSE(traintl::JobSpecToJson(d)["run_config"].contains("time_limit_s"));
  CHECK_FALSE(traintl::JobDefinitionToJson(d).contains("time_limit_s"));
  json doc = Minimal();
  doc["run_config"]["time_limit_s"] = 90.5;
  JobSpec s = MustParse(doc);
  CHECK(s.time_limit_s == 90.5);
  CHECK(MustParse(traintl::JobSpecToJson(s)) == s);
  CHECK(*traintl::JobDefinitionFromJson(traintl::JobDefinitionToJson(s)) == s);
  doc["run_config"]["time_limit_s"] = nullptr;
  CHECK(MustParse(doc).time_limit_s == 0);
  for (json bad : {json(0), json(-5), json("1h"), json(1e9)}) {
    doc["run_config"]["time_limit_s"] = bad;
    ExpectError(doc, "run_config.time_limit_s", "seconds in (0, 31536000]");
  }
}

TEST_CASE("failure_config: restart backoff fields, defaults and the delay formula") {
  JobSpec d = MustParse(Minimal());
  CHECK(d.restart_backoff_s == traintl::kDefaultRestartBackoffS);
  CHECK(d.max_restart_backoff_s == traintl::kDefaultMaxRestartBackoffS);
  // Defaults are not written back, so older readers of a stored spec still parse it.
  CHECK_FALSE(
      traintl::JobSpecToJson(d)["run_config"]["failure_config"].contains("restart_backoff_s"));
  json doc = Minimal();
  doc["run_config"]["failure_config"] = {
      {"max_failures", 3}, {"restart_backoff_s", 0.5}, {"max_restart_backoff_s", 4}};
  JobSpec s = MustParse(doc);
  CHECK(s.restart_backoff_s == 0.5);
  CHECK(s.max_restart_backoff_s == 4);
  CHECK(MustParse(traintl::JobSpecToJson(s)) == s);
  doc["run_config"]["failure_config"]["restart_backoff_s"] = -1;
  ExpectError(doc, "run_config.failure_config.restart_backoff_s", "seconds in [0, 86400]");
  doc["run_config"]["failure_config"]["restart_backoff_s"] = "1s";
  ExpectError(doc, "run_config.failure_config.restart_backoff_s", "seconds");

  using traintl::RestartBackoffSeconds;
  CHECK(RestartBackoffSeconds(1, 60, 0) == 0);
  CHECK(RestartBackoffSeconds(1, 60, 1) == 0);  // the first restart is immediate
  CHECK(RestartBackoffSeconds(1, 60, 2) == 1);
  CHECK(RestartBackoffSeconds(1, 60, 3) == 2);
  CHECK(RestartBackoffSeconds(1, 60, 5) == 8);
  CHECK(RestartBackoffSeconds(1, 60, 9) == 60);  // capped
  CHECK(RestartBackoffSeconds(1, 60, 5000) == 60);
  CHECK(RestartBackoffSeconds(0, 60, 9) == 0);  // disabled
}
