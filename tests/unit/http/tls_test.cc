// TLS tests of traintl::http::Server and Fetch with a CA and a server certificate generated
// by the test (test_certs.h): verified round trips, refused peers, and a server that stays
// healthy whatever a client does at the TLS layer.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "daemon/http/client.h"
#include "daemon/http/responder.h"
#include "daemon/http/router.h"
#include "daemon/http/server.h"
#include "tests/unit/http/test_certs.h"
#include "tests/unit/http/test_server.h"

using namespace traintl::http;
using nlohmann::json;
using traintl::testing::ConnectRaw;

namespace {

const char kToken[] = "tls-test-token-0123456789";

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/traintl-tls-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() { traintl::RemoveAll(path).IgnoreError(); }
  std::string path;
};

class TlsServer {
 public:
  explicit TlsServer(const traintl::testing::TestPki& pki) {
    options.port = 0;
    options.token = kToken;
    options.tls_cert_file = pki.cert;
    options.tls_key_file = pki.key;
    RouteOptions open;
    open.access = Access::kAnyone;
    router->Add(
        "GET", "/healthz",
        [](const Request&, std::shared_ptr<Responder> r) {
          r->SendJson(200, {{"status", "ok"}});
        },
        open);
    router->Add("GET", "/v1/echo", [](const Request& req, std::shared_ptr<Responder> r) {
      r->SendJson(200, {{"q", req.query}});
    });
    RouteOptions upload;
    upload.max_body_bytes = 4 << 20;
    router->Add(
        "PUT", "/v1/blobs/{sha256}",
        [](const Request& req, std::shared_ptr<Responder> r) {
          r->SendJson(201, {{"size", req.body.size()}});
        },
        upload);
  }
  ~TlsServer() {
    if (thread_.joinable()) {
      boost::asio::post(io_, [this] { server_->Stop(); });
      io_.stop();
      thread_.join();
    }
  }
  traintl::Status Start() {
    server_ = std::make_unique<Server>(io_, options, router);
    traintl::Status st = server_->Start();
    if (!st.ok()) return st;
    port = server_->local_endpoint().port();
    thread_ = std::thread([this] { io_.run(); });
    return st;
  }
  ServerOptions options;
  std::shared_ptr<Router> router = std::make_shared<Router>();
  uint16_t port = 0;
  bool tls() const { return server_->tls(); }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_{
      io_.get_executor()};
  std::unique_ptr<Server> server_;
  std::thread thread_;
};

std::map<std::string, std::string> Auth() {
  return {{"Authorization", std::string("Bearer ") + kToken}};
}

// True when the server closes the connection within `limit` (a hang guard, not a timing
// assertion: the server's own timeout is far shorter).
bool ClosedByServer(int fd, std::chrono::seconds limit = std::chrono::seconds(30)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  char buf[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    if (::read(fd, buf, sizeof buf) <= 0) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("tls: verified HTTPS round trip with a generated CA") {
  TempDir dir;
  auto pki = traintl::testing::MakeTestPki(dir.path);
  REQUIRE(pki.ok());
  TlsServer server(*pki);
  REQUIRE(server.Start().ok());
  CHECK(server.tls());
  ClientTls tls;
  tls.ca_file = pki->ca_cert;

  auto r = Fetch("127.0.0.1", server.port, "GET", "/v1/echo?a=1", "", Auth(),
                 std::chrono::seconds(10), &tls);
  REQUIRE(r.ok());
  CHECK(r->status == 200);
  CHECK(json::parse(r->body)["q"]["a"] == "1");

  // By DNS name too (the certificate names localhost).
  tls.server_name = "localhost";
  r = Fetch("127.0.0.1", server.port, "GET", "/healthz", "", {}, std::chrono::seconds(10), &tls);
  REQUIRE(r.ok());
  CHECK(r->status == 200);

  // Authentication is unchanged over TLS.
  tls.server_name.clear();
  r = Fetch("127.0.0.1", server.port, "GET", "/v1/echo", "", {}, std::chrono::seconds(10), &tls);
  REQUIRE(r.ok());
  CHECK(r->status == 401);

  // A body larger than one TLS record arrives whole.
  std::string big(3 << 20, 'z');
  r = Fetch("127.0.0.1", server.port, "PUT", "/v1/blobs/abc", big, Auth(), std::chrono::seconds(30),
            &tls);
  REQUIRE(r.ok());
  CHECK(r->status == 201);
  CHECK(json::parse(r->body)["size"] == big.size());
}

TEST_CASE("tls: the client refuses a server it cannot verify") {
  TempDir dir;
  auto pki = traintl::testing::MakeTestPki(dir.path);
  REQUIRE(pki.ok());
  TlsServer server(*pki);
  REQUIRE(server.Start().ok());

  SECTION("another CA") {
    ClientTls tls;
    tls.ca_file = pki->other_ca;
    auto r =
        Fetch("127.0.0.1", server.port, "GET", "/healthz", "", {}, std::chrono::seconds(10), &tls);
    REQUIRE(!r.ok());
    CHECK(r.status().code() == traintl::Status::Code::kUnavailable);
    CHECK(r.status().message().find("TLS handshake") != std::string::npos);
  }
  SECTION("the system store (the test CA is not in it)") {
    ClientTls tls;
    auto r =
        Fetch("127.0.0.1", server.port, "GET", "/healthz", "", {}, std::chrono::seconds(10), &tls);
    CHECK(!r.ok());
  }
  SECTION("a name the certificate does not carry") {
    ClientTls tls;
    tls.ca_file = pki->ca_cert;
    tls.server_name = "evil.example";
    auto r =
        Fetch("127.0.0.1", server.port, "GET", "/healthz", "", {}, std::chrono::seconds(10), &tls);
    CHECK(!r.ok());
  }
  SECTION("a missing CA file is a usage error") {
    ClientTls tls;
    tls.ca_file = dir.path + "/nope.pem";
    auto r =
        Fetch("127.0.0.1", server.port, "GET", "/healthz", "", {}, std::chrono::seconds(10), &tls);
    REQUIRE(!r.ok());
    CHECK(r.status().code() == traintl::Status::Code::kInvalidArgument);
  }
  // The server is unaffected by the failed handshakes.
  ClientTls good;
  good.ca_file = pki->ca_cert;
  auto r =
      Fetch("127.0.0.1", server.port, "GET", "/healthz", "", {}, std::chrono::seconds(10), &good);
  REQUIRE(r.ok());
  CHECK(r->status == 200);
}

TEST_CASE("tls: plain HTTP, garbage and stalled handshakes are closed, the server stays up") {
  TempDir dir;
  auto pki = traintl::testing::MakeTestPki(dir.path);
  REQUIRE(pki.ok());
  TlsServer server(*pki);
  server.options.header_timeout = std::chrono::milliseconds(300);
  REQUIRE(server.Start().ok());

  auto plain = Fetch("127.0.0.1", server.port, "GET", "/healthz");
  CHECK((!plain.ok() || plain->status != 200));

  int garbage = ConnectRaw(server.port);
  std::string junk(5000, '\x16');
  CHECK(::send(garbage, junk.data(), junk.size(), MSG_NOSIGNAL) > 0);
  CHECK(ClosedByServer(garbage));
  ::close(garbage);

  int stalled = ConnectRaw(server.port);  // never starts the handshake
  CHECK(ClosedByServer(stalled));
  ::close(stalled);

  ClientTls tls;
  tls.ca_file = pki->ca_cert;
  auto r =
      Fetch("127.0.0.1", server.port, "GET", "/healthz", "", {}, std::chrono::seconds(10), &tls);
  REQUIRE(r.ok());
  CHECK(r->status == 200);
}

TEST_CASE("tls: a stalled handshake is cut at tls_handshake_timeout, not header_timeout") {
  TempDir dir;
  auto pki = traintl::testing::MakeTestPki(dir.path);
  REQUIRE(pki.ok());
  TlsServer server(*pki);
  server.options.header_timeout = std::chrono::seconds(30);
  server.options.tls_handshake_timeout = std::chrono::milliseconds(300);
  REQUIRE(server.Start().ok());
  int stalled = ConnectRaw(server.port);
  CHECK(::send(stalled, "\x16", 1, MSG_NOSIGNAL) == 1);  // the first byte of a ClientHello
  // Closed long before the 30 s header time.
  CHECK(ClosedByServer(stalled, std::chrono::seconds(5)));
  ::close(stalled);
  ClientTls tls;
  tls.ca_file = pki->ca_cert;
  auto r =
      Fetch("127.0.0.1", server.port, "GET", "/healthz", "", {}, std::chrono::seconds(10), &tls);
  REQUIRE(r.ok());
  CHECK(r->status == 200);
}

TEST_CASE("tls: keep-alive and pipelined requests on one TLS connection") {
  TempDir dir;
  auto pki = traintl::testing::MakeTestPki(dir.path);
  REQUIRE(pki.ok());
  TlsServer server(*pki);
  REQUIRE(server.Start().ok());

  namespace asio = boost::asio;
  asio::io_context io;
  asio::ssl::context ctx(asio::ssl::context::tls_client);
  ctx.load_verify_file(pki->ca_cert);
  ctx.set_verify_mode(asio::ssl::verify_peer);
  asio::ssl::stream<asio::ip::tcp::socket> stream(io, ctx);
  stream.set_verify_callback(asio::ssl::host_name_verification("127.0.0.1"));
  stream.next_layer().connect(
      asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), server.port));
  stream.handshake(asio::ssl::stream_base::client);
  const std::string auth = std::string("Authorization: Bearer ") + kToken + "\r\n";
  std::string two = "GET /v1/echo?n=1 HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n" +
                    "GET /v1/echo?n=2 HTTP/1.1\r\nHost: x\r\n" + auth + "Connection: close\r\n\r\n";
  asio::write(stream, asio::buffer(two));
  std::string all;
  boost::system::error_code ec;
  char buf[4096];
  for (;;) {
    size_t n = stream.read_some(asio::buffer(buf), ec);
    all.append(buf, n);
    if (ec) break;
  }
  CHECK(all.find("\"n\":\"1\"") != std::string::npos);
  CHECK(all.find("\"n\":\"2\"") != std::string::npos);
  CHECK(all.rfind("HTTP/1.1 200", 0) == 0);
}

TEST_CASE("tls: Start refuses unusable certificate settings") {
  TempDir dir;
  auto pki = traintl::testing::MakeTestPki(dir.path);
  REQUIRE(pki.ok());
  boost::asio::io_context io;
  auto router = std::make_shared<Router>();
  auto start = [&](const std::string& cert, const std::string& key) {
    ServerOptions o;
    o.port = 0;
    o.tls_cert_file = cert;
    o.tls_key_file = key;
    Server s(io, o, router);
    return s.Start();
  };
  CHECK(start(pki->cert, "").code() == traintl::Status::Code::kInvalidArgument);
  CHECK(start(dir.path + "/missing.pem", pki->key).code() ==
        traintl::Status::Code::kInvalidArgument);
  // A key that is not the certificate's.
  TempDir other_dir;
  auto other = traintl::testing::MakeTestPki(other_dir.path);
  REQUIRE(other.ok());
  traintl::Status st = start(pki->cert, other->key);
  CHECK(st.code() == traintl::Status::Code::kInvalidArgument);
  CHECK(st.message().find(other->key) != std::string::npos);
  CHECK(start(pki->cert, pki->key).ok());
}

TEST_CASE("plain HTTP on a non-loopback address is refused unless explicitly allowed") {
  boost::asio::io_context io;
  auto router = std::make_shared<Router>();
  for (const char* address : {"0.0.0.0", "::", "10.1.2.3"}) {
    ServerOptions o;
    o.address = address;
    o.port = 0;
    Server s(io, o, router);
    traintl::Status st = s.Start();
    CHECK(st.code() == traintl::Status::Code::kPermissionDenied);
    CHECK(st.message().find("--insecure-allow-remote-without-tls") != std::string::npos);
  }
  for (const char* address : {"127.0.0.1", "127.0.0.2", "::1"}) {
    ServerOptions o;
    o.address = address;
    o.port = 0;
    Server s(io, o, router);
    traintl::Status st = s.Start();
    // ::1 may be unavailable (no IPv6); what matters is that loopback is never refused.
    CHECK(st.code() != traintl::Status::Code::kPermissionDenied);
  }
}
