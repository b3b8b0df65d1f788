// End-to-end tests of traintl::http::Server over loopback (test_server.h): how handlers
// answer - later through a kept Responder, as a chunked (or HTTP/1.0 raw) stream, with 500
// for a dropped Responder or a throw - and keep-alive and pipelining around those answers.
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>

#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "daemon/http/client.h"
#include "daemon/http/responder.h"
#include "daemon/http/router.h"
#include "daemon/http/server.h"
#include "tests/unit/http/test_server.h"

using namespace traintl::http;
using namespace traintl::testing;
using namespace std::chrono_literals;
using nlohmann::json;

TEST_CASE("a handler may keep the Responder and answer later") {
  TestServer s;
  AddHealthz(*s.router);
  s.router->Add("GET", "/v1/deferred", [&s](const Request& req, std::shared_ptr<Responder> res) {
    auto timer = std::make_shared<boost::asio::steady_timer>(s.io(), 50ms);
    std::string job = req.query.count("job") ? req.query.at("job") : "";
    timer->async_wait([timer, res, job](boost::system::error_code) {
      res->SendJson(200, {{"deferred", true}, {"job", job}});
    });
  });
  s.Start();
  auto r = s.Get("/v1/deferred?job=abc");
  REQUIRE(r.ok());
  CHECK(r->status == 200);
  CHECK(json::parse(r->body) == json{{"deferred", true}, {"job", "abc"}});
  s.ExpectHealthy();
}

TEST_CASE("chunked streaming delivers every chunk and keeps the connection alive") {
  TestServer s;
  AddHealthz(*s.router);
  std::atomic<int> written_ok{0};
  s.router->Add("GET", "/v1/stream", [&](const Request&, std::shared_ptr<Responder> res) {
    res->BeginChunked(200, "text/plain");
    auto timer = std::make_shared<boost::asio::steady_timer>(s.io());
    auto step = std::make_shared<std::function<void(int)>>();
    *step = [&, timer, res, step](int i) {
      if (i == 3) {
        res->EndChunked();
        *step = nullptr;  // break the self-reference
        return;
      }
      timer->expires_after(20ms);
      timer->async_wait([&, res, step, i](boost::system::error_code) {
        res->WriteChunk("chunk-" + std::to_string(i) + "\n", [&, step, i](bool ok) {
          if (ok) ++written_ok;
          if (*step) (*step)(i + 1);
        });
      });
    };
    (*step)(0);
  });
  s.Start();

  auto r = s.Get("/v1/stream");
  REQUIRE(r.ok());
  CHECK(r->status == 200);
  CHECK(r->header("Transfer-Encoding") == "chunked");
  CHECK(r->body == "chunk-0\nchunk-1\nchunk-2\n");
  CHECK(written_ok == 3);

  // The same connection serves a pipelined request after the stream ended.
  int fd = ConnectRaw(s.port);
  REQUIRE(SendRaw(fd, std::string("GET /v1/stream HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ") +
                          kToken +
                          "\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  RawResult raw = ReadUntilClose(fd);
  ::close(fd);
  CHECK(raw.closed);
  CHECK(Count(raw.data, "HTTP/1.1 200") == 2);
  CHECK(raw.data.find("8\r\nchunk-2\n\r\n0\r\n\r\nHTTP/1.1 200") != std::string::npos);
  CHECK(raw.data.find("{\"status\":\"ok\"}") != std::string::npos);
  s.ExpectHealthy();
}

TEST_CASE("keep-alive serves several requests on one connection") {
  TestServer s;
  AddHealthz(*s.router);
  s.Start();
  int fd = ConnectRaw(s.port);
  for (int i = 0; i < 3; ++i) {
    REQUIRE(SendRaw(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"));
    std::string got = ReadUntil(fd, "{\"status\":\"ok\"}");
    CHECK(got.rfind("HTTP/1.1 200", 0) == 0);
    CHECK(got.find("Connection: close") == std::string::npos);
  }
  ::close(fd);
  s.ExpectHealthy();
}

TEST_CASE("a dropped Responder or a throwing handler gives 500") {
  TestServer s;
  AddHealthz(*s.router);
  s.router->Add("GET", "/v1/drop", [](const Request&, std::shared_ptr<Responder>) {});
  s.router->Add("GET", "/v1/throw", [](const Request&, std::shared_ptr<Responder>) {
    throw std::runtime_error("boom");
  });
  s.Start();
  auto r = s.Get("/v1/drop");
  REQUIRE(r.ok());
  CHECK(r->status == 500);
  CHECK(json::parse(r->body).contains("error"));
  r = s.Get("/v1/throw");
  REQUIRE(r.ok());
  CHECK(r->status == 500);
  CHECK(json::parse(r->body)["error"] == "internal error");
  s.ExpectHealthy();
}

TEST_CASE("a streaming handler notices that its client went away") {
  TestServer s;
  AddHealthz(*s.router);
  std::shared_ptr<Responder> held;
  s.router->Add("GET", "/v1/hang", [&](const Request&, std::shared_ptr<Responder> res) {
    res->BeginChunked(200, "text/plain");
    held = res;
  });
  s.Start();
  int fd = ConnectRaw(s.port);
  REQUIRE(SendRaw(fd, std::string("GET /v1/hang HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ") +
                          kToken + "\r\n\r\n"));
  std::string got = ReadUntil(fd, "\r\n\r\n");
  CHECK(got.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(!s.OnIo([&] { return held->closed(); }));
  ::close(fd);
  CHECK(Eventually([&] { return s.OnIo([&] { return held->closed(); }); }));
  std::promise<bool> written;
  s.OnIo([&] {
    held->WriteChunk("late", [&](bool ok) { written.set_value(ok); });
    return 0;
  });
  CHECK(written.get_future().get() == false);
  s.OnIo([&] {
    held.reset();
    return 0;
  });
  s.ExpectHealthy();
}

TEST_CASE("HTTP/1.0 clients get a streamed body without chunk framing") {
  TestServer s;
  AddHealthz(*s.router);
  s.router->Add("GET", "/v1/stream", [](const Request&, std::shared_ptr<Responder> res) {
    res->BeginChunked(200, "text/plain");
    res->WriteChunk("one,");
    res->WriteChunk("two");
    res->EndChunked();
  });
  s.Start();
  int fd = ConnectRaw(s.port);
  REQUIRE(SendRaw(
      fd, std::string("GET /v1/stream HTTP/1.0\r\nAuthorization: Bearer ") + kToken + "\r\n\r\n"));
  RawResult raw = ReadUntilClose(fd);
  ::close(fd);
  CHECK(raw.closed);
  CHECK(raw.data.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(raw.data.find("Transfer-Encoding") == std::string::npos);
  CHECK(raw.data.find("\r\n\r\none,two") != std::string::npos);
  s.ExpectHealthy();
}

TEST_CASE("a Responder released mid-stream truncates the response") {
  TestServer s;
  AddHealthz(*s.router);
  s.router->Add("GET", "/v1/stream", [](const Request&, std::shared_ptr<Responder> res) {
    res->BeginChunked(200, "text/plain");
    res->WriteChunk("x");
  });
  s.Start();
  int fd = ConnectRaw(s.port);
  REQUIRE(SendRaw(fd, std::string("GET /v1/stream HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ") +
                          kToken + "\r\n\r\n"));
  RawResult raw = ReadUntilClose(fd);
  ::close(fd);
  CHECK(raw.closed);
  CHECK(raw.data.find("\r\n\r\n1\r\nx\r\n") != std::string::npos);
  CHECK(raw.data.find("0\r\n\r\n") == std::string::npos);
  // Fetch sees the truncation as an error rather than a complete body.
  CHECK_FALSE(s.Get("/v1/stream").ok());
  s.ExpectHealthy();
}

TEST_CASE("pipelined requests behind a deferred answer are served in order") {
  TestServer s;
  AddHealthz(*s.router);
  s.router->Add("GET", "/v1/deferred", [&s](const Request& req, std::shared_ptr<Responder> res) {
    auto timer = std::make_shared<boost::asio::steady_timer>(s.io(), 50ms);
    std::string n = req.query.at("n");
    timer->async_wait([timer, res, n](boost::system::error_code) {
      res->Send(200, "text/plain", "answer-" + n + ";");
    });
  });
  s.Start();
  int fd = ConnectRaw(s.port);
  std::string auth = std::string("Authorization: Bearer ") + kToken + "\r\n";
  REQUIRE(SendRaw(fd, "GET /v1/deferred?n=1 HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n"));
  REQUIRE(SendRaw(fd, "GET /v1/deferred?n=2 HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n"));
  REQUIRE(SendRaw(
      fd, "GET /v1/deferred?n=3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + auth + "\r\n"));
  RawResult raw = ReadUntilClose(fd);
  ::close(fd);
  CHECK(raw.closed);
  size_t a1 = raw.data.find("answer-1;"), a2 = raw.data.find("answer-2;"),
         a3 = raw.data.find("answer-3;");
  REQUIRE(a1 != std::string::npos);
  REQUIRE(a2 != std::string::npos);
  REQUIRE(a3 != std::string::npos);
  CHECK(a1 < a2);
  CHECK(a2 < a3);
  s.ExpectHealthy();
}
