// The real Beast client against a fake server on 127.0.0.1: the submit flow end to end,
// log following over a chunked answer, HEAD handling and connection errors.

#include <condition_variable>
#include <mutex>

#include <catch2/catch.hpp>

#include "cli/exit_codes.h"
#include "cli/http_client.h"
#include "cli/verbs.h"
#include "common/crypto.h"
#include "fake_server.h"
#include "test_util.h"

using namespace traintl::cli;
using namespace traintl::cli::testing;
using nlohmann::json;

namespace {

BeastHttpClient ClientFor(uint16_t port) {
  BeastHttpClientOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.token = "s3cret";
  o.connect_timeout_ms = 5000;
  o.request_timeout_ms = 30000;
  return BeastHttpClient(o);
}

// A port on 127.0.0.1 with nothing listening: bound by a server that is then destroyed.
uint16_t ClosedPort() {
  FakeServer s([](const RecordedRequest&) { return FakeResponse{}; });
  return s.port();
}

}  // namespace

TEST_CASE("submit over HTTP: HEAD 404, PUT with the right sha, POST with library_sha256") {
  TempDir dir;
  std::string library(100000, '\0');
  for (size_t i = 0; i < library.size(); ++i) library[i] = static_cast<char>(i * 7);
  std::string lib_path = dir.Write("libtrain.so", library);
  std::string sha = traintl::Sha256Hex(library);
  std::string spec_path =
      dir.Write("job.json", json{{"name", "demo"}, {"entrypoint", {{"library", lib_path}}}}.dump());

  FakeServer server([&](const RecordedRequest& r) {
    FakeResponse resp;
    if (r.method == "HEAD") {
      resp.status = 404;
    } else if (r.method == "PUT") {
      resp.status = traintl::Sha256Hex(r.body) == r.target.substr(10) ? 201 : 400;
      resp.body = R"({"sha256":")" + sha + R"(","size":100000})";
    } else if (r.method == "POST") {
      resp.status = 201;
      resp.body = R"({"job_id":"0123456789ab","state":"PENDING"})";
    } else {
      resp.status = 500;
    }
    return resp;
  });
  BeastHttpClient client = ClientFor(server.port());
  TestContext t(&client);
  SubmitOptions o;
  o.spec_path = spec_path;
  int code = RunSubmit(o, t.ctx);
  INFO(t.err.str());
  REQUIRE(code == kExitOk);
  CHECK(t.out.str() == "0123456789ab\n");

  auto requests = server.requests();
  REQUIRE(requests.size() == 3);
  CHECK(requests[0].method == "HEAD");
  CHECK(requests[0].target == "/v1/blobs/" + sha);
  CHECK(requests[1].method == "PUT");
  CHECK(requests[1].target == "/v1/blobs/" + sha);
  CHECK(requests[1].body == library);
  CHECK(requests[1].content_type == "application/octet-stream");
  CHECK(requests[2].method == "POST");
  CHECK(requests[2].target == "/v1/jobs");
  CHECK(requests[2].content_type == "application/json");
  json body = json::parse(requests[2].body);
  CHECK(body["library_sha256"] == sha);
  CHECK(body["spec"]["name"] == "demo");
  CHECK(body["submission_id"].get<std::string>().size() == 32);
  for (const auto& r : requests) CHECK(r.authorization == "Bearer s3cret");
}

TEST_CASE("Send reads status and body, HEAD answers carry no body") {
  FakeServer server([](const RecordedRequest& r) {
    FakeResponse resp;
    resp.status = r.target == "/missing" ? 404 : 200;
    resp.body = r.target == "/missing" ? R"({"error":"nope"})" : "hello body";
    resp.content_type = "text/plain";
    return resp;
  });
  BeastHttpClient client = ClientFor(server.port());
  HttpRequest head;
  head.method = "HEAD";
  head.target = "/v1/blobs/x";
  auto r = client.Send(head);
  REQUIRE(r.ok());
  CHECK(r->status == 200);
  CHECK(r->body.empty());
  HttpRequest get;
  get.target = "/missing";
  r = client.Send(get);
  REQUIRE(r.ok());
  CHECK(r->status == 404);
  CHECK(r->body == R"({"error":"nope"})");
  get.target = "/x";
  r = client.Send(get);
  REQUIRE(r.ok());
  CHECK(r->body == "hello body");
  CHECK(r->content_type == "text/plain");
}

TEST_CASE("Stream hands over each chunk as it arrives") {
  std::mutex mu;
  std::condition_variable cv;
  bool first_seen = false;
  bool first_seen_before_second_chunk = false;
  FakeServer server([&](const RecordedRequest&) {
    FakeResponse resp;
    resp.content_type = "text/plain";
    resp.chunks = {"line 1\n", "line 2\n", "line 3\n"};
    resp.before_chunk = [&](size_t i) {
      if (i != 1) return;
      // The second chunk waits until the client has delivered the first: proof that the
      // client streams instead of collecting the whole answer. The bound only keeps a
      // broken client from hanging the test.
      std::unique_lock<std::mutex> lock(mu);
      first_seen_before_second_chunk =
          cv.wait_for(lock, std::chrono::seconds(20), [&] { return first_seen; });
    };
    return resp;
  });
  BeastHttpClient client = ClientFor(server.port());
  HttpRequest req;
  req.target = "/v1/jobs/ab/logs?rank=0&follow=1";
  req.timeout_ms = -1;
  std::string received;
  auto r = client.Stream(req, [&](std::string_view data) {
    received.append(data.data(), data.size());
    if (received.find("line 1\n") != std::string::npos) {
      std::lock_guard<std::mutex> lock(mu);
      first_seen = true;
      cv.notify_all();
    }
  });
  REQUIRE(r.ok());
  CHECK(r->status == 200);
  CHECK(r->body.empty());
  CHECK(received == "line 1\nline 2\nline 3\n");
  std::lock_guard<std::mutex> lock(mu);
  CHECK(first_seen_before_second_chunk);
}

TEST_CASE("logs -f prints a chunked answer, errors while streaming are reported") {
  FakeServer server([](const RecordedRequest& r) {
    FakeResponse resp;
    if (r.target.find("rank=9") != std::string::npos) {
      resp.status = 404;
      resp.body = R"({"error":"no log for rank 9"})";
      return resp;
    }
    resp.content_type = "text/plain";
    resp.chunks = {"epoch 0 loss=1\n", "epoch 1 loss=0.5\n"};
    return resp;
  });
  BeastHttpClient client = ClientFor(server.port());
  TestContext t(&client);
  LogsOptions o;
  o.job = "ab";
  o.ranks = {0};
  o.follow = true;
  REQUIRE(RunLogs(o, t.ctx) == kExitOk);
  CHECK(t.out.str() == "epoch 0 loss=1\nepoch 1 loss=0.5\n");
  CHECK(server.requests().at(0).target == "/v1/jobs/ab/logs?rank=0&follow=1");

  TestContext t2(&client);
  o.ranks = {9};
  CHECK(RunLogs(o, t2.ctx) == kExitNotFound);
  CHECK(t2.err.str() == "traintl: no log for rank 9\n");
  CHECK(t2.out.str().empty());
}

TEST_CASE("a daemon that is not there: connection refused, exit 3") {
  BeastHttpClient client = ClientFor(ClosedPort());
  HttpRequest req;
  req.target = "/v1/jobs";
  auto r = client.Send(req);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == traintl::Status::Code::kUnavailable);
  CHECK(r.status().message() == "connection refused");

  TestContext t(&client);
  t.ctx.connection.address = "127.0.0.1:1234";
  CHECK(RunList(ListOptions{}, t.ctx) == kExitUnavailable);
  CHECK(t.err.str() ==
        "traintl: cannot connect to the traintld at 127.0.0.1:1234 (connection refused). "
        "Is traintld running? Use --address or --data-dir.\n");
}
