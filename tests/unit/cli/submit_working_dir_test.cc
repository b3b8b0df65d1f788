// submit of python and command jobs: the working_dir is checked (module, syntax, function,
// script), packed deterministically and uploaded once, and the job posted with
// working_dir_sha256; each refusal names the spec field before any request.

#include <unistd.h>

#include <catch2/catch.hpp>

#include "cli/exit_codes.h"
#include "cli/verbs.h"
#include "common/code_archive.h"
#include "scripted_client.h"
#include "test_util.h"

using namespace traintl::cli;
using namespace traintl::cli::testing;
using nlohmann::json;
using traintl::Result;
using traintl::Status;

namespace {

ScriptedClient NoNetwork() {
  return ScriptedClient([](const HttpRequest& r) -> Result<HttpResponse> {
    FAIL("unexpected request " << r.method << " " << r.target);
    return Status::Internal("unreachable");
  });
}

ScriptedClient Accepting() {
  return ScriptedClient([](const HttpRequest& r) -> Result<HttpResponse> {
    if (r.method == "HEAD") return Json(404, "");
    if (r.method == "PUT") return Json(201, R"({"sha256":"x","size":1})");
    return Json(201, R"({"job_id":"abcdefabcdef","state":"PENDING"})");
  });
}

std::string WriteJob(const TempDir& dir, json entrypoint) {
  return dir.Write("job.json", json{{"name", "py"}, {"entrypoint", std::move(entrypoint)}}.dump(2));
}

// Runs submit; returns its exit code, with stderr in *err.
int Submit(ScriptedClient& client, const std::string& spec, std::string* err) {
  TestContext t(&client);
  SubmitOptions o;
  o.spec_path = spec;
  int code = RunSubmit(o, t.ctx);
  *err = t.err.str();
  return code;
}

}  // namespace

TEST_CASE("a python job's working_dir is packed, uploaded and named by its sha256") {
  TempDir dir;
  dir.Write("src/train.py", "import os\n\ndef train_fn(config):\n    pass\n");
  dir.Write("src/pkg/__init__.py", "");
  dir.Write("src/.gitignore", "*.bin\n");
  dir.Write("src/big.bin", "ignored");
  auto client = Accepting();
  std::string err;
  REQUIRE(
      Submit(client,
             WriteJob(dir, {{"python", "train:train_fn"}, {"working_dir", dir.path() + "/src"}}),
             &err) == kExitOk);
  auto packed = traintl::PackDirectory(dir.path() + "/src");
  REQUIRE(packed.ok());
  REQUIRE(client.requests.size() == 3);
  CHECK(client.requests[1].method == "PUT");
  CHECK(client.requests[1].target == "/v1/blobs/" + packed->sha256);
  CHECK(client.requests[1].body == packed->bytes);
  CHECK(client.requests[1].body.find("big.bin") == std::string::npos);
  json body = json::parse(client.requests[2].body);
  CHECK(body["working_dir_sha256"] == packed->sha256);
  CHECK(!body.contains("library_sha256"));
}

TEST_CASE("a python entry point that cannot work is refused at submit, naming the field") {
  TempDir dir;
  dir.Write("src/train.py", "def train_fn(config):\n    return 1\n");
  dir.Write("src/broken.py", "def train_fn(config)\n    pass\n");
  auto client = NoNetwork();
  std::string err;
  const std::string src = dir.path() + "/src";
  CHECK(Submit(client, WriteJob(dir, {{"python", "missing:train_fn"}, {"working_dir", src}}),
               &err) == kExitUsage);
  CHECK_THAT(err, Catch::Contains("entrypoint.python: no module missing in the working_dir") &&
                      Catch::Contains("missing.py or missing/__init__.py"));
  CHECK(Submit(client, WriteJob(dir, {{"python", "train:nope"}, {"working_dir", src}}), &err) ==
        kExitUsage);
  CHECK_THAT(err, Catch::Contains("entrypoint.python: module train defines no nope"));
  CHECK(Submit(client, WriteJob(dir, {{"python", "broken:train_fn"}, {"working_dir", src}}),
               &err) == kExitUsage);
  CHECK_THAT(err,
             Catch::Contains("broken does not compile: SyntaxError") && Catch::Contains("line 1"));
  CHECK(Submit(client, WriteJob(dir, {{"python", "train:train_fn"}, {"working_dir", src + "x"}}),
               &err) == kExitUsage);
  CHECK_THAT(err, Catch::Contains("entrypoint.working_dir: " + src + "x: no such directory"));
  CHECK(client.requests.empty());
}

TEST_CASE("a command's script must be in the working_dir, an escaping symlink is refused") {
  TempDir dir;
  dir.Write("src/train.py", "print(1)\n");
  const std::string src = dir.path() + "/src";
  auto client = NoNetwork();
  std::string err;
  CHECK(Submit(client, WriteJob(dir, {{"command", {"python3", "tain.py"}}, {"working_dir", src}}),
               &err) == kExitUsage);
  CHECK_THAT(err, Catch::Contains("entrypoint.command[1]: tain.py is not in the working_dir"));
  CHECK(Submit(client, WriteJob(dir, {{"command", {"./run.sh"}}, {"working_dir", src}}), &err) ==
        kExitUsage);
  CHECK_THAT(err, Catch::Contains("entrypoint.command[0]: ./run.sh is not in the working_dir"));

  REQUIRE(::symlink("/etc/passwd", (src + "/secrets").c_str()) == 0);
  CHECK(Submit(client, WriteJob(dir, {{"command", {"python3", "train.py"}}, {"working_dir", src}}),
               &err) == kExitUsage);
  CHECK_THAT(err, Catch::Contains("cannot pack entrypoint.working_dir") &&
                      Catch::Contains("secrets") && Catch::Contains("/etc/passwd"));
  CHECK(client.requests.empty());
}
