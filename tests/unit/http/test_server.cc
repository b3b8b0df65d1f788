#include "tests/unit/http/test_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cerrno>

#include <nlohmann/json.hpp>

#include "daemon/http/responder.h"

namespace traintl::testing {

using nlohmann::json;

std::map<std::string, std::string> Auth() {
  return {{"Authorization", std::string("Bearer ") + kToken}};
}

TestServer::TestServer() {
  options.port = 0;
  options.token = kToken;
}

TestServer::~TestServer() {
  if (thread_.joinable()) {
    Stop();
    io_.stop();
    thread_.join();
  }
  server_.reset();
}

void TestServer::Start() {
  server_ = std::make_unique<http::Server>(io_, options, router);
  auto st = server_->Start();
  INFO(st.ToString());
  REQUIRE(st.ok());
  port = server_->local_endpoint().port();
  REQUIRE(port != 0);
  thread_ = std::thread([this] { io_.run(); });
}

Result<http::ClientResponse> TestServer::Get(const std::string& target,
                                             std::map<std::string, std::string> headers) {
  return http::Fetch("127.0.0.1", port, "GET", target, "", headers);
}

void TestServer::ExpectHealthy() {
  auto r = http::Fetch("127.0.0.1", port, "GET", "/healthz");
  INFO((r.ok() ? std::string() : r.status().ToString()));
  REQUIRE(r.ok());
  CHECK(r->status == 200);
  CHECK(json::parse(r->body)["status"] == "ok");
}

void TestServer::Stop() {
  OnIo([this] {
    server_->Stop();
    return 0;
  });
}

void AddHealthz(http::Router& r) {
  http::RouteOptions open;
  open.access = http::Access::kAnyone;
  r.Add(
      "GET", "/healthz",
      [](const http::Request&, std::shared_ptr<http::Responder> res) {
        res->SendJson(200, {{"status", "ok"}});
      },
      open);
}

int ConnectRaw(uint16_t port, const char* source) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (*source != '\0') {
    sockaddr_in local{};
    local.sin_family = AF_INET;
    REQUIRE(::inet_pton(AF_INET, source, &local.sin_addr) == 1);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) == 0);
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  return fd;
}

int ConnectQuietly(uint16_t port, const char* source) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in local{};
  local.sin_family = AF_INET;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::inet_pton(AF_INET, source, &local.sin_addr) != 1 ||
      ::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool SendRaw(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

RawResult ReadUntilClose(int fd) {
  RawResult r;
  char buf[4096];
  while (true) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      r.data.append(buf, static_cast<size_t>(n));
      continue;
    }
    r.closed = n == 0 || errno == ECONNRESET || errno == EPIPE;
    return r;
  }
}

std::string ReadUntil(int fd, const std::string& needle) {
  std::string data;
  char buf[4096];
  while (data.find(needle) == std::string::npos) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  return data;
}

size_t Count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = hay.find(needle); pos != std::string::npos; pos = hay.find(needle, pos + 1))
    ++n;
  return n;
}

bool ClosedWithin(int fd, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  char buf[4096];
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count()))) <= 0) return false;
    if (::recv(fd, buf, sizeof(buf), MSG_DONTWAIT) <= 0) return true;
  }
}

}  // namespace traintl::testing
