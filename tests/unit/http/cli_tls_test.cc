// The CLI's HTTPS transport (cli/http_client.h, BeastHttpClient with tls) against the real
// traintl::http::Server with a generated CA: verified exchanges, chunked streaming over
// TLS, and refusals when the server cannot be verified or does not speak TLS.
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "cli/http_client.h"
#include "common/file_util.h"
#include "daemon/http/responder.h"
#include "daemon/http/router.h"
#include "daemon/http/server.h"
#include "tests/unit/http/test_certs.h"

namespace http = traintl::http;
using traintl::cli::BeastHttpClient;
using traintl::cli::BeastHttpClientOptions;
using traintl::cli::HttpRequest;

namespace {

const char kToken[] = "cli-tls-token-0123456789";

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/traintl-clitls-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() { traintl::RemoveAll(path).IgnoreError(); }
  std::string path;
};

class Daemonish {
 public:
  Daemonish(const std::string& cert, const std::string& key) {
    http::ServerOptions o;
    o.port = 0;
    o.token = kToken;
    o.tls_cert_file = cert;
    o.tls_key_file = key;
    auto router = std::make_shared<http::Router>();
    router->Add("GET", "/v1/jobs", [](const http::Request&, std::shared_ptr<http::Responder> r) {
      r->SendJson(200, {{"jobs", nlohmann::json::array()}});
    });
    router->Add("GET", "/v1/jobs/{job}/logs",
                [](const http::Request&, std::shared_ptr<http::Responder> r) {
                  r->BeginChunked(200, "text/plain");
                  for (int i = 0; i < 100; i++) r->WriteChunk("line " + std::to_string(i) + "\n");
                  r->EndChunked();
                });
    server_ = std::make_unique<http::Server>(io_, o, router);
    REQUIRE(server_->Start().ok());
    port = server_->local_endpoint().port();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~Daemonish() {
    boost::asio::post(io_, [this] { server_->Stop(); });
    io_.stop();
    thread_.join();
  }
  uint16_t port = 0;

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_{
      io_.get_executor()};
  std::unique_ptr<http::Server> server_;
  std::thread thread_;
};

BeastHttpClientOptions Options(uint16_t port, const std::string& ca) {
  BeastHttpClientOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.token = kToken;
  o.tls = true;
  o.tls_ca_file = ca;
  o.connect_timeout_ms = 5000;
  o.request_timeout_ms = 30000;
  return o;
}

}  // namespace

TEST_CASE("cli tls: requests and streamed logs over verified HTTPS") {
  TempDir dir;
  auto pki = traintl::testing::MakeTestPki(dir.path);
  REQUIRE(pki.ok());
  Daemonish d(pki->cert, pki->key);
  BeastHttpClient client(Options(d.port, pki->ca_cert));
  HttpRequest req;
  req.target = "/v1/jobs";
  auto r = client.Send(req);
  REQUIRE(r.ok());
  CHECK(r->status == 200);
  CHECK(nlohmann::json::parse(r->body)["jobs"].empty());

  req.target = "/v1/jobs/abc/logs?follow=1";
  std::string streamed;
  r = client.Stream(req, [&](std::string_view piece) { streamed.append(piece); });
  REQUIRE(r.ok());
  CHECK(r->status == 200);
  CHECK(streamed.rfind("line 0\n", 0) == 0);
  CHECK(streamed.find("line 99\n") != std::string::npos);
}

TEST_CASE("cli tls: an unverifiable or plain server gets no request") {
  TempDir dir;
  auto pki = traintl::testing::MakeTestPki(dir.path);
  REQUIRE(pki.ok());
  Daemonish d(pki->cert, pki->key);
  HttpRequest req;
  req.target = "/v1/jobs";

  SECTION("another CA") {
    BeastHttpClient client(Options(d.port, pki->other_ca));
    auto r = client.Send(req);
    REQUIRE(!r.ok());
    CHECK(r.status().code() == traintl::Status::Code::kUnavailable);
    CHECK(r.status().message().find("certificate verify failed") != std::string::npos);
  }
  SECTION("a name the certificate lacks") {
    auto o = Options(d.port, pki->ca_cert);
    o.tls_server_name = "other.example";
    BeastHttpClient client(o);
    CHECK(!client.Send(req).ok());
  }
  SECTION("an unreadable CA file") {
    BeastHttpClient client(Options(d.port, dir.path + "/missing.pem"));
    auto r = client.Send(req);
    REQUIRE(!r.ok());
    CHECK(r.status().code() == traintl::Status::Code::kInvalidArgument);
  }
  SECTION("plain HTTP client to the TLS port") {
    auto o = Options(d.port, pki->ca_cert);
    o.tls = false;
    BeastHttpClient client(o);
    auto r = client.Send(req);
    CHECK((!r.ok() || r->status != 200));
  }
}
