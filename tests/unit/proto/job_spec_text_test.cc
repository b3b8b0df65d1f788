// Parsing untrusted text: depth limits, syntax errors, duplicate keys, oversized input
// (ParseJobSpecText, ParseJsonStrict).
#include <catch2/catch.hpp>
#include <string>

#include "proto/job_spec.h"
#include "tests/unit/proto/job_spec_test_util.h"

using namespace traintl;
using namespace traintl::spec_testing;
using json = nlohmann::json;

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
