// Verb behaviour against a scripted client: output for people, --json, error messages and
// exit codes.

#include <catch2/catch.hpp>

#include "cli/exit_codes.h"
#include "cli/verbs.h"
#include "scripted_client.h"
#include "test_util.h"

using namespace traintl::cli;
using namespace traintl::cli::testing;
using nlohmann::json;
using traintl::Result;
using traintl::Status;

namespace {

const char kJobDetail[] = R"({
  "job_id": "3f9c2a1b7d4e", "name": "digits-ddp", "state": "FAILED", "attempt": 2,
  "num_workers": 2, "submitted_at": 1704164645000, "started_at": 1704164646000,
  "ended_at": 1704164766000, "message": "rank 1 was killed by SIGSEGV",
  "pending_reason": "", "metrics": {"loss": 0.25, "epoch": 4},
  "spec": {}, "max_failures": 1, "failures": 2, "library_sha256": null,
  "trial_dir": "/results/digits-ddp-3f9c",
  "latest_checkpoint": {"id": 7, "attempt": 2, "seq": 3, "path": "/results/ckpt_7",
                        "metrics": {"loss": 0.3}, "created_at": 1704164700000, "latest": true},
  "attempts": [
    {"attempt": 1, "state": "FAILED", "started_at": 1704164646000, "ended_at": 1704164686000,
     "restored_from": null, "failed_rank": 0, "exit_code": 3, "signal": null,
     "reason": "exited with code 3", "log_tail": "first attempt\n"},
    {"attempt": 2, "state": "FAILED", "started_at": 1704164690000, "ended_at": 1704164766000,
     "restored_from": "/results/ckpt_5", "failed_rank": 1, "exit_code": null, "signal": 11,
     "reason": "killed by signal", "log_tail": "epoch 4\nSegmentation fault\n"}
  ]
})";

ScriptedClient Always(int status, const std::string& body) {
  return ScriptedClient(
      [=](const HttpRequest&) -> Result<HttpResponse> { return Json(status, body); });
}

}  // namespace

TEST_CASE("status JOB shows the job, its attempts and the failing log tail") {
  auto client = Always(200, kJobDetail);
  TestContext t(&client);
  REQUIRE(RunStatus("3f9c", t.ctx) == kExitOk);
  REQUIRE(client.requests.size() == 1);
  CHECK(client.requests[0].method == "GET");
  CHECK(client.requests[0].target == "/v1/jobs/3f9c");
  std::string out = t.out.str();
  CHECK_THAT(out, Catch::Contains("Job:         3f9c2a1b7d4e (digits-ddp)"));
  CHECK_THAT(out, Catch::Contains("State:       FAILED: rank 1 was killed by SIGSEGV"));
  CHECK_THAT(out, Catch::Contains("Attempt:     2 (failures 2 of 1)"));
  CHECK_THAT(out, Catch::Contains("Duration:    2m00s"));
  CHECK_THAT(out, Catch::Contains("Metrics:     epoch=4 loss=0.25"));
  CHECK_THAT(out, Catch::Contains("#7 (attempt 2, seq 3"));
  CHECK_THAT(out, Catch::Contains("/results/ckpt_7"));
  CHECK_THAT(out, Catch::Contains("SIGSEGV"));
  CHECK_THAT(out, Catch::Contains("exit 3"));
  CHECK_THAT(out, Catch::Contains("/results/ckpt_5"));
  CHECK_THAT(out,
             Catch::Contains("Log tail (attempt 2, rank 1):\n  epoch 4\n  Segmentation fault\n"));
  CHECK_THAT(out, !Catch::Contains("first attempt"));
  CHECK(t.err.str().empty());
}

TEST_CASE("status of a pending job with unlimited restarts") {
  auto client = Always(200, R"({"job_id":"aa","name":"","state":"PENDING","attempt":0,
      "num_workers":4,"submitted_at":1704164645000,"started_at":null,"ended_at":null,
      "message":"","pending_reason":"needs 4 GPU, cluster has 2","metrics":{},
      "max_failures":-1,"failures":0,"latest_checkpoint":null,"attempts":[]})");
  TestContext t(&client);
  REQUIRE(RunStatus("aa", t.ctx) == kExitOk);
  std::string out = t.out.str();
  CHECK_THAT(out, Catch::Contains("State:       PENDING (needs 4 GPU, cluster has 2)"));
  CHECK_THAT(out, Catch::Contains("Attempt:     - (failures 0 unlimited)"));
  CHECK_THAT(out, Catch::Contains("Checkpoint:  -"));
  CHECK_THAT(out, !Catch::Contains("Attempts:"));
}

TEST_CASE("status with --json prints the daemon's JSON, pretty, and nothing else") {
  auto client = Always(200, kJobDetail);
  TestContext t(&client);
  t.ctx.json = true;
  REQUIRE(RunStatus("3f9c", t.ctx) == kExitOk);
  CHECK(json::parse(t.out.str()) == json::parse(kJobDetail));
  CHECK_THAT(t.out.str(), Catch::StartsWith("{\n  \""));
}

TEST_CASE("list and status without JOB print the job table") {
  const char* body = R"({"jobs":[
    {"job_id":"3f9c2a1b7d4e","name":"digits-ddp","state":"RUNNING","attempt":1,"num_workers":2,
     "submitted_at":1704164645000,"started_at":1704164646000,"ended_at":null,"message":"",
     "pending_reason":"","metrics":{}},
    {"job_id":"0011aabbccdd","name":"big","state":"PENDING","attempt":0,"num_workers":8,
     "submitted_at":1704164600000,"started_at":null,"ended_at":null,"message":"",
     "pending_reason":"waiting for 8 GPU","metrics":{}}]})";
  for (bool via_status : {false, true}) {
    auto client = Always(200, body);
    TestContext t(&client);
    t.now = kT0 + 61000;
    REQUIRE((via_status ? RunStatus("", t.ctx) : RunList(ListOptions{}, t.ctx)) == kExitOk);
    CHECK(client.requests.at(0).target == "/v1/jobs?limit=20");
    std::string out = t.out.str();
    CHECK_THAT(out, Catch::StartsWith("ID            NAME        STATE    ATTEMPT  WORKERS  "
                                      "SUBMITTED            DURATION  MESSAGE\n"));
    CHECK_THAT(out, Catch::Contains("3f9c2a1b7d4e  digits-ddp  RUNNING        1        2"));
    CHECK_THAT(out, Catch::Contains("1m00s"));  // running: started until now
    CHECK_THAT(out, Catch::Contains("0011aabbccdd  big         PENDING        -        8"));
    CHECK_THAT(out, Catch::Contains("waiting for 8 GPU"));
  }
  auto empty = Always(200, R"({"jobs":[]})");
  TestContext t(&empty);
  REQUIRE(RunList(ListOptions{}, t.ctx) == kExitOk);
  CHECK(t.out.str() == "no jobs\n");
}

TEST_CASE("list filters in the daemon, walks every page with --all, and says when more exist") {
  auto job = [](const std::string& id) {
    return json{{"job_id", id},          {"name", "sweep"},          {"state", "FAILED"},
                {"attempt", 1},          {"num_workers", 1},         {"submitted_at", kT0},
                {"started_at", nullptr}, {"ended_at", nullptr},      {"message", ""},
                {"pending_reason", ""},  {"metrics", json::object()}};
  };
  ScriptedClient client([&](const HttpRequest& r) -> Result<HttpResponse> {
    if (r.target.find("cursor=c1") != std::string::npos)
      return Json(200, json{{"jobs", {job("bbbbbbbbbbbb")}}, {"next_cursor", nullptr}}.dump());
    return Json(200, json{{"jobs", {job("aaaaaaaaaaaa")}}, {"next_cursor", "c1"}}.dump());
  });
  ListOptions options;
  options.state = "failed";
  options.name = "sweep";
  options.limit = 1;
  TestContext t(&client);
  REQUIRE(RunList(options, t.ctx) == kExitOk);
  REQUIRE(client.requests.size() == 1);
  CHECK(client.requests[0].target == "/v1/jobs?state=failed&name=sweep&limit=1");
  CHECK_THAT(t.out.str(), Catch::Contains("aaaaaaaaaaaa"));
  CHECK_THAT(t.err.str(), Catch::Contains("the newest 1 shown; --limit N or --all for more"));

  options.all = true;
  client.requests.clear();
  TestContext all(&client);
  all.ctx.json = true;
  REQUIRE(RunList(options, all.ctx) == kExitOk);
  REQUIRE(client.requests.size() == 2);
  CHECK(client.requests[0].target == "/v1/jobs?state=failed&name=sweep&limit=1000");
  CHECK(client.requests[1].target == "/v1/jobs?state=failed&name=sweep&limit=1000&cursor=c1");
  json out = json::parse(all.out.str());
  REQUIRE(out["jobs"].size() == 2);
  CHECK(out["jobs"][1]["job_id"] == "bbbbbbbbbbbb");
  CHECK(out["next_cursor"].is_null());
  CHECK(all.err.str().empty());
}

TEST_CASE("nodes table") {
  auto client = Always(200, R"({"nodes":[
    {"node_id":"n1","address":"10.0.0.1:7450","role":"head","state":"ALIVE",
     "resources_total":{"CPU":8,"GPU":2,"memory":17179869184,"ssd":1},
     "resources_used":{"CPU":2,"GPU":0.5,"memory":1073741824},"gpus":[],
     "last_heartbeat":1704164644000},
    {"node_id":"n2","address":"10.0.0.2:7450","role":"agent","state":"LOST",
     "resources_total":{"CPU":4,"memory":8589934592},"resources_used":{},"gpus":[],
     "last_heartbeat":1704164600000}]})");
  TestContext t(&client);
  REQUIRE(RunNodes(t.ctx) == kExitOk);
  CHECK(client.requests.at(0).target == "/v1/nodes");
  std::string out = t.out.str();
  CHECK_THAT(out, Catch::StartsWith("NODE  ROLE   STATE  ADDRESS        CPU  GPU    MEMORY"));
  CHECK_THAT(
      out,
      Catch::Contains(
          "n1    head   ALIVE  10.0.0.1:7450  2/8  0.5/2  1.0 GiB / 16.0 GiB  ssd=0/1  1s ago"));
  CHECK_THAT(
      out,
      Catch::Contains(
          "n2    agent  LOST   10.0.0.2:7450  0/4  -      0 B / 8.0 GiB       -        45s ago"));
}

TEST_CASE("checkpoints table marks the latest") {
  auto client = Always(200, R"({"checkpoints":[
    {"id":5,"attempt":1,"seq":2,"path":"/r/ckpt_5","metrics":{"loss":0.5},
     "created_at":1704164645000,"latest":false},
    {"id":7,"attempt":2,"seq":3,"path":"/r/ckpt_7","metrics":{"loss":0.3},
     "created_at":1704164700000,"latest":true}]})");
  TestContext t(&client);
  REQUIRE(RunCheckpoints("3f", t.ctx) == kExitOk);
  CHECK(client.requests.at(0).target == "/v1/jobs/3f/checkpoints");
  std::string out = t.out.str();
  CHECK_THAT(out,
             Catch::StartsWith("ID  ATTEMPT  SEQ  CREATED              LATEST  METRICS   PATH\n"));
  CHECK_THAT(out, Catch::Contains("loss=0.5  /r/ckpt_5\n"));
  CHECK_THAT(out, Catch::Contains("*       loss=0.3  /r/ckpt_7\n"));
}

TEST_CASE("metrics history and latest") {
  auto client = Always(200, R"({"latest":{"loss":0.3,"epoch":2},"history":[
    {"attempt":1,"seq":1,"time":1704164645000,"metrics":{"loss":0.9,"epoch":0}},
    {"attempt":1,"seq":2,"time":1704164646000,"metrics":{"loss":0.3,"epoch":2}}]})");
  TestContext t(&client);
  REQUIRE(RunMetrics("3f", t.ctx) == kExitOk);
  CHECK(client.requests.at(0).target == "/v1/jobs/3f/metrics");
  std::string out = t.out.str();
  CHECK_THAT(out, Catch::StartsWith("ATTEMPT  SEQ  TIME"));
  CHECK_THAT(out, Catch::Contains("epoch=0 loss=0.9\n"));
  CHECK_THAT(out, Catch::EndsWith("Latest: epoch=2 loss=0.3\n"));
  auto none = Always(200, R"({"latest":{},"history":[]})");
  TestContext t2(&none);
  REQUIRE(RunMetrics("3f", t2.ctx) == kExitOk);
  CHECK(t2.out.str() == "no metrics reported yet\n");
}

TEST_CASE("stop") {
  auto client = Always(200, R"({"job_id":"3f9c2a1b7d4e","state":"STOPPED"})");
  TestContext t(&client);
  REQUIRE(RunStop("3f9c", JobVerbOptions{}, t.ctx) == kExitOk);
  CHECK(client.requests.at(0).method == "POST");
  CHECK(client.requests.at(0).target == "/v1/jobs/3f9c/stop");
  CHECK(t.out.str() == "3f9c2a1b7d4e: STOPPED\n");
  auto done = Always(200, R"({"job_id":"3f9c2a1b7d4e","state":"SUCCEEDED"})");
  TestContext t2(&done);
  REQUIRE(RunStop("3f9c", JobVerbOptions{}, t2.ctx) == kExitOk);
  CHECK_THAT(t2.out.str(), Catch::Contains("already ended as SUCCEEDED"));
}

TEST_CASE("stop --wait polls until the job has ended") {
  int gets = 0;
  ScriptedClient client([&](const HttpRequest& r) -> Result<HttpResponse> {
    if (r.method == "POST") return Json(200, R"({"job_id":"3f9c2a1b7d4e","state":"RUNNING"})");
    return Json(200, ++gets < 3 ? R"({"job_id":"3f9c2a1b7d4e","state":"RUNNING"})"
                                : R"({"job_id":"3f9c2a1b7d4e","state":"STOPPED"})");
  });
  TestContext t(&client);
  JobVerbOptions wait;
  wait.wait = true;
  REQUIRE(RunStop("3f9c", wait, t.ctx) == kExitOk);
  CHECK(gets == 3);
  CHECK(client.requests.at(1).target == "/v1/jobs/3f9c2a1b7d4e");
  CHECK(t.out.str() == "3f9c2a1b7d4e: STOPPED\n");
  // Without --wait the request is all.
  gets = 0;
  TestContext t2(&client);
  REQUIRE(RunStop("3f9c", JobVerbOptions{}, t2.ctx) == kExitOk);
  CHECK(gets == 0);
  CHECK(t2.out.str() == "3f9c2a1b7d4e: stop requested (now RUNNING)\n");
}

TEST_CASE("resubmit and delete") {
  auto resubmitted =
      Always(201, R"({"job_id":"0123456789ab","state":"PENDING","resubmitted_from":"3f9c"})");
  TestContext t(&resubmitted);
  REQUIRE(RunResubmit("digits", JobVerbOptions{}, t.ctx) == kExitOk);
  CHECK(resubmitted.requests.at(0).method == "POST");
  CHECK(resubmitted.requests.at(0).target == "/v1/jobs/digits/resubmit");
  CHECK(t.out.str() == "0123456789ab\n");

  auto deleted = Always(200, R"({"job_id":"3f9c2a1b7d4e","deleted":true,
      "trial_dir":"/results/digits-3f9c2a1b7d4e","trial_dir_removed":false})");
  TestContext d(&deleted);
  REQUIRE(RunDelete("3f9c", JobVerbOptions{}, d.ctx) == kExitOk);
  CHECK(deleted.requests.at(0).method == "DELETE");
  CHECK(deleted.requests.at(0).target == "/v1/jobs/3f9c");
  CHECK(d.out.str() ==
        "3f9c2a1b7d4e: deleted (its trial dir /results/digits-3f9c2a1b7d4e stays)\n");
  JobVerbOptions with_files;
  with_files.checkpoints = true;
  TestContext d2(&deleted);
  REQUIRE(RunDelete("3f9c", with_files, d2.ctx) == kExitOk);
  CHECK(deleted.requests.at(1).target == "/v1/jobs/3f9c?checkpoints=1");
  CHECK_THAT(d2.out.str(), Catch::Contains("deleted with its trial dir"));

  auto running =
      Always(409, R"({"error":"job 3f9c2a1b7d4e is RUNNING; stop it and let it end first"})");
  TestContext r(&running);
  CHECK(RunDelete("3f9c", JobVerbOptions{}, r.ctx) != kExitOk);
  CHECK_THAT(r.err.str(), Catch::Contains("stop it and let it end first"));
}

TEST_CASE("logs builds the query and prints the text") {
  LogsOptions o;
  o.job = "3f9c";
  CHECK(LogsTarget(o) == "/v1/jobs/3f9c/logs?ranks=all");
  o.ranks = {0, 2};
  CHECK(LogsTarget(o, 1234) == "/v1/jobs/3f9c/logs?ranks=0,2&since=1234");
  o.ranks = {2};
  o.attempt = 3;
  o.tail = 10;
  o.follow = true;
  CHECK(LogsTarget(o) == "/v1/jobs/3f9c/logs?rank=2&attempt=3&tail=10&follow=1");
  o.job = "../x y";  // cannot escape the job's path
  CHECK(LogsTarget(o).rfind("/v1/jobs/%2E%2E%2Fx%20y/logs?", 0) == 0);

  auto client = ScriptedClient([](const HttpRequest&) -> Result<HttpResponse> {
    HttpResponse r;
    r.status = 200;
    r.content_type = "text/plain";
    r.body = "line 1\nline 2\n";
    return r;
  });
  for (bool follow : {false, true}) {
    TestContext t(&client);
    LogsOptions lo;
    lo.job = "3f";
    lo.follow = follow;
    REQUIRE(RunLogs(lo, t.ctx) == kExitOk);
    CHECK(t.out.str() == "line 1\nline 2\n");
    CHECK(client.requests.back().timeout_ms == (follow ? -1 : 0));
  }
  // On a terminal, rank prefixes are coloured (and nothing else is touched).
  auto prefixed = Always(200, "[rank 0] a\n[rank 1] b\nplain\n");
  TestContext tty(&prefixed);
  tty.ctx.out_is_tty = true;
  LogsOptions all;
  all.job = "3f";
  REQUIRE(RunLogs(all, tty.ctx) == kExitOk);
  CHECK(tty.out.str() == "\033[36m[rank 0]\033[0m a\n\033[33m[rank 1]\033[0m b\nplain\n");
  auto missing = Always(404, R"({"error":"no log for rank 5 of attempt 1"})");
  TestContext t(&missing);
  LogsOptions lo;
  lo.job = "3f";
  lo.ranks = {5};
  CHECK(RunLogs(lo, t.ctx) == kExitNotFound);
  CHECK(t.err.str() == "traintl: no log for rank 5 of attempt 1\n");
}

TEST_CASE("error answers become messages and exit codes") {
  SECTION("401 names where the token came from") {
    auto client = Always(401, R"({"error":"invalid token"})");
    TestContext t(&client);
    CHECK(RunList(ListOptions{}, t.ctx) == kExitAuth);
    CHECK(t.err.str() ==
          "traintl: the daemon rejected the token (invalid token; token read from /data/token)."
          " Check TRAINTL_TOKEN / --token-file / /data/token\n");
    CHECK(t.out.str().empty());
  }
  SECTION("401 without a token says why there is none") {
    auto client = Always(401, R"({"error":"missing token"})");
    TestContext t(&client);
    t.ctx.connection.token.clear();
    t.ctx.connection.token_problem = "/data/token: permission denied";
    CHECK(RunNodes(t.ctx) == kExitAuth);
    CHECK_THAT(t.err.str(), Catch::Contains("no token: /data/token: permission denied"));
  }
  SECTION("404") {
    auto client = Always(404, R"({"error":"no job matches 'zz'"})");
    TestContext t(&client);
    CHECK(RunStatus("zz", t.ctx) == kExitNotFound);
    CHECK(t.err.str() == "traintl: no job matches 'zz'\n");
  }
  SECTION("409 lists the candidates") {
    auto client = Always(409, R"({"error":"job prefix '3f' is ambiguous",
                                 "candidates":["3f0000000001","3f0000000002"]})");
    TestContext t(&client);
    CHECK(RunMetrics("3f", t.ctx) == kExitNotFound);
    CHECK(
        t.err.str() ==
        "traintl: job prefix '3f' is ambiguous\nmatching jobs:\n  3f0000000001\n  3f0000000002\n");
  }
  SECTION("503 and 500") {
    auto client = Always(503, R"({"error":"no head elected"})");
    TestContext t(&client);
    CHECK(RunList(ListOptions{}, t.ctx) == kExitUnavailable);
    CHECK_THAT(t.err.str(), Catch::Contains("not ready: no head elected"));
    auto broken = Always(500, "oops");
    TestContext t2(&broken);
    CHECK(RunList(ListOptions{}, t2.ctx) == kExitServerError);
    CHECK(t2.err.str() == "traintl: the daemon answered HTTP 500: oops\n");
  }
  SECTION("not JSON") {
    auto client = Always(200, "<html>");
    TestContext t(&client);
    CHECK(RunList(ListOptions{}, t.ctx) == kExitServerError);
  }
  SECTION("cannot connect") {
    ScriptedClient client([](const HttpRequest&) -> Result<HttpResponse> {
      return Status::Unavailable("connection refused");
    });
    TestContext t(&client);
    CHECK(RunCheckpoints("x", t.ctx) == kExitUnavailable);
    CHECK(t.err.str() ==
          "traintl: cannot connect to the traintld at 127.0.0.1:7450 (connection refused). "
          "Is traintld running? Use --address or --data-dir.\n");
  }
}

TEST_CASE("RunVerb dispatches") {
  auto client = Always(200, R"({"nodes":[]})");
  TestContext t(&client);
  CommandLine cl;
  cl.verb = "nodes";
  CHECK(RunVerb(cl, t.ctx) == kExitOk);
  CHECK(t.out.str() == "no nodes\n");
}

TEST_CASE("dashboard prints the page and a login link with a single-use code, not the token") {
  auto client = Always(200, R"({"code":"0f1e2d3c","expires_in_s":120})");
  TestContext t(&client);
  t.ctx.connection.address = "127.0.0.1:7450";
  t.ctx.connection.token = "abc123";
  REQUIRE(RunDashboard(t.ctx) == kExitOk);
  REQUIRE(client.requests.size() == 1);
  CHECK(client.requests[0].method == "POST");
  CHECK(client.requests[0].target == "/ui/codes");
  CHECK_THAT(t.out.str(), Catch::Contains("Dashboard: http://127.0.0.1:7450/ui/\n"));
  CHECK_THAT(t.out.str(), Catch::Contains("Log in:    http://127.0.0.1:7450/ui/?code=0f1e2d3c\n"));
  CHECK_THAT(t.out.str(), Catch::Contains("within 120 s"));
  CHECK(t.out.str().find("abc123") == std::string::npos);

  // A code that is not hex never goes into a link.
  auto odd = Always(200, R"({"code":"x?token=1"})");
  TestContext o(&odd);
  CHECK(RunDashboard(o.ctx) == kExitServerError);

  auto none = Always(500, "{}");
  TestContext tls(&none);
  tls.ctx.connection.address = "h:1";
  tls.ctx.connection.tls = true;
  tls.ctx.connection.token = "";  // TestContext gives one
  tls.ctx.connection.token_problem = "/t: permission denied";
  tls.ctx.json = true;
  REQUIRE(RunDashboard(tls.ctx) == kExitOk);
  CHECK(json::parse(tls.out.str()) == json{{"url", "https://h:1/ui/"}, {"login_url", ""}});
}

TEST_CASE("tune delete") {
  auto deleted = Always(200, R"({"experiment_id":"e0a1b2c3d4e5","deleted":true,
      "job_ids":["j1","j2","j3"],"exp_dir":"/results/digits-tune-e0a1","exp_dir_removed":false})");
  TuneOptions options;
  options.action = "delete";
  options.argument = "digits-tune";
  TestContext d(&deleted);
  REQUIRE(RunTune(options, d.ctx) == kExitOk);
  CHECK(deleted.requests.at(0).method == "DELETE");
  CHECK(deleted.requests.at(0).target == "/v1/tune/digits-tune");
  CHECK(d.out.str() ==
        "e0a1b2c3d4e5: deleted with 3 trial jobs (its dir /results/digits-tune-e0a1 stays)\n");
  options.checkpoints = true;
  auto removed = Always(200, R"({"experiment_id":"e0a1b2c3d4e5","deleted":true,
      "job_ids":["j1"],"exp_dir":"/results/digits-tune-e0a1","exp_dir_removed":true})");
  TestContext d2(&removed);
  REQUIRE(RunTune(options, d2.ctx) == kExitOk);
  CHECK(removed.requests.at(0).target == "/v1/tune/digits-tune?checkpoints=1");
  CHECK(d2.out.str() ==
        "e0a1b2c3d4e5: deleted with 1 trial job and its dir /results/digits-tune-e0a1\n");

  auto running = Always(409, R"({"error":"experiment e0a1 is RUNNING; stop it first"})");
  TestContext r(&running);
  CHECK(RunTune(options, r.ctx) == kExitNotFound);
  CHECK_THAT(r.err.str(), Catch::Contains("RUNNING; stop it first"));
}

TEST_CASE("status shows a job's message, fields and log tail without their controls") {
  const json job = {{"job_id", "j1"},
                    {"name", "n\x1b]0;title\x07"},
                    {"state", "FAILED"},
                    {"message", "boom\r\x1b[Kfake SUCCEEDED"},
                    {"trial_dir", "/t/\x1b[2J"},
                    {"metrics", {{"m\x1b[1m", 1}}},
                    {"attempts", json::array({{{"attempt", 1},
                                               {"state", "FAILED"},
                                               {"failed_rank", 0},
                                               {"reason", "r\x1b[31m"},
                                               {"log_tail", "line one\nline\x1b[2J two\n"}}})}};
  const std::string text = FormatJobDetail(job, 0);
  for (unsigned char c : text) CHECK(((c >= 0x20 || c == '\n') && c != 0x7F));
  CHECK(text.find("boom\\x0d\\x1b[Kfake SUCCEEDED") != std::string::npos);
  CHECK(text.find("  line one\n  line\\x1b[2J two\n") != std::string::npos);
}
