// ParseJobSpec: the three kinds of entry point (library, python, command), working_dir and
// excludes, and the top-level framework (DESIGN §8); their canonical JSON and definition.
#include <catch2/catch.hpp>
#include <string>

#include "proto/job_definition.h"
#include "proto/job_spec.h"
#include "tests/unit/proto/job_spec_test_util.h"

using namespace traintl;
using namespace traintl::spec_testing;
using json = nlohmann::json;

namespace {

json WithEntry(json entrypoint) {
  json doc = Minimal();
  doc["entrypoint"] = std::move(entrypoint);
  return doc;
}

}  // namespace

TEST_CASE("entrypoint.python: module:function with a working_dir") {
  JobSpec s = MustParse(WithEntry({{"python", "pkg.train:train_fn"},
                                   {"working_dir", "./src"},
                                   {"excludes", {"data/", "*.ckpt"}}}));
  CHECK(s.entry_kind == EntrypointKind::kPython);
  CHECK(s.python == "pkg.train:train_fn");
  CHECK(s.working_dir == "./src");
  CHECK(s.excludes == std::vector<std::string>{"data/", "*.ckpt"});
  CHECK(s.library.empty());
  CHECK(MustParse(JobSpecToJson(s)) == s);
  auto back = JobDefinitionFromJson(JobDefinitionToJson(s));
  REQUIRE(back.ok());
  CHECK(*back == s);
  CHECK(JobDefinitionToJson(s)["version"] == 2);

  // No working_dir: the module must be importable as the node's Python finds it.
  CHECK(MustParse(WithEntry({{"python", "train:main"}})).working_dir.empty());

  for (const char* bad : {"train", "train:", ":fn", "a..b:fn", "a.b:fn:g", "1mod:fn", "m:f-n",
                          "my-mod:fn", "a/b:fn"}) {
    INFO(bad);
    ExpectError(WithEntry({{"python", bad}}), "entrypoint.python", "\"module:function\"");
  }
  ExpectError(WithEntry({{"python", 3}}), "entrypoint.python", "\"module:function\"");
  ExpectError(WithEntry({{"python", "t:f"}, {"function", "f"}}), "entrypoint.function",
              "\"python\": \"module:function\"");
  ExpectError(WithEntry({{"python", "t:f"}, {"working_dir", ""}}), "entrypoint.working_dir",
              "path of a directory");
  ExpectError(WithEntry({{"python", "t:f"}, {"excludes", {"x"}}}), "entrypoint.excludes",
              "none is given");
  ExpectError(WithEntry({{"python", "t:f"}, {"working_dir", "d"}, {"excludes", "x"}}),
              "entrypoint.excludes", "array of .gitignore-style patterns");
  ExpectError(WithEntry({{"python", "t:f"}, {"working_dir", "d"}, {"excludes", {1}}}),
              "entrypoint.excludes[0]", "must be a string");
}

TEST_CASE("entrypoint.command: an argv of strings") {
  JobSpec s = MustParse(
      WithEntry({{"command", {"python3", "train.py", "--epochs", "3"}}, {"working_dir", "src"}}));
  CHECK(s.entry_kind == EntrypointKind::kCommand);
  CHECK(s.command == std::vector<std::string>{"python3", "train.py", "--epochs", "3"});
  CHECK(MustParse(JobSpecToJson(s)) == s);
  auto back = JobDefinitionFromJson(JobDefinitionToJson(s));
  REQUIRE(back.ok());
  CHECK(*back == s);

  ExpectError(WithEntry({{"command", json::array()}}), "entrypoint.command", "non-empty array");
  ExpectError(WithEntry({{"command", "python3 train.py"}}), "entrypoint.command",
              "non-empty array of strings");
  ExpectError(WithEntry({{"command", {""}}}), "entrypoint.command[0]", "name the program");
  ExpectError(WithEntry({{"command", {"python3", 3}}}), "entrypoint.command[1]",
              "must be a string");
  json many = json::array();
  for (size_t i = 0; i <= kMaxCommandArgs; ++i) many.push_back("x");
  ExpectError(WithEntry({{"command", many}}), "entrypoint.command", "too many arguments");
  ExpectError(WithEntry({{"command", {"a", std::string(kMaxCommandBytes, 'x')}}}),
              "entrypoint.command", "too long");
  ExpectError(WithEntry({{"command", {"a"}}, {"function", "f"}}), "entrypoint.function",
              "not a command");
}

TEST_CASE("entrypoint: exactly one kind") {
  ExpectError(WithEntry(json::object()), "entrypoint", "needs one of");
  ExpectError(WithEntry({{"library", "/l.so"}, {"python", "t:f"}}), "entrypoint",
              "exactly one of library, python or command");
  ExpectError(WithEntry({{"python", "t:f"}, {"command", {"x"}}}), "entrypoint", "exactly one of");
  ExpectError(WithEntry({{"library", "/l.so"}, {"working_dir", "src"}}), "entrypoint.working_dir",
              "not to a library");
  ExpectError(WithEntry({{"pyhton", "t:f"}}), "entrypoint.pyhton", "did you mean python?");
  // A library spec's canonical form and definition are what they always were.
  JobSpec lib = MustParse(Minimal());
  CHECK(lib.entry_kind == EntrypointKind::kLibrary);
  CHECK(!JobSpecToJson(lib)["entrypoint"].contains("working_dir"));
  CHECK(!JobSpecToJson(lib).contains("framework"));
  CHECK(JobDefinitionToJson(lib)["version"] == 1);
}

TEST_CASE("framework: torch, tensorflow or xgboost") {
  json doc = WithEntry({{"command", {"python3", "t.py"}}});
  doc["framework"] = "tensorflow";
  JobSpec s = MustParse(doc);
  CHECK(s.framework == "tensorflow");
  CHECK(MustParse(JobSpecToJson(s)) == s);
  auto back = JobDefinitionFromJson(JobDefinitionToJson(s));
  REQUIRE(back.ok());
  CHECK(back->framework == "tensorflow");

  doc["framework"] = "tensorflw";
  ExpectError(doc, "framework", "did you mean tensorflow?");
  doc["framework"] = "xgbost";
  ExpectError(doc, "framework", "did you mean xgboost?");
  doc["framework"] = 1;
  ExpectError(doc, "framework", "must be \"torch\", \"tensorflow\" or \"xgboost\"");
  json lib = Minimal();
  lib["framework"] = "tensorflow";
  ExpectError(lib, "framework", "not to a C++ library");
  lib["framework"] = "torch";
  CHECK(MustParse(lib).framework == "torch");
  lib["framework"] = "xgboost";
  CHECK(MustParse(lib).framework == "xgboost");
}

TEST_CASE("job definition: a version 2 record with an unknown kind is refused") {
  JobSpec s = MustParse(WithEntry({{"python", "t:f"}}));
  json d = JobDefinitionToJson(s);
  d["entrypoint"]["kind"] = "wasm";
  auto r = JobDefinitionFromJson(d);
  REQUIRE(!r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("entrypoint.kind"));
  d["version"] = 3;
  CHECK(!JobDefinitionFromJson(d).ok());
}
