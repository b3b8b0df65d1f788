// Helpers of the job spec tests: the DESIGN example, a minimal spec to vary, and
// expectations on parse results.
//
// Thread-safety: plain functions, for the test thread.
#pragma once

#include <catch2/catch.hpp>
#include <string>
#include <utility>

#include "proto/job_spec.h"

namespace traintl::spec_testing {

using json = nlohmann::json;

// The example of DESIGN §3, verbatim.
inline const char* const kDesignExample = R"({
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
inline json Example(bool use_gpu = true) {
  json doc = json::parse(kDesignExample);
  doc["scaling_config"]["use_gpu"] = use_gpu;
  return doc;
}

inline json Minimal() { return json{{"name", "j"}, {"entrypoint", {{"library", "/lib/libt.so"}}}}; }

// Minimal() with the value at JSON pointer `ptr` set to `v` (parents are created).
inline json With(const std::string& ptr, json v, json doc = Minimal()) {
  doc[json::json_pointer(ptr)] = std::move(v);
  return doc;
}

// Expects `doc` to be refused at `field` with a message containing `fragment`.
inline void ExpectError(const json& doc, const std::string& field, const std::string& fragment) {
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

inline JobSpec MustParse(const json& doc) {
  SpecError err;
  auto r = ParseJobSpec(doc, &err);
  INFO("doc: " << doc.dump() << "\nerror: " << err.ToString());
  REQUIRE(r.ok());
  return *r;
}

// A chain of `depth` nested arrays, built without recursion.
inline json DeepArray(int depth) {
  json j = 1;
  for (int i = 0; i < depth; ++i) {
    json next = json::array();
    next.push_back(std::move(j));
    j = std::move(next);
  }
  return j;
}

}  // namespace traintl::spec_testing
