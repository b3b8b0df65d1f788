// submit: spec and library errors, the upload protocol, and --wait progress/outcomes,
// against a scripted client.

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <deque>

#include "cli/exit_codes.h"
#include "cli/hash_cache.h"
#include "cli/verbs.h"
#include "common/crypto.h"
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

// A daemon that has no blobs and accepts every job as `job_id`.
ScriptedClient AcceptingDaemon(const std::string& job_id, std::deque<std::string>* details) {
  return ScriptedClient([=](const HttpRequest& r) -> Result<HttpResponse> {
    if (r.method == "HEAD") return Json(404, "");
    if (r.method == "PUT") return Json(201, R"({"sha256":"x","size":1})");
    if (r.method == "POST") return Json(201, R"({"job_id":")" + job_id + R"(","state":"PENDING"})");
    if (r.method == "GET" && details != nullptr && !details->empty()) {
      std::string body = details->front();
      if (details->size() > 1) details->pop_front();
      return Json(200, body);
    }
    return Json(500, R"({"error":"unexpected"})");
  });
}

std::string WriteJob(const TempDir& dir, const std::string& library_path) {
  return dir.Write("job.json", json{{"name", "demo"},
                                    {"entrypoint", {{"library", library_path}}},
                                    {"scaling_config", {{"num_workers", 2}}}}
                                   .dump(2));
}

}  // namespace

TEST_CASE("submit reports JSON syntax errors with line and column") {
  TempDir dir;
  std::string path = dir.Write("job.json", "{\n  \"name\": \"x\",\n  \"entrypoint\": {,}\n}\n");
  auto client = NoNetwork();
  TestContext t(&client);
  SubmitOptions o;
  o.spec_path = path;
  CHECK(RunSubmit(o, t.ctx) == kExitUsage);
  CHECK_THAT(t.err.str(), Catch::StartsWith("traintl: " + path + ":3:18: invalid JSON: "));
  CHECK_THAT(t.err.str(), Catch::Contains("syntax error"));
}

TEST_CASE("submit refuses duplicate keys naming the key, before reading the library") {
  TempDir dir;
  std::string path = dir.Write(
      "job.json", R"({"name": "a", "name": "b", "entrypoint": {"library": "/missing.so"}})");
  auto client = NoNetwork();
  TestContext t(&client);
  SubmitOptions o;
  o.spec_path = path;
  CHECK(RunSubmit(o, t.ctx) == kExitUsage);
  CHECK_THAT(t.err.str(), Catch::StartsWith("traintl: " + path + ": invalid job spec: name: "));
  CHECK_THAT(t.err.str(), Catch::Contains("duplicate"));
  CHECK_THAT(t.err.str(), !Catch::Contains("missing.so"));
}

// It used to parse without a limit and overflow the stack dumping the spec to send it.
TEST_CASE("submit refuses a spec nested deeper than the daemon allows, without crashing") {
  TempDir dir;
  const int kDeep = 100000;
  std::string path = dir.Write(
      "job.json", R"({"name":"x","entrypoint":{"library":"lib.so"},"train_loop_config":{"a":)" +
                      std::string(kDeep, '[') + std::string(kDeep, ']') + "}}");
  auto client = NoNetwork();
  TestContext t(&client);
  SubmitOptions o;
  o.spec_path = path;
  CHECK(RunSubmit(o, t.ctx) == kExitUsage);
  CHECK_THAT(t.err.str(), Catch::Contains("nested deeper than 100 levels"));
}

TEST_CASE("submit rejects unreadable specs and libraries before any request") {
  TempDir dir;
  auto client = NoNetwork();
  SubmitOptions o;
  SECTION("missing spec file") {
    TestContext t(&client);
    o.spec_path = dir.path() + "/nope.json";
    CHECK(RunSubmit(o, t.ctx) == kExitUsage);
    CHECK_THAT(t.err.str(), Catch::Contains("cannot read the job spec"));
  }
  SECTION("not an object") {
    TestContext t(&client);
    o.spec_path = dir.Write("job.json", "[1]");
    CHECK(RunSubmit(o, t.ctx) == kExitUsage);
    CHECK_THAT(t.err.str(), Catch::Contains("must be a JSON object"));
  }
  SECTION("an entrypoint without a kind") {
    TestContext t(&client);
    o.spec_path = dir.Write("job.json", R"({"name":"x","entrypoint":{}})");
    CHECK(RunSubmit(o, t.ctx) == kExitUsage);
    CHECK_THAT(t.err.str(), Catch::StartsWith("traintl: " + o.spec_path +
                                              ": invalid job spec: entrypoint: needs one of "));
  }
  SECTION("an invalid spec is refused before its library is read, naming the field") {
    TestContext t(&client);
    // The library is a FIFO: reading it would block, so the spec must be refused first.
    const std::string fifo = dir.path() + "/libfifo.so";
    REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
    o.spec_path = dir.Write("job.json", R"({"name":"x","entrypoint":{"library":")" + fifo +
                                            R"("},"scaling_config":{"num_workers":0}})");
    CHECK(RunSubmit(o, t.ctx) == kExitUsage);
    CHECK_THAT(t.err.str(), Catch::Contains("invalid job spec: scaling_config.num_workers"));
  }
  SECTION("library missing") {
    TestContext t(&client);
    o.spec_path = WriteJob(dir, dir.path() + "/libmissing.so");
    CHECK(RunSubmit(o, t.ctx) == kExitUsage);
    CHECK_THAT(t.err.str(), Catch::Contains("cannot read the training library"));
    CHECK_THAT(t.err.str(), Catch::Contains("no such file"));
  }
  SECTION("a relative library is resolved against the cwd, with a hint") {
    TestContext t(&client);
    dir.Write("specs/libtrain.so", "elf");
    o.spec_path = dir.path() + "/specs/job.json";
    dir.Write("specs/job.json", R"({"name":"x","entrypoint":{"library":"libtrain.so"}})");
    char old_cwd[4096];
    REQUIRE(getcwd(old_cwd, sizeof(old_cwd)) != nullptr);
    REQUIRE(chdir(dir.path().c_str()) == 0);
    int code = RunSubmit(o, t.ctx);
    REQUIRE(chdir(old_cwd) == 0);
    CHECK(code == kExitUsage);
    CHECK_THAT(t.err.str(), Catch::Contains("resolved as " + dir.path() + "/libtrain.so"));
    CHECK_THAT(t.err.str(), Catch::Contains("Did you mean " + dir.path() + "/specs/libtrain.so?"));
  }
}

TEST_CASE("submit uploads a missing blob, then posts the job") {
  TempDir dir;
  std::string lib = dir.Write("libtrain.so", std::string("\x7f"
                                                         "ELF fake library",
                                                         17));
  std::string sha =
      traintl::Sha256Hex(std::string("\x7f"
                                     "ELF fake library",
                                     17));
  auto client = AcceptingDaemon("abcdefabcdef", nullptr);
  TestContext t(&client);
  SubmitOptions o;
  o.spec_path = WriteJob(dir, lib);
  REQUIRE(RunSubmit(o, t.ctx) == kExitOk);
  CHECK(t.out.str() == "abcdefabcdef\n");
  REQUIRE(client.requests.size() == 3);
  CHECK(client.requests[0].method == "HEAD");
  CHECK(client.requests[0].target == "/v1/blobs/" + sha);
  CHECK(client.requests[1].method == "PUT");
  CHECK(client.requests[1].target == "/v1/blobs/" + sha);
  CHECK(client.requests[1].body == std::string("\x7f"
                                               "ELF fake library",
                                               17));
  CHECK(client.requests[2].method == "POST");
  CHECK(client.requests[2].target == "/v1/jobs");
  json body = json::parse(client.requests[2].body);
  CHECK(body["library_sha256"] == sha);
  CHECK(body["spec"]["entrypoint"]["library"] == lib);
  CHECK(body["spec"]["name"] == "demo");
  CHECK(traintl::IsSha256Hex(body["submission_id"].get<std::string>() +
                             body["submission_id"].get<std::string>()));
}

TEST_CASE("submit skips the upload when the daemon has the blob, and retries the POST") {
  TempDir dir;
  std::string lib = dir.Write("libtrain.so", "bytes");
  int posts = 0;
  ScriptedClient client([&](const HttpRequest& r) -> Result<HttpResponse> {
    if (r.method == "HEAD") return Json(200, "");
    if (r.method == "POST") {
      if (++posts == 1) return Status::Internal("reading the response failed: end of stream");
      return Json(201, R"({"job_id":"abcdefabcdef","state":"PENDING"})");
    }
    return Json(500, "{}");
  });
  TestContext t(&client);
  t.ctx.json = true;
  SubmitOptions o;
  o.spec_path = WriteJob(dir, lib);
  REQUIRE(RunSubmit(o, t.ctx) == kExitOk);
  REQUIRE(client.requests.size() == 3);
  CHECK(client.requests[1].method == "POST");
  CHECK(client.requests[2].method == "POST");
  // The retry carries the same idempotency key.
  CHECK(json::parse(client.requests[1].body)["submission_id"] ==
        json::parse(client.requests[2].body)["submission_id"]);
  CHECK(json::parse(t.out.str()) == json::parse(R"({"job_id":"abcdefabcdef","state":"PENDING"})"));
}

TEST_CASE("submit maps a rejected spec to a field message") {
  TempDir dir;
  std::string lib = dir.Write("libtrain.so", "bytes");
  ScriptedClient client([&](const HttpRequest& r) -> Result<HttpResponse> {
    if (r.method == "HEAD") return Json(200, "");
    return Json(400, R"({"error":"must be at least 1","field":"scaling_config.num_workers"})");
  });
  TestContext t(&client);
  SubmitOptions o;
  o.spec_path = WriteJob(dir, lib);
  CHECK(RunSubmit(o, t.ctx) == kExitUsage);
  CHECK(t.err.str() ==
        "traintl: invalid job spec: scaling_config.num_workers: must be at least 1\n");
  CHECK(t.out.str().empty());
}

TEST_CASE("a daemon message that already names the field prints the path once") {
  TempDir dir;
  std::string lib = dir.Write("libtrain.so", "bytes");
  ScriptedClient client([&](const HttpRequest& r) -> Result<HttpResponse> {
    if (r.method == "HEAD") return Json(200, "");
    json body = {{"error", "scaling_config.num_worker: unknown field (did you mean num_workers?)"},
                 {"field", "scaling_config.num_worker"}};
    return Json(400, body.dump());
  });
  TestContext t(&client);
  SubmitOptions o;
  o.spec_path = WriteJob(dir, lib);
  CHECK(RunSubmit(o, t.ctx) == kExitUsage);
  CHECK(t.err.str() ==
        "traintl: invalid job spec: scaling_config.num_worker: unknown field (did you mean "
        "num_workers?)\n");
}

namespace {

json Detail(const std::string& state, int attempt) {
  return json{{"job_id", "abcdefabcdef"},
              {"name", "demo"},
              {"state", state},
              {"attempt", attempt},
              {"num_workers", 2},
              {"submitted_at", kT0},
              {"started_at", attempt > 0 ? json(kT0 + 1000) : json()},
              {"ended_at", nullptr},
              {"message", ""},
              {"pending_reason", ""},
              {"metrics", json::object()},
              {"max_failures", 2},
              {"failures", 0},
              {"latest_checkpoint", nullptr},
              {"attempts", json::array()}};
}

json Attempt(int n, const std::string& state) {
  return json{{"attempt", n},         {"state", state},           {"started_at", kT0},
              {"ended_at", nullptr},  {"restored_from", nullptr}, {"failed_rank", nullptr},
              {"exit_code", nullptr}, {"signal", nullptr},        {"reason", ""},
              {"log_tail", ""}};
}

// PENDING -> attempt 1 RUNNING (metrics, checkpoint) -> attempt 1 fails on rank 1 with
// SIGKILL -> attempt 2 RUNNING restored -> `final_state`.
std::deque<std::string> Story(const std::string& final_state) {
  std::deque<std::string> d;
  json j = Detail("PENDING", 0);
  j["pending_reason"] = "waiting for 2 CPU";
  d.push_back(j.dump());
  j = Detail("RUNNING", 1);
  j["attempts"] = {Attempt(1, "RUNNING")};
  j["metrics"] = {{"loss", 0.5}, {"epoch", 0}};
  d.push_back(j.dump());
  j["metrics"] = {{"loss", 0.4}, {"epoch", 1}};
  j["latest_checkpoint"] = {{"id", 1},
                            {"attempt", 1},
                            {"seq", 1},
                            {"path", "/r/ckpt_1"},
                            {"metrics", {{"loss", 0.4}}},
                            {"created_at", kT0},
                            {"latest", true}};
  d.push_back(j.dump());
  j["state"] = "RUNNING";
  j["attempt"] = 2;
  j["failures"] = 1;
  json a1 = Attempt(1, "FAILED");
  a1["failed_rank"] = 1;
  a1["signal"] = 9;
  a1["reason"] = "node lost";
  json a2 = Attempt(2, "RUNNING");
  a2["restored_from"] = "/r/ckpt_1";
  j["attempts"] = {a1, a2};
  d.push_back(j.dump());
  j["state"] = final_state;
  j["ended_at"] = kT0 + 61000;
  a2["state"] = final_state;
  if (final_state == "FAILED") {
    j["message"] = "rank 0 exited with code 2";
    j["failures"] = 2;
    a2["failed_rank"] = 0;
    a2["exit_code"] = 2;
    a2["reason"] = "exited with code 2";
    a2["log_tail"] = "epoch 3\nboom\n";
  } else if (final_state == "STOPPED") {
    j["message"] = "stopped by user";
  }
  j["attempts"] = {a1, a2};
  d.push_back(j.dump());
  return d;
}

int SubmitAndWait(const std::string& final_state, bool tty, TestContext** out_t,
                  std::unique_ptr<ScriptedClient>* holder, std::deque<std::string>* story,
                  TempDir& dir) {
  *story = Story(final_state);
  holder->reset(new ScriptedClient(AcceptingDaemon("abcdefabcdef", story)));
  *out_t = new TestContext(holder->get());
  (*out_t)->ctx.out_is_tty = tty;
  (*out_t)->ctx.terminal_width = 80;
  SubmitOptions o;
  o.spec_path = WriteJob(dir, dir.Write("libtrain.so", "bytes"));
  o.wait = true;
  return RunSubmit(o, (*out_t)->ctx);
}

}  // namespace

TEST_CASE("submit --wait follows a failing job and exits 1 with the log tail") {
  TempDir dir;
  TestContext* t = nullptr;
  std::unique_ptr<ScriptedClient> client;
  std::deque<std::string> story;
  int code = SubmitAndWait("FAILED", /*tty=*/false, &t, &client, &story, dir);
  std::unique_ptr<TestContext> owner(t);
  CHECK(code == kExitJobFailed);
  std::string out = t->out.str();
  INFO(out);
  CHECK(out.find('\r') == std::string::npos);  // plain lines without a terminal
  CHECK_THAT(out, Catch::Contains("] submitted abcdefabcdef (demo)\n"));
  CHECK_THAT(out, Catch::Contains("] PENDING: waiting for 2 CPU\n"));
  CHECK_THAT(out, Catch::Contains("] attempt 1 RUNNING\n"));
  CHECK_THAT(out, Catch::Contains("] metrics: epoch=0 loss=0.5\n"));
  CHECK_THAT(out, Catch::Contains("] checkpoint #1 committed (attempt 1, seq 1): /r/ckpt_1\n"));
  CHECK_THAT(out,
             Catch::Contains(
                 "] attempt 1 FAILED: rank 1, SIGKILL: node lost; restarting (failures 1 of 2)\n"));
  CHECK_THAT(out, Catch::Contains("] attempt 2 RUNNING, restored from /r/ckpt_1\n"));
  CHECK_THAT(out,
             Catch::Contains(
                 "] abcdefabcdef FAILED after 1m00s (attempt 2): rank 0 exited with code 2\n"));
  CHECK_THAT(out, Catch::Contains("  failed: rank 0, exit 2: exited with code 2\n"));
  CHECK_THAT(out, Catch::EndsWith("  log tail of rank 0:\n    epoch 3\n    boom\n"));
  // Each state line once, although the daemon was polled repeatedly.
  CHECK(out.find("attempt 1 RUNNING") == out.rfind("attempt 1 RUNNING"));
  CHECK(t->slept_ms > 0);
}

TEST_CASE("submit --wait reports an attempt that began and failed between two polls") {
  TempDir dir;
  std::deque<std::string> story = Story("SUCCEEDED");
  // Only PENDING is seen before attempt 2 runs: the polls that saw attempt 1 are lost.
  story.erase(story.begin() + 1, story.begin() + 3);
  auto client = AcceptingDaemon("abcdefabcdef", &story);
  TestContext t(&client);
  SubmitOptions o;
  o.spec_path = WriteJob(dir, dir.Write("libtrain.so", "bytes"));
  o.wait = true;
  CHECK(RunSubmit(o, t.ctx) == kExitOk);
  std::string out = t.out.str();
  INFO(out);
  CHECK_THAT(out,
             Catch::Contains(
                 "] attempt 1 FAILED: rank 1, SIGKILL: node lost; restarting (failures 1 of 2)\n"));
  CHECK(out.find("attempt 1 FAILED") < out.find("attempt 2 RUNNING"));
  CHECK(out.find("attempt 1 FAILED") == out.rfind("attempt 1 FAILED"));
}

TEST_CASE("submit --wait exit codes: 0 SUCCEEDED, 6 STOPPED") {
  for (const std::string state : {"SUCCEEDED", "STOPPED"}) {
    TempDir dir;
    TestContext* t = nullptr;
    std::unique_ptr<ScriptedClient> client;
    std::deque<std::string> story;
    int code = SubmitAndWait(state, /*tty=*/false, &t, &client, &story, dir);
    std::unique_ptr<TestContext> owner(t);
    CHECK(code == (state == "SUCCEEDED" ? kExitOk : kExitJobStopped));
    CHECK_THAT(t->out.str(), Catch::Contains("abcdefabcdef " + state + " after 1m00s"));
  }
}

TEST_CASE("submit --wait redraws a status line on a terminal") {
  TempDir dir;
  TestContext* t = nullptr;
  std::unique_ptr<ScriptedClient> client;
  std::deque<std::string> story;
  int code = SubmitAndWait("SUCCEEDED", /*tty=*/true, &t, &client, &story, dir);
  std::unique_ptr<TestContext> owner(t);
  CHECK(code == kExitOk);
  std::string out = t->out.str();
  CHECK_THAT(out, Catch::Contains("\r\033[K[03:04:0"));  // the redrawn line...
  CHECK_THAT(out, Catch::Contains("RUNNING attempt 1  epoch=1 loss=0.4"));
  CHECK_THAT(out, !Catch::Contains("] metrics:"));  // ...replaces metrics lines
  CHECK_THAT(out, Catch::Contains("Ctrl-C stops watching"));
}

TEST_CASE("submit --wait --json prints only the final job") {
  TempDir dir;
  std::deque<std::string> story = Story("SUCCEEDED");
  auto client = AcceptingDaemon("abcdefabcdef", &story);
  TestContext t(&client);
  t.ctx.json = true;
  SubmitOptions o;
  o.spec_path = WriteJob(dir, dir.Write("libtrain.so", "bytes"));
  o.wait = true;
  REQUIRE(RunSubmit(o, t.ctx) == kExitOk);
  json final = json::parse(t.out.str());
  CHECK(final["state"] == "SUCCEEDED");
  CHECK(t.err.str().empty());
}

TEST_CASE("WaitForJob rides out a short outage and gives up after the grace period") {
  SECTION("recovers") {
    int calls = 0;
    ScriptedClient client([&](const HttpRequest&) -> Result<HttpResponse> {
      if (++calls <= 2) return Status::Unavailable("connection refused");
      json j = Detail("SUCCEEDED", 1);
      j["ended_at"] = kT0 + 5000;
      return Json(200, j.dump());
    });
    TestContext t(&client);
    CHECK(WaitForJob("abcdefabcdef", t.ctx) == kExitOk);
    CHECK_THAT(t.err.str(), Catch::Contains("lost contact with the traintld at 127.0.0.1:7450"));
    CHECK_THAT(t.err.str(), Catch::Contains("reconnected"));
  }
  SECTION("gives up") {
    ScriptedClient client([&](const HttpRequest&) -> Result<HttpResponse> {
      return Status::Unavailable("connection refused");
    });
    TestContext t(&client);
    t.ctx.reconnect_grace_ms = 3000;
    CHECK(WaitForJob("abcdefabcdef", t.ctx) == kExitUnavailable);
    CHECK_THAT(t.err.str(), Catch::Contains("cannot connect to the traintld"));
    CHECK(t.slept_ms >= 3000);
  }
  SECTION("unknown job") {
    auto client = ScriptedClient([](const HttpRequest&) -> Result<HttpResponse> {
      return Json(404, R"({"error":"no job matches 'abcdefabcdef'"})");
    });
    TestContext t(&client);
    CHECK(WaitForJob("abcdefabcdef", t.ctx) == kExitNotFound);
  }
}

TEST_CASE("submit of an unchanged library neither reads nor asks after it again") {
  TempDir dir;
  TempDir cache;
  std::string lib = dir.Write("libtrain.so", "library bytes");
  const std::string sha = traintl::Sha256Hex("library bytes");
  bool lost = false;  // the daemon lost the blob
  ScriptedClient client([&](const HttpRequest& r) -> Result<HttpResponse> {
    if (r.method == "HEAD") return Json(404, "");
    if (r.method == "PUT") {
      lost = false;
      return Json(201, R"({"sha256":"x","size":1})");
    }
    if (r.method == "POST" && lost)
      return Json(400, R"({"error":"library_sha256: no blob","field":"library_sha256",
                          "missing_blob":true})");
    return Json(201, R"({"job_id":"abcdefabcdef","state":"PENDING"})");
  });
  SubmitOptions o;
  o.spec_path = WriteJob(dir, lib);
  auto methods = [&] {
    std::string out;
    for (const auto& r : client.requests) out += r.method + " ";
    client.requests.clear();
    return out;
  };
  TestContext first(&client);
  first.ctx.cache_dir = cache.path() + "/traintl";
  REQUIRE(RunSubmit(o, first.ctx) == kExitOk);
  CHECK(methods() == "HEAD PUT POST ");
  TestContext again(&client);
  again.ctx.cache_dir = first.ctx.cache_dir;
  REQUIRE(RunSubmit(o, again.ctx) == kExitOk);
  CHECK(methods() == "POST ");
  // The cluster lost the blob: read, uploaded, posted again.
  lost = true;
  TestContext relost(&client);
  relost.ctx.cache_dir = first.ctx.cache_dir;
  REQUIRE(RunSubmit(o, relost.ctx) == kExitOk);
  CHECK(methods() == "POST HEAD PUT POST ");
  // A changed library is hashed again (its ctime changed).
  dir.Write("libtrain.so", "a new build");
  TestContext changed(&client);
  changed.ctx.cache_dir = first.ctx.cache_dir;
  REQUIRE(RunSubmit(o, changed.ctx) == kExitOk);
  CHECK(methods() == "HEAD PUT POST ");
  CHECK(traintl::cli::CachedSha256(first.ctx.cache_dir, lib) == traintl::Sha256Hex("a new build"));
  CHECK(traintl::cli::CachedSha256(first.ctx.cache_dir, lib) != sha);
  // Without a cache dir (the default in tests), nothing is remembered.
  CHECK_FALSE(traintl::cli::CachedSha256("", lib));
}
