// The shared client (common/http_client.h) against a small blocking Beast server on
// 127.0.0.1: Range honoured or ignored, redirects, chunked streaming, timeouts, the cancel
// flag, TLS verification and the error classes.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>

#include "common/file_util.h"
#include "common/http_client.h"
#include "tests/unit/http/test_certs.h"

using namespace traintl::http;
using traintl::Status;
namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using Request = bhttp::request<bhttp::string_body>;

namespace {

struct TestServerOptions {
  // HTTPS with this certificate and key.
  std::string tls_cert;
  std::string tls_key;
  // Accept, then neither read nor write until the server is destroyed.
  bool silent = false;
};

// Serves one connection at a time: reads a request and hands it to the handler, which
// answers with raw bytes through `write` (so that framing is exactly what a test says).
class TestServer {
 public:
  using Write = std::function<void(const std::string&)>;
  using Handler = std::function<void(const Request&, const Write&)>;
  using Options = TestServerOptions;

  explicit TestServer(Handler handler, Options options = {})
      : handler_(std::move(handler)),
        options_(std::move(options)),
        acceptor_(ioc_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)),
        tls_(asio::ssl::context::tls_server) {
    port_ = acceptor_.local_endpoint().port();
    if (!options_.tls_cert.empty()) {
      tls_.use_certificate_chain_file(options_.tls_cert);
      tls_.use_private_key_file(options_.tls_key, asio::ssl::context::pem);
    }
    thread_ = std::thread([this] { Run(); });
  }
  ~TestServer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    boost::system::error_code ec;
    tcp::socket wake(ioc_);
    wake.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_), ec);
    thread_.join();
  }

  uint16_t port() const { return port_; }
  std::string url(const std::string& target) const {
    return std::string(options_.tls_cert.empty() ? "http" : "https") +
           "://127.0.0.1:" + std::to_string(port_) + target;
  }
  // Blocks a handler until the server is destroyed.
  void WaitForStop() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return stop_; });
  }
  int connections() const { return connections_; }

 private:
  bool stopping() {
    std::lock_guard<std::mutex> lock(mu_);
    return stop_;
  }

  void Run() {
    while (!stopping()) {
      tcp::socket socket(ioc_);
      boost::system::error_code ec;
      acceptor_.accept(socket, ec);
      if (ec || stopping()) continue;
      ++connections_;
      if (options_.silent) {
        WaitForStop();
        continue;
      }
      if (options_.tls_cert.empty()) {
        Serve(socket);
        continue;
      }
      asio::ssl::stream<tcp::socket&> stream(socket, tls_);
      stream.handshake(asio::ssl::stream_base::server, ec);
      if (!ec) Serve(stream);
    }
  }

  template <class Stream>
  void Serve(Stream& stream) {
    boost::system::error_code ec;
    boost::beast::flat_buffer buffer;
    Request req;
    bhttp::read(stream, buffer, req, ec);
    if (ec) return;
    handler_(req, [&](const std::string& bytes) {
      boost::system::error_code ignored;
      asio::write(stream, asio::buffer(bytes), ignored);
    });
    // No TLS close_notify: the client must cope with a bare TCP close.
    boost::system::error_code ignored;
    boost::beast::get_lowest_layer(stream).shutdown(tcp::socket::shutdown_both, ignored);
  }

  Handler handler_;
  const Options options_;
  asio::io_context ioc_;
  tcp::acceptor acceptor_;
  asio::ssl::context tls_;
  uint16_t port_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::atomic<int> connections_{0};
  std::thread thread_;
};

std::string Response(const std::string& status, const std::string& fields,
                     const std::string& body) {
  return "HTTP/1.1 " + status + "\r\n" + fields + "Content-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

// A file server for one resource that honours "Range: bytes=N-" when `ranges`.
TestServer::Handler FileHandler(std::string content, bool ranges) {
  return [content = std::move(content), ranges](const Request& req, const TestServer::Write& w) {
    auto range = req.find(bhttp::field::range);
    if (!ranges || range == req.end()) return w(Response("200 OK", "", content));
    const std::string v(range->value());
    const size_t from = std::stoul(v.substr(6));
    const std::string total = std::to_string(content.size());
    if (from >= content.size()) {
      return w(
          Response("416 Range Not Satisfiable", "Content-Range: bytes */" + total + "\r\n", ""));
    }
    w(Response("206 Partial Content",
               "Content-Range: bytes " + std::to_string(from) + "-" +
                   std::to_string(content.size() - 1) + "/" + total + "\r\n",
               content.substr(from)));
  };
}

ClientRequest Get(const TestServer& server, const std::string& target) {
  ClientRequest r;
  r.host = "127.0.0.1";
  r.port = server.port();
  r.target = target;
  return r;
}

std::string ReadBody(ClientStream& stream) {
  std::string body;
  REQUIRE(stream.ReadAll(&body).ok());
  return body;
}

// A port on 127.0.0.1 with nothing listening.
uint16_t ClosedPort() {
  asio::io_context ioc;
  tcp::acceptor probe(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  return probe.local_endpoint().port();
}

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/traintl-http-client-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() { traintl::RemoveAll(path).IgnoreError(); }
  std::string path;
};

std::string Digits(size_t n) {
  std::string s(n, '0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('0' + i % 10);
  return s;
}

}  // namespace

TEST_CASE("http client: a whole response, fields and the request it sent") {
  Request seen;
  TestServer server([&](const Request& req, const TestServer::Write& w) {
    seen = req;
    w(Response("201 Created", "X-A: 1\r\nX-A: 2\r\n", "made"));
  });
  ClientRequest r = Get(server, "/v1/x?y=1");
  r.method = "PUT";
  r.body = "payload";
  r.headers["Authorization"] = "Bearer t";
  auto response = Exchange(r);
  REQUIRE(response.ok());
  CHECK(response->status == 201);
  CHECK(response->body == "made");
  CHECK(response->header("x-a") == "1, 2");
  CHECK(response->header("X-Missing").empty());
  CHECK(seen.method_string() == "PUT");
  CHECK(seen.target() == "/v1/x?y=1");
  CHECK(seen.body() == "payload");
  CHECK(seen[bhttp::field::authorization] == "Bearer t");
  CHECK(seen[bhttp::field::host] == "127.0.0.1:" + std::to_string(server.port()));

  SECTION("HEAD answers carry no body") {
    TestServer head([](const Request&, const TestServer::Write& w) {
      w("HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\n");
    });
    ClientRequest h = Get(head, "/");
    h.method = "HEAD";
    auto answer = Exchange(h);
    REQUIRE(answer.ok());
    CHECK(answer->status == 200);
    CHECK(answer->body.empty());
  }
}

TEST_CASE("http client: Range honoured (206) or ignored (200, skipped here)") {
  const std::string content = Digits(100000);
  for (bool ranges : {true, false}) {
    INFO("server honours ranges: " << ranges);
    TestServer server(FileHandler(content, ranges));
    ClientRequest r = Get(server, "/f");
    r.range_from = 12345;
    auto stream = ClientStream::Open(r);
    REQUIRE(stream.ok());
    CHECK((*stream)->status() == (ranges ? 206 : 200));
    CHECK((*stream)->range_honoured() == ranges);
    REQUIRE((*stream)->total_size().has_value());
    CHECK(*(*stream)->total_size() == content.size());
    CHECK(ReadBody(**stream) == content.substr(12345));
  }
  SECTION("an offset past the end: 416 with the size") {
    TestServer server(FileHandler(content, true));
    ClientRequest r = Get(server, "/f");
    r.range_from = content.size();
    auto stream = ClientStream::Open(r);
    REQUIRE(stream.ok());
    CHECK((*stream)->status() == 416);
    CHECK((*stream)->total_size() == content.size());
  }
}

TEST_CASE("http client: redirects") {
  std::string auth_seen = "unset";
  TestServer target([&](const Request& req, const TestServer::Write& w) {
    auth_seen = std::string(req[bhttp::field::authorization]);
    w(Response("200 OK", "", "at " + std::string(req.target())));
  });
  TestServer server([&](const Request& req, const TestServer::Write& w) {
    const std::string t(req.target());
    if (t == "/a/old") return w(Response("301 Moved Permanently", "Location: new?q=1\r\n", ""));
    if (t == "/a/new?q=1") return w(Response("302 Found", "Location: /b\r\n", ""));
    if (t == "/b") return w(Response("200 OK", "", "b"));
    if (t == "/away") {
      return w(
          Response("307 Temporary Redirect", "Location: " + target.url("/there") + "\r\n", ""));
    }
    if (t == "/loop") return w(Response("302 Found", "Location: /loop\r\n", ""));
    w(Response("404 Not Found", "", ""));
  });
  ClientOptions follow;
  follow.max_redirects = 3;

  SECTION("relative and absolute-path locations") {
    auto stream = ClientStream::Open(Get(server, "/a/old"), follow);
    REQUIRE(stream.ok());
    CHECK((*stream)->status() == 200);
    CHECK(ReadBody(**stream) == "b");
    CHECK((*stream)->url() == server.url("/b"));
  }
  SECTION("not followed unless asked") {
    auto response = Exchange(Get(server, "/a/old"));
    REQUIRE(response.ok());
    CHECK(response->status == 301);
    CHECK(response->header("location") == "new?q=1");
  }
  SECTION("another server gets no Authorization") {
    ClientRequest r = Get(server, "/away");
    r.headers["Authorization"] = "Bearer secret";
    auto response = Exchange(r, follow);
    REQUIRE(response.ok());
    CHECK(response->body == "at /there");
    CHECK(auth_seen.empty());
  }
  SECTION("too many") {
    auto response = Exchange(Get(server, "/loop"), follow);
    REQUIRE_FALSE(response.ok());
    CHECK(response.status().code() == Status::Code::kInvalidArgument);
    CHECK(response.status().message() == "more than 3 redirects");
  }
}

TEST_CASE("http client: a chunked body is handed over as it arrives") {
  std::mutex mu;
  std::condition_variable cv;
  bool first_read = false;
  bool waited = false;
  TestServer server([&](const Request&, const TestServer::Write& w) {
    w("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n7\r\nline "
      "1\n\r\n");
    {
      // The second chunk waits for the client to have read the first: proof that Read does
      // not wait for more than what has arrived. The bound only keeps a broken client from
      // hanging the test.
      std::unique_lock<std::mutex> lock(mu);
      waited = cv.wait_for(lock, std::chrono::seconds(20), [&] { return first_read; });
    }
    w("7\r\nline 2\n\r\n0\r\n\r\n");
  });
  auto stream = ClientStream::Open(Get(server, "/logs"));
  REQUIRE(stream.ok());
  char buf[4096];
  auto n = (*stream)->Read(buf, sizeof buf);
  REQUIRE(n.ok());
  CHECK(std::string(buf, *n) == "line 1\n");
  {
    std::lock_guard<std::mutex> lock(mu);
    first_read = true;
  }
  cv.notify_all();
  CHECK(ReadBody(**stream) == "line 2\n");
  CHECK(waited);
  CHECK_FALSE((*stream)->total_size().has_value());
}

TEST_CASE("http client: timeouts and cancellation") {
  TestServer* self = nullptr;
  TestServer stalls([&](const Request&, const TestServer::Write& w) { self->WaitForStop(); });
  self = &stalls;

  SECTION("no answer within the total timeout: Internal, the request was sent") {
    ClientOptions o;
    o.timeout = std::chrono::milliseconds(200);
    const auto start = std::chrono::steady_clock::now();
    auto r = Exchange(Get(stalls, "/"), o);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Status::Code::kInternal);
    CHECK(r.status().message() == "reading the response head timed out after 200 ms");
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  }
  SECTION("the idle timeout") {
    ClientOptions o;
    o.idle_timeout = std::chrono::milliseconds(150);
    auto r = Exchange(Get(stalls, "/"), o);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message() == "reading the response head timed out after 150 ms");
  }
  SECTION("a body that stops coming") {
    TestServer* trickle_self = nullptr;
    TestServer trickle([&](const Request&, const TestServer::Write& w) {
      w("HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\n12345");
      trickle_self->WaitForStop();
    });
    trickle_self = &trickle;
    ClientOptions o;
    o.idle_timeout = std::chrono::milliseconds(150);
    auto stream = ClientStream::Open(Get(trickle, "/"), o);
    REQUIRE(stream.ok());
    char buf[16];
    auto n = (*stream)->Read(buf, sizeof buf);
    REQUIRE(n.ok());
    CHECK(*n == 5);
    auto late = (*stream)->Read(buf, sizeof buf);
    REQUIRE_FALSE(late.ok());
    CHECK(late.status().message() == "reading the body timed out after 150 ms");
  }
  SECTION("the cancel flag") {
    std::atomic<bool> cancel{false};
    ClientOptions o;
    o.cancel = &cancel;
    std::thread canceller([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      cancel = true;
    });
    auto r = Exchange(Get(stalls, "/"), o);
    canceller.join();
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Status::Code::kUnavailable);
    CHECK(r.status().message() == "cancelled");
  }
}

TEST_CASE("http client: connection failures are Unavailable") {
  ClientRequest r;
  r.host = "127.0.0.1";
  r.port = ClosedPort();
  auto refused = Exchange(r);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == Status::Code::kUnavailable);
  CHECK(refused.status().message() == "connection refused");

  r.headers["X-Bad"] = "a\r\nInjected: 1";
  auto bad = Exchange(r);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == Status::Code::kInvalidArgument);
}

// Threads of this process now (the entries of /proc/self/task).
int ThreadCount() {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)entry;
    ++n;
  }
  return n;
}

TEST_CASE("http client: an IP literal is connected to without a resolver thread") {
  // Asio resolves on a thread of its own; the handler runs while the client waits for its
  // answer, so it sees that thread when there is one.
  std::atomic<int> threads_during{0};
  TestServer server([&](const Request&, const TestServer::Write& w) {
    threads_during = ThreadCount();
    w(Response("200 OK", "", "ok"));
  });
  const int threads_before = ThreadCount();
  ClientRequest r = Get(server, "/");

  SECTION("IPv4") {
    auto response = Exchange(r);
    REQUIRE(response.ok());
    CHECK(response->body == "ok");
    CHECK(threads_during == threads_before);
  }
  SECTION("a host name is still resolved") {
    r.host = "localhost";
    auto response = Exchange(r);
    // "localhost" may name ::1 first, where nothing listens: the next address is tried.
    INFO((response.ok() ? "" : response.status().message()));
    REQUIRE(response.ok());
    CHECK(response->body == "ok");
    // The way this test counts threads does see Asio's resolver thread.
    CHECK(threads_during == threads_before + 1);
  }
  SECTION("a literal nothing listens on: connection refused, as when resolved") {
    r.port = ClosedPort();
    auto refused = Exchange(r);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().code() == Status::Code::kUnavailable);
    CHECK(refused.status().message() == "connection refused");
  }
  SECTION("an IPv6 literal") {
    asio::io_context ioc;
    boost::system::error_code ec;
    tcp::acceptor v6(ioc);
    v6.open(tcp::v6(), ec);
    if (!ec) v6.bind(tcp::endpoint(asio::ip::make_address("::1"), 0), ec);
    if (!ec) v6.listen(1, ec);
    if (ec) {
      WARN("no IPv6 loopback here (" << ec.message() << "): not tested");
      return;
    }
    std::thread serve([&] {
      tcp::socket socket(ioc);
      boost::system::error_code e;
      v6.accept(socket, e);
      if (e) return;
      boost::beast::flat_buffer buffer;
      Request req;
      bhttp::read(socket, buffer, req, e);
      threads_during = ThreadCount();
      asio::write(socket, asio::buffer(Response("200 OK", "", "v6")), e);
      socket.shutdown(tcp::socket::shutdown_both, e);
    });
    const int with_server = ThreadCount();
    r.host = "::1";
    r.port = v6.local_endpoint().port();
    auto response = Exchange(r);
    serve.join();
    REQUIRE(response.ok());
    CHECK(response->body == "v6");
    CHECK(threads_during == with_server);
  }
}

TEST_CASE("http client: a 206 must start at the byte asked for") {
  TestServer server([](const Request& req, const TestServer::Write& w) {
    const std::string t(req.target());
    // From byte 0 whatever was asked: a server (or cache) that mixes up ranges.
    if (t == "/wrong")
      return w(Response("206 Partial Content", "Content-Range: bytes 0-9/10\r\n", "0123456789"));
    if (t == "/garbled")
      return w(Response("206 Partial Content", "Content-Range: bytes x\r\n", ""));
    w(Response("206 Partial Content", "Content-Range: bytes 5-7/10\r\n", "567"));
  });
  ClientRequest r = Get(server, "/wrong");
  r.range_from = 5;
  auto wrong = ClientStream::Open(r);
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.status().code() == Status::Code::kInvalidArgument);
  CHECK(wrong.status().message() ==
        "the server answered 206 with Content-Range 'bytes 0-9/10' to a request for the bytes "
        "from 5");
  r.target = "/garbled";
  CHECK(ClientStream::Open(r).status().code() == Status::Code::kInvalidArgument);
  // Less than the rest of the resource is a range all the same: its end is told.
  r.target = "/short";
  auto part = ClientStream::Open(r);
  REQUIRE(part.ok());
  CHECK((*part)->range_end() == std::optional<uint64_t>(7));
  CHECK((*part)->total_size() == std::optional<uint64_t>(10));
  CHECK(ReadBody(**part) == "567");
}

TEST_CASE("http client: endless chunk framing fails the read instead of filling memory") {
  // 1 MiB of a chunk extension, or of a trailer, then nothing: without a bound the client
  // would buffer it all and wait; with one it fails once its buffer is full.
  const std::string flood(1 << 20, 'x');
  const std::string head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (const std::string& bytes :
       {head + "1;" + flood, head + "3\r\nabc\r\n0\r\nX-Trailer: " + flood}) {
    std::unique_ptr<TestServer> server;
    server = std::make_unique<TestServer>([&](const Request&, const TestServer::Write& w) {
      w(bytes);
      server->WaitForStop();
    });
    ClientOptions o;
    o.idle_timeout = std::chrono::milliseconds(5000);
    auto stream = ClientStream::Open(Get(*server, "/"), o);
    REQUIRE(stream.ok());
    std::string body;
    Status st = (*stream)->ReadAll(&body);
    REQUIRE_FALSE(st.ok());
    // Not "timed out": the bound, not the idle timeout, ended it.
    CHECK_THAT(st.message(), Catch::Contains("buffer overflow"));
    CHECK(body.size() <= 3);
  }
}

TEST_CASE("http client: TLS is verified") {
  TempDir dir;
  auto pki = traintl::testing::MakeTestPki(dir.path);
  REQUIRE(pki.ok());
  TestServer::Options tls_options;
  tls_options.tls_cert = pki->cert;
  tls_options.tls_key = pki->key;
  TestServer server(FileHandler("secret data", true), tls_options);
  ClientRequest r = Get(server, "/f");
  r.tls.emplace();

  SECTION("trusted CA: a round trip") {
    r.tls->ca_file = pki->ca_cert;
    auto response = Exchange(r);
    REQUIRE(response.ok());
    CHECK(response->body == "secret data");
    r.tls->server_name = "localhost";
    CHECK(Exchange(r).ok());
  }
  SECTION("a body that ends with a TCP close without close_notify") {
    TestServer eof(
        [](const Request&, const TestServer::Write& w) {
          w("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end");
        },
        tls_options);
    ClientRequest e = Get(eof, "/");
    e.tls.emplace();
    e.tls->ca_file = pki->ca_cert;
    auto response = Exchange(e);
    REQUIRE(response.ok());
    CHECK(response->body == "until the end");
  }
  SECTION("a redirect to http is refused: it would drop TLS") {
    TestServer plain(FileHandler("in the clear", false));
    TestServer redirect(
        [&](const Request&, const TestServer::Write& w) {
          w(Response("302 Found", "Location: " + plain.url("/f") + "\r\n", ""));
        },
        tls_options);
    ClientRequest d = Get(redirect, "/");
    d.tls.emplace();
    d.tls->ca_file = pki->ca_cert;
    ClientOptions o;
    o.max_redirects = 3;
    auto response = Exchange(d, o);
    REQUIRE_FALSE(response.ok());
    CHECK(response.status().code() == Status::Code::kInvalidArgument);
    CHECK_THAT(response.status().message(),
               Catch::Contains("refused a redirect from https to " + plain.url("/f")));
    CHECK(plain.connections() == 0);
  }
  SECTION("another CA: no request is sent") {
    r.tls->ca_file = pki->other_ca;
    auto response = Exchange(r);
    REQUIRE_FALSE(response.ok());
    CHECK(response.status().code() == Status::Code::kUnavailable);
    CHECK_THAT(response.status().message(),
               Catch::StartsWith("TLS handshake with 127.0.0.1:" + std::to_string(server.port())) &&
                   Catch::Contains("certificate verify failed"));
  }
  SECTION("a name the certificate lacks") {
    r.tls->ca_file = pki->ca_cert;
    r.tls->server_name = "evil.example";
    auto response = Exchange(r);
    REQUIRE_FALSE(response.ok());
    CHECK(response.status().code() == Status::Code::kUnavailable);
  }
  SECTION("an unreadable CA file") {
    r.tls->ca_file = dir.path + "/missing.pem";
    auto response = Exchange(r);
    REQUIRE_FALSE(response.ok());
    CHECK(response.status().code() == Status::Code::kInvalidArgument);
  }
  SECTION("a server that never completes the handshake: Unavailable within connect_timeout") {
    TestServer silent([](const Request&, const TestServer::Write&) {}, {"", "", true});
    ClientRequest s = Get(silent, "/");
    s.tls.emplace();
    s.tls->ca_file = pki->ca_cert;
    ClientOptions o;
    o.connect_timeout = std::chrono::milliseconds(200);
    auto response = Exchange(s, o);
    REQUIRE_FALSE(response.ok());
    CHECK(response.status().code() == Status::Code::kUnavailable);
    CHECK(response.status().message() ==
          "TLS handshake with 127.0.0.1:" + std::to_string(silent.port()) +
              " timed out after 200 ms");
  }
}

TEST_CASE("http client: URL parsing") {
  auto u = ParseUrl("HTTPS://example.com/a/b.csv?x=1#frag");
  REQUIRE(u.ok());
  CHECK(u->tls);
  CHECK(u->host == "example.com");
  CHECK(u->port == 443);
  CHECK(u->target == "/a/b.csv?x=1");
  auto v6 = ParseUrl("http://[::1]:8080");
  REQUIRE(v6.ok());
  CHECK(v6->host == "::1");
  CHECK(v6->port == 8080);
  CHECK(v6->target == "/");
  CHECK_FALSE(ParseUrl("http://:80/x").ok());
  CHECK_FALSE(ParseUrl("http://host:70000/x").ok());
  CHECK_FALSE(ParseUrl("http://host:0/x").ok());
  CHECK_FALSE(ParseUrl("http://user:pw@host/x").ok());
  CHECK_FALSE(ParseUrl("ftp://host/x").ok());
}
