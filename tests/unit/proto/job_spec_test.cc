#include <catch2/catch.hpp>
#include <string>

#include "proto/job_spec.h"

using namespace traintl;
using json = nlohmann::json;

namespace {

// The example of DESIGN §3, verbatim.
const char* kDesignExample = R"({
  "name": "digits-ddp",
  "entrypoint": {"library": "build/examples/libdigits_train.so", "function": "train_loop"},
  "train_loop_config": {"lr": 0.001, "epochs": 20},
  "scaling_config": {
    "num_workers": 2,
    "use_gpu": false,
    "resources_per_worker": {"CPU": 1, "GPU": 0.5, "memory": "2GiB", "my_custom": 1},
    "placement_strategy": "PACK"
  },
  "run_config": {
    "storage_path": "/shared/traintl-results",
    "checkpoint_config": {"num_to_keep": 3, "checkpoint_score_attribute": "loss",
                          "checkpoint_score_order": "min"},
    "failure_config": {"max_failures": 3}
  },
  "datasets": {
    "train": {"uri": "file:///data/digits/train-*.csv", "format": "csv", "split": true},
    "val":   {"uri": "file:///data/digits/val.csv", "split": false}
  },
  "env": {"OMP_NUM_THREADS": "1"},
  "priority": 0
})";

// A GPU variant of the example: the example itself asks for GPU 0.5 with use_gpu false,
// which Ray Train (and so traintl) refuses.
json Example(bool use_gpu = true) {
  json doc = json::parse(kDesignExample);
  doc["scaling_config"]["use_gpu"] = use_gpu;
  return doc;
}

json Minimal() { return json{{"name", "j"}, {"entrypoint", {{"library", "/lib/libt.so"}}}}; }

// Minimal() with the value at JSON pointer `ptr` set to `v` (parents are created).
json With(const std::string& ptr, json v, json doc = Minimal()) {
  doc[json::json_pointer(ptr)] = std::move(v);
  return doc;
}

// Expects `doc` to be refused at `field` with a message containing `fragment`.
void ExpectError(const json& doc, const std::string& field, const std::string& fragment) {
  SpecError err;
  auto r = ParseJobSpec(doc, &err);
  INFO("doc: " << doc.dump());
  REQUIRE_FALSE(r.ok());
  INFO("error: " << err.ToString());
  CHECK(r.status().code() == Status::Code::kInvalidArgument);
  CHECK(r.status().message() == err.ToString());
  CHECK(err.field == field);
  CHECK_THAT(err.message, Catch::Contains(fragment));
}

JobSpec MustParse(const json& doc) {
  SpecError err;
  auto r = ParseJobSpec(doc, &err);
  INFO("doc: " << doc.dump() << "\nerror: " << err.ToString());
  REQUIRE(r.ok());
  return *r;
}

// A chain of `depth` nested arrays, built without recursion.
json DeepArray(int depth) {
  json j = 1;
  for (int i = 0; i < depth; ++i) {
    json next = json::array();
    next.push_back(std::move(j));
    j = std::move(next);
  }
  return j;
}

}  // namespace

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
  CHECK(InferDatasetFormat(DatasetSpec{"file:///d/x", "", false}) == "");
  CHECK(InferDatasetFormat(DatasetSpec{"file:///d/x", "npy", false}) == "npy");
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
  ExpectError(With("/priority", 1099511627776LL), "priority", "must be a 32-bit integer");
  ExpectError(With("/scaling_config/num_workers", 1e300), "scaling_config.num_workers",
              "must be an integer >= 1");
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
  ExpectError(With("/entrypoint", json::object()), "entrypoint.library", "is required");
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
              "at most 4096");
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
              "must be one of csv, jsonl, npy (or null to infer it), got \"xls\"");
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

TEST_CASE("datasets: parquet is refused at submit, given or inferred") {
  const std::string why =
      "parquet is not supported by this build (no Arrow/Parquet in Debian 12); use csv, jsonl "
      "or npy";
  auto ds = [](json d) { return With("/datasets/train", std::move(d)); };
  SpecError err;
  REQUIRE_FALSE(ParseJobSpec(ds({{"uri", "file:///d/x.csv"}, {"format", "parquet"}}), &err).ok());
  CHECK(err.field == "datasets.train.format");
  CHECK(err.message == why);
  CHECK(err.ToString() == "datasets.train.format: " + why);
  // Inferred: the error names the URI, which is what the user wrote.
  for (const char* uri : {"file:///d/x.parquet", "file:///d/part-*.parquet",
                          "https://h/data/X.PARQUET?sig=1", "file:///d/x.pq"}) {
    INFO(uri);
    ExpectError(ds({{"uri", uri}}), "datasets.train.uri",
                "names Parquet files (the format is inferred from the extension): " + why);
    ExpectError(ds({{"uri", uri}, {"format", nullptr}}), "datasets.train.uri", why);
  }
  ExpectError(With("/datasets/my.data", {{"uri", "file:///d/x.parquet"}}),
              "datasets[\"my.data\"].uri", why);
  // An explicit supported format wins over the extension.
  JobSpec s = MustParse(ds({{"uri", "file:///d/x.parquet"}, {"format", "csv"}}));
  CHECK(s.datasets.at("train").format == "csv");
  // A near miss still gets the hint, which no longer offers parquet.
  ExpectError(ds({{"uri", "file:///d/x"}, {"format", "parquett"}}), "datasets.train.format",
              "did you mean parquet?");
}

TEST_CASE("env") {
  ExpectError(With("/env/TRAINTL_X", "1"), "env.TRAINTL_X", "reserved");
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

TEST_CASE("very deep documents are refused without crashing") {
  {
    // Not ExpectError: its INFO would dump (recursively) the deep document.
    SpecError err;
    auto r = ParseJobSpec(With("/train_loop_config/x", DeepArray(200000)), &err);
    REQUIRE_FALSE(r.ok());
    CHECK(err.field == "train_loop_config");
    CHECK_THAT(err.message, Catch::Contains("nested deeper than 100 levels"));
    // Exactly at the limit: the spec (1) + train_loop_config (2) + 98 more = 100.
    CHECK(ParseJobSpec(With("/train_loop_config/x", DeepArray(98))).ok());
    CHECK_FALSE(ParseJobSpec(With("/train_loop_config/x", DeepArray(99))).ok());
    // A deep member elsewhere is named too.
    r = ParseJobSpec(With("/env/X", DeepArray(1000)), &err);
    REQUIRE_FALSE(r.ok());
    CHECK(err.field == "env");
  }

  std::string text = R"({"name":"j","entrypoint":{"library":"/x.so"},"train_loop_config":{"x":)";
  text += std::string(1000000, '[') + std::string(1000000, ']') + "}}";
  SpecError err;
  auto r = ParseJobSpecText(text, &err);
  REQUIRE_FALSE(r.ok());
  CHECK(err.field == "train_loop_config");
  CHECK_THAT(err.message, Catch::Contains("nested deeper than 100 levels"));

  // Unbalanced too.
  r = ParseJobSpecText(std::string(1000000, '{'), &err);
  REQUIRE_FALSE(r.ok());
}

TEST_CASE("ParseJobSpecText: syntax errors name the byte offset") {
  SpecError err;
  auto r = ParseJobSpecText(R"({"name": "j", "entrypoint": tru})", &err);
  REQUIRE_FALSE(r.ok());
  CHECK(err.field == "");
  CHECK_THAT(err.message, Catch::Contains("invalid JSON at byte 32 (line 1, column 32)"));
  CHECK_THAT(err.message, Catch::Contains("line 1, column"));

  r = ParseJobSpecText("", &err);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(err.message, Catch::Contains("invalid JSON at byte"));

  r = ParseJobSpecText(R"({"name": 1e400})", &err);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(err.message, Catch::Contains("invalid JSON at byte"));

  r = ParseJobSpecText(R"({"name": "j"} trailing)", &err);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(err.message, Catch::Contains("invalid JSON at byte 17"));

  // Invalid UTF-8 inside a string.
  r = ParseJobSpecText("{\"name\": \"\xff\"}", &err);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(err.message, Catch::Contains("invalid JSON at byte 11"));
  // The message itself stays valid UTF-8 (it is sent back inside JSON).
  CHECK_NOTHROW(json(err.message).dump());

  // A valid document goes on to validation.
  r = ParseJobSpecText(R"({"name": "j", "entrypoint": {"library": "/x.so"}, "priority": "x"})",
                       &err);
  REQUIRE_FALSE(r.ok());
  CHECK(err.field == "priority");
  REQUIRE(ParseJobSpecText(kDesignExample, &err).ok());  // the DESIGN example as written
  REQUIRE(ParseJobSpecText(Example().dump(), &err).ok());
}

TEST_CASE("ParseJobSpecText: duplicate keys and oversized input are refused") {
  SpecError err;
  auto r = ParseJobSpecText(R"({"name":"j","entrypoint":{"library":"/x.so"},)"
                            R"("scaling_config":{"num_workers":1,"num_workers":2}})",
                            &err);
  REQUIRE_FALSE(r.ok());
  CHECK(err.field == "scaling_config.num_workers");
  CHECK_THAT(err.message, Catch::Contains("duplicate key"));

  r = ParseJobSpecText(R"({"name":"j","name":"k"})", &err);
  REQUIRE_FALSE(r.ok());
  CHECK(err.field == "name");

  auto j = ParseJsonStrict(R"({"a":[{"b":1},{"b":2,"b":3}]})", 10, 1000, &err);
  REQUIRE_FALSE(j.ok());
  CHECK(err.field == "a[1].b");

  std::string big = R"({"name":"j","entrypoint":{"library":"/x.so"},"train_loop_config":{"x":")";
  big += std::string(kMaxSpecTextBytes, 'a') + "\"}}";
  r = ParseJobSpecText(big, &err);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(err.message, Catch::Contains("larger than"));
}

TEST_CASE("ParseJsonStrict builds the same document as nlohmann") {
  const std::string text =
      R"({"a":[1,-2,3.5,"s",true,false,null,{"b":{}},[]],"c":{"d":[[1],[2,{"e":"\u00e9"}]]},)"
      R"("u":18446744073709551615})";
  auto j = ParseJsonStrict(text);
  REQUIRE(j.ok());
  CHECK(*j == json::parse(text));
  auto scalar = ParseJsonStrict("42");
  REQUIRE(scalar.ok());
  CHECK(*scalar == 42);
  // Depth limit is exact: 3 levels pass with max_depth 3, 4 do not.
  CHECK(ParseJsonStrict("[[[1]]]", 3).ok());
  CHECK_FALSE(ParseJsonStrict("[[[[1]]]]", 3).ok());
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
