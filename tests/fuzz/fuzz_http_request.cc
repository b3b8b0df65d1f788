// Fuzz target: the HTTP request path of traintl::http::Server up to the handlers - Beast's
// parser under the server's limits, target and query decoding, routing and path-capture
// validation, bearer-token check, body limits (Content-Length and chunked), keep-alive and
// pipelining, early answers and lingering close.
//
// Input: the raw bytes a client sends on one connection. A server with the API's route
// shapes (docs/API.md) runs in-process on 127.0.0.1; each input is written on a fresh
// connection, the write side is shut down, and the answer read until the server closes.
// Invariants:
//  - the server always finishes the connection (no hang: it has the client's EOF);
//  - whatever it answers is HTTP/1.1 responses;
//  - a handler behind auth is only reached with the right token;
//  - no path capture reaching a handler is empty, ".", "..", or contains '/' or NUL, and
//    joined to a directory it stays inside that directory;
//  - afterwards the server still answers GET /healthz with 200.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <nlohmann/json.hpp>

#include "common/crypto.h"
#include "common/logging.h"
#include "daemon/http/responder.h"
#include "daemon/http/router.h"
#include "daemon/http/server.h"
#include "proto/job_spec.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using traintl::http::Request;
using traintl::http::Responder;
using traintl::http::RouteOptions;

constexpr char kToken[] = "fuzz-token";
constexpr char kClusterToken[] = "fuzz-cluster";
// Generous: a slow sanitizer build on a loaded machine must not look like a hang.
constexpr auto kConnectionDeadline = std::chrono::seconds(20);

void CheckCapture(const std::string& value) {
  FUZZ_CHECK(!value.empty());
  FUZZ_CHECK(value != "." && value != "..");
  FUZZ_CHECK(value.find('/') == std::string::npos);
  FUZZ_CHECK(value.find('\0') == std::string::npos);
}

void CheckAuthorized(const Request& req, const char* token = kToken) {
  std::string auth = req.header("authorization");
  FUZZ_CHECK(auth.find(token) != std::string::npos);
}

void CheckParams(const Request& req) {
  for (const auto& [name, value] : req.params) CheckCapture(value);
}

class Harness {
 public:
  Harness() {
    auto router = std::make_shared<traintl::http::Router>();
    RouteOptions open;
    open.access = traintl::http::Access::kAnyone;
    router->Add(
        "GET", "/healthz",
        [](const Request&, std::shared_ptr<Responder> r) {
          r->SendJson(200, {{"status", "ok"}});
        },
        open);
    auto job_handler = [](const Request& req, std::shared_ptr<Responder> r) {
      CheckAuthorized(req);
      CheckParams(req);
      r->SendJson(200, {{"job_id", req.params.at("job")}, {"query", req.query}});
    };
    for (const char* p : {"/v1/jobs/{job}", "/v1/jobs/{job}/checkpoints", "/v1/jobs/{job}/metrics"})
      router->Add("GET", p, job_handler);
    router->Add("POST", "/v1/jobs/{job}/stop", job_handler);
    router->Add("GET", "/v1/jobs", [](const Request& req, std::shared_ptr<Responder> r) {
      CheckAuthorized(req);
      r->SendJson(200, {{"jobs", nlohmann::json::array()}});
    });
    router->Add("GET", "/v1/nodes", [](const Request& req, std::shared_ptr<Responder> r) {
      CheckAuthorized(req);
      r->SendJson(200, {{"nodes", nlohmann::json::array()}});
    });
    // A daemon-to-daemon route: the cluster credential alone opens it.
    RouteOptions cluster;
    cluster.access = traintl::http::Access::kCluster;
    router->Add(
        "POST", "/v1/internal/events",
        [](const Request& req, std::shared_ptr<Responder> r) {
          CheckAuthorized(req, kClusterToken);
          r->SendJson(200, {{"ok", true}});
        },
        cluster);
    // The real handler parses the body as an untrusted job spec.
    router->Add("POST", "/v1/jobs", [](const Request& req, std::shared_ptr<Responder> r) {
      CheckAuthorized(req);
      traintl::SpecError error;
      auto doc = traintl::ParseJsonStrict(req.body, traintl::kMaxSpecDepth + 1,
                                          traintl::kMaxSpecTextBytes, &error);
      if (!doc.ok() || !doc->is_object() || !doc->contains("spec")) {
        r->SendError(400, error.message.empty() ? "bad request" : error.message);
        return;
      }
      auto spec = traintl::ParseJobSpec((*doc)["spec"], &error);
      if (!spec.ok()) {
        r->SendError(400, error.message, {{"field", error.field}});
        return;
      }
      r->SendJson(201, {{"job_id", "000000000000"}, {"state", "PENDING"}});
    });
    RouteOptions upload;
    upload.max_body_bytes = 64 * 1024;
    router->Add(
        "PUT", "/v1/blobs/{sha256}",
        [](const Request& req, std::shared_ptr<Responder> r) {
          CheckAuthorized(req);
          CheckParams(req);
          const std::string& sha = req.params.at("sha256");
          if (!traintl::IsSha256Hex(sha)) return r->SendError(400, "bad digest");
          if (traintl::Sha256Hex(req.body) != sha) return r->SendError(400, "digest mismatch");
          r->SendJson(201, {{"sha256", sha}, {"size", req.body.size()}});
        },
        upload);
    router->Add("HEAD", "/v1/blobs/{sha256}", [](const Request& req, std::shared_ptr<Responder> r) {
      CheckAuthorized(req);
      CheckParams(req);
      r->Send(404, "application/json", "{}");
    });
    // Streaming, answered after the handler returned (as log following does).
    router->Add("GET", "/v1/jobs/{job}/logs",
                [this](const Request& req, std::shared_ptr<Responder> r) {
                  CheckAuthorized(req);
                  CheckParams(req);
                  int lines = 2;
                  auto tail = req.query.find("tail");
                  if (tail != req.query.end() && !tail->second.empty() && tail->second.size() < 3 &&
                      tail->second.find_first_not_of("0123456789") == std::string::npos) {
                    lines = std::stoi(tail->second);
                  }
                  asio::post(io_, [r, lines] {
                    r->BeginChunked(200, "text/plain");
                    for (int i = 0; i < lines; ++i)
                      r->WriteChunk("line " + std::to_string(i) + "\n");
                    r->EndChunked();
                  });
                });

    traintl::http::ServerOptions options;
    options.address = "127.0.0.1";
    options.port = 0;
    options.token = kToken;
    options.cluster_token = kClusterToken;
    options.max_header_bytes = 8 * 1024;
    options.header_timeout = std::chrono::seconds(5);
    options.read_timeout = std::chrono::seconds(5);
    options.write_timeout = std::chrono::seconds(5);
    options.keep_alive_timeout = std::chrono::seconds(5);
    options.linger_timeout = std::chrono::milliseconds(200);
    server_ = std::make_unique<traintl::http::Server>(io_, options, router);
    traintl::Status st = server_->Start();
    FUZZ_CHECK(st.ok());
    endpoint_ = server_->local_endpoint();
  }

  // Sends `input` on a new connection, half-closes, and returns everything the server
  // wrote until it closed.
  std::string Exchange(const std::string& input) {
    tcp::socket client(io_);
    client.connect(endpoint_);
    std::string response;
    bool done = false;
    asio::async_write(client, asio::buffer(input), [&](boost::system::error_code ec, size_t) {
      boost::system::error_code ignored;
      if (!ec) client.shutdown(tcp::socket::shutdown_send, ignored);
    });
    auto chunk = std::make_shared<std::array<char, 16384>>();
    std::function<void()> read_more = [&]() {
      client.async_read_some(asio::buffer(*chunk), [&](boost::system::error_code ec, size_t n) {
        if (ec) {
          done = true;
          return;
        }
        if (response.size() < (1u << 20)) response.append(chunk->data(), n);
        read_more();
      });
    };
    read_more();
    io_.restart();
    auto deadline = std::chrono::steady_clock::now() + kConnectionDeadline;
    while (!done && std::chrono::steady_clock::now() < deadline) {
      io_.run_one_for(std::chrono::milliseconds(100));
    }
    FUZZ_CHECK(done);  // the server hung on a connection whose client had finished
    boost::system::error_code ignored;
    client.close(ignored);
    io_.poll();  // lets the server see the close and release the connection
    return response;
  }

 private:
  asio::io_context io_;
  std::unique_ptr<traintl::http::Server> server_;
  tcp::endpoint endpoint_;
};

Harness* harness = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  traintl::SetLogLevel(traintl::LogLevel::kError);
  harness = new Harness();  // lives for the whole process, as the fuzzer does
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string input(reinterpret_cast<const char*>(data), size);
  std::string response = harness->Exchange(input);
  if (!response.empty()) FUZZ_CHECK(response.rfind("HTTP/1.1 ", 0) == 0);
  std::string health = harness->Exchange("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  FUZZ_CHECK(health.rfind("HTTP/1.1 200 ", 0) == 0);
  return 0;
}
