// End-to-end tests of traintl::http::Server over loopback (test_server.h): routing and
// decoding, the bearer token, HEAD, and the server's Start and Stop.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "common/status.h"
#include "daemon/http/browser_session.h"
#include "daemon/http/client.h"
#include "daemon/http/responder.h"
#include "daemon/http/router.h"
#include "daemon/http/server.h"
#include "tests/unit/http/test_server.h"

using namespace traintl::http;
using namespace traintl::testing;
using namespace std::chrono_literals;
using nlohmann::json;

TEST_CASE("route params and query strings are decoded") {
  TestServer s;
  AddHealthz(*s.router);
  s.router->Add("GET", "/v1/jobs/{job}/logs",
                [](const Request& req, std::shared_ptr<Responder> res) {
                  res->SendJson(200, {{"job", req.params.at("job")},
                                      {"path", req.path},
                                      {"query", req.query},
                                      {"remote_set", !req.remote.empty()},
                                      {"x_test", req.header("x-TEST")}});
                });
  s.Start();

  auto r = Fetch("127.0.0.1", s.port, "GET", "/v1/jobs/ab%20c/logs?tail=10&x=a%2Bb&y=c+d&rank=0",
                 "", {{"Authorization", std::string("Bearer ") + kToken}, {"X-Test", "hello"}});
  REQUIRE(r.ok());
  REQUIRE(r->status == 200);
  CHECK(r->header("Content-Type") == "application/json");
  json j = json::parse(r->body);
  CHECK(j["job"] == "ab c");
  CHECK(j["path"] == "/v1/jobs/ab c/logs");
  CHECK(j["query"]["tail"] == "10");
  CHECK(j["query"]["x"] == "a+b");
  CHECK(j["query"]["y"] == "c d");
  CHECK(j["query"]["rank"] == "0");
  CHECK(j["remote_set"] == true);
  CHECK(j["x_test"] == "hello");

  auto bad_query = s.Get("/v1/jobs/abc/logs?tail=%zz");
  REQUIRE(bad_query.ok());
  CHECK(bad_query->status == 400);
  s.ExpectHealthy();
}

TEST_CASE("unknown paths get 404 and wrong methods 405 with Allow") {
  TestServer s;
  AddHealthz(*s.router);
  auto noop = [](const Request&, std::shared_ptr<Responder> res) {
    res->Send(200, "text/plain", "x");
  };
  s.router->Add("GET", "/v1/jobs/{job}/logs", noop);
  s.router->Add("GET", "/v1/jobs", noop);
  s.router->Add("POST", "/v1/jobs", noop);
  s.Start();

  auto r = s.Get("/nope");
  REQUIRE(r.ok());
  CHECK(r->status == 404);
  CHECK(json::parse(r->body).contains("error"));

  r = Fetch("127.0.0.1", s.port, "DELETE", "/v1/jobs/abc/logs", "", Auth());
  REQUIRE(r.ok());
  CHECK(r->status == 405);
  CHECK(r->header("Allow") == "GET");
  CHECK(json::parse(r->body).contains("error"));

  r = Fetch("127.0.0.1", s.port, "PUT", "/v1/jobs", "{}", Auth());
  REQUIRE(r.ok());
  CHECK(r->status == 405);
  CHECK(r->header("allow") == "GET, POST");
  s.ExpectHealthy();
}

TEST_CASE("bearer token is required on auth routes and not on open ones") {
  TestServer s;
  AddHealthz(*s.router);
  std::atomic<int> calls{0};
  s.router->Add("GET", "/v1/nodes", [&](const Request&, std::shared_ptr<Responder> res) {
    ++calls;
    res->SendJson(200, {{"nodes", json::array()}});
  });
  s.Start();

  auto r = s.Get("/v1/nodes", {});
  REQUIRE(r.ok());
  CHECK(r->status == 401);
  CHECK(json::parse(r->body) == json{{"error", "missing bearer token"}});
  CHECK(r->header("WWW-Authenticate").rfind("Bearer", 0) == 0);

  r = s.Get("/v1/nodes", {{"Authorization", "Basic dXNlcjpwYXNz"}});
  REQUIRE(r.ok());
  CHECK(r->status == 401);
  CHECK(json::parse(r->body)["error"] == "missing bearer token");

  r = s.Get("/v1/nodes", {{"Authorization", "Bearer wrong-token"}});
  REQUIRE(r.ok());
  CHECK(r->status == 401);
  CHECK(json::parse(r->body) == json{{"error", "invalid token"}});
  CHECK(r->header("WWW-Authenticate").rfind("Bearer", 0) == 0);

  r = s.Get("/v1/nodes", {{"Authorization", std::string("Bearer ") + kToken + "x"}});
  REQUIRE(r.ok());
  CHECK(r->status == 401);
  CHECK(calls == 0);

  r = s.Get("/v1/nodes");
  REQUIRE(r.ok());
  CHECK(r->status == 200);
  r = s.Get("/v1/nodes", {{"authorization", std::string("bearer ") + kToken}});
  REQUIRE(r.ok());
  CHECK(r->status == 200);
  CHECK(calls == 2);

  // No token on an open route.
  s.ExpectHealthy();
}

TEST_CASE("an empty server token refuses every auth route") {
  TestServer s;
  s.options.token = "";
  AddHealthz(*s.router);
  s.router->Add("GET", "/v1/nodes", [](const Request&, std::shared_ptr<Responder> res) {
    res->SendJson(200, json::object());
  });
  s.Start();
  auto r = s.Get("/v1/nodes", {{"Authorization", "Bearer x"}});
  REQUIRE(r.ok());
  CHECK(r->status == 401);
  s.ExpectHealthy();
}

TEST_CASE("cluster routes take the cluster credential alone, user routes the token alone") {
  constexpr char kCluster[] = "cluster-credential-0123456789";
  TestServer s;
  s.options.cluster_token = kCluster;
  s.options.browser_sessions = true;
  AddHealthz(*s.router);
  std::atomic<int> calls{0};
  auto handler = [&](const Request&, std::shared_ptr<Responder> res) {
    ++calls;
    res->SendJson(200, json::object());
  };
  RouteOptions cluster;
  cluster.access = Access::kCluster;
  s.router->Add("POST", "/v1/internal/events", handler, cluster);
  s.router->Add("GET", "/v1/jobs", handler);
  s.Start();

  auto status = [&](const std::string& method, const std::string& target,
                    std::map<std::string, std::string> headers) {
    auto r = Fetch("127.0.0.1", s.port, method, target, "{}", headers);
    REQUIRE(r.ok());
    return r->status;
  };
  const std::map<std::string, std::string> user = Auth();
  const std::map<std::string, std::string> daemon = {
      {"Authorization", std::string("Bearer ") + kCluster}};
  const BrowserSession session = NewBrowserSession(kToken, std::time(nullptr), 3600);
  const std::map<std::string, std::string> browser = {
      {"Cookie", std::string(kSessionCookie) + "=" + session.cookie},
      {std::string(kSessionHeader), session.page_key}};
  CHECK(status("POST", "/v1/internal/events", {}) == 401);
  CHECK(status("POST", "/v1/internal/events", {{"Authorization", "Bearer x"}}) == 401);
  CHECK(status("POST", "/v1/internal/events", user) == 403);
  CHECK(status("POST", "/v1/internal/events", browser) == 403);
  CHECK(status("GET", "/v1/jobs", daemon) == 403);
  CHECK(calls == 0);
  CHECK(status("POST", "/v1/internal/events", daemon) == 200);
  CHECK(status("GET", "/v1/jobs", user) == 200);
  CHECK(status("GET", "/v1/jobs", browser) == 200);
  CHECK(calls == 3);
  s.ExpectHealthy();
}

TEST_CASE("an empty cluster credential refuses every cluster route") {
  TestServer s;  // options.cluster_token stays ""
  AddHealthz(*s.router);
  RouteOptions cluster;
  cluster.access = Access::kCluster;
  s.router->Add(
      "GET", "/v1/internal/x",
      [](const Request&, std::shared_ptr<Responder> res) { res->SendJson(200, json::object()); },
      cluster);
  s.Start();
  for (auto headers : {Auth(), std::map<std::string, std::string>{{"Authorization", "Bearer "}}}) {
    auto r = s.Get("/v1/internal/x", headers);
    REQUIRE(r.ok());
    CHECK(r->status != 200);
  }
  s.ExpectHealthy();
}

TEST_CASE("path traversal in route params is refused before the handler") {
  TestServer s;
  AddHealthz(*s.router);
  std::atomic<int> calls{0};
  s.router->Add("GET", "/v1/jobs/{job}/logs", [&](const Request&, std::shared_ptr<Responder> res) {
    ++calls;
    res->Send(200, "text/plain", "log");
  });
  s.Start();
  for (const char* target :
       {"/v1/jobs/..%2Fetc/logs", "/v1/jobs/%2e%2e/logs", "/v1/jobs/%2E%2E/logs",
        "/v1/jobs/../logs", "/v1/jobs/./logs", "/v1/jobs/%2e/logs", "/v1/jobs/a%2Fb/logs",
        "/v1/jobs/%2F/logs", "/v1/jobs//logs", "/v1/jobs/%00/logs", "/v1/jobs/%zz/logs",
        "/v1/jobs/..%2F..%2F..%2Fetc%2Fpasswd/logs"}) {
    INFO(target);
    auto r = s.Get(target);
    REQUIRE(r.ok());
    CHECK(r->status == 400);
    CHECK(json::parse(r->body).contains("error"));
  }
  CHECK(calls == 0);
  auto r = s.Get("/v1/jobs/3f9c/logs");
  REQUIRE(r.ok());
  CHECK(r->status == 200);
  CHECK(calls == 1);
  s.ExpectHealthy();
}

TEST_CASE("HEAD answers carry no body") {
  TestServer s;
  AddHealthz(*s.router);
  s.router->Add("HEAD", "/v1/blobs/{sha256}",
                [](const Request& req, std::shared_ptr<Responder> res) {
                  res->Send(req.params.at("sha256") == "aa" ? 200 : 404, "", "");
                });
  s.Start();
  auto r = Fetch("127.0.0.1", s.port, "HEAD", "/v1/blobs/aa", "", Auth());
  REQUIRE(r.ok());
  CHECK(r->status == 200);
  r = Fetch("127.0.0.1", s.port, "HEAD", "/v1/blobs/bb", "", Auth());
  REQUIRE(r.ok());
  CHECK(r->status == 404);
  CHECK(r->body.empty());
  s.ExpectHealthy();
}

TEST_CASE("Start reports a busy port and a bad address and Stop closes everything") {
  TestServer s;
  AddHealthz(*s.router);
  std::shared_ptr<Responder> held;
  s.router->Add("GET", "/v1/wait",
                [&](const Request&, std::shared_ptr<Responder> res) { held = res; });
  s.Start();

  boost::asio::io_context other;
  ServerOptions same_port;
  same_port.port = s.port;
  same_port.token = kToken;
  Server second(other, same_port, std::make_shared<Router>());
  auto st = second.Start();
  CHECK_FALSE(st.ok());
  CHECK(st.code() == traintl::Status::Code::kUnavailable);
  CHECK(st.message().find("in use") != std::string::npos);

  ServerOptions bad;
  bad.address = "not-an-address";
  Server third(other, bad, std::make_shared<Router>());
  st = third.Start();
  CHECK(st.code() == traintl::Status::Code::kInvalidArgument);

  s.ExpectHealthy();

  // A pending request is cut when the server stops, and nothing is accepted afterwards.
  auto pending = std::async(std::launch::async, [&] { return s.Get("/v1/wait"); });
  REQUIRE(Eventually([&] { return s.OnIo([&] { return held != nullptr; }); }));
  s.Stop();
  auto cut = pending.get();
  CHECK_FALSE(cut.ok());
  CHECK(s.OnIo([&] { return held->closed(); }));
  s.OnIo([&] {
    held.reset();  // answers nothing: the connection is gone
    return 0;
  });
  auto after = Fetch("127.0.0.1", s.port, "GET", "/healthz", "", {}, 2s);
  CHECK_FALSE(after.ok());
}
