// End-to-end tests of traintl::http::Server over loopback (test_server.h): connection
// floods - max_connections and who is displaced or refused, the per-source bound on
// anonymous connections, their short deadline, and authenticated clients under a flood.
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

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

TEST_CASE("a new connection beyond max_connections displaces the oldest anonymous one") {
  TestServer s;
  s.options.max_connections = 4;
  s.options.max_anonymous_per_source = 0;  // only the table's bound here
  AddHealthz(*s.router);
  s.router->Add("GET", "/v1/jobs", [](const Request&, std::shared_ptr<Responder> res) {
    res->SendJson(200, {{"jobs", json::array()}});
  });
  s.Start();
  // Four anonymous connections that send one byte and then nothing fill the table (the
  // kernel hands over a connection only once it sent something: TCP_DEFER_ACCEPT).
  int idle[4];
  for (int& fd : idle) {
    fd = ConnectRaw(s.port);
    REQUIRE(SendRaw(fd, "G"));
    // Accepted one by one, so that their age order is the order here.
    REQUIRE(Eventually([&] {
      return s.OnIo([&] { return s.server().stats().accepted; }) ==
             static_cast<uint64_t>(&fd - idle + 1);
    }));
  }
  // An authenticated client is served: it takes the oldest idle connection's slot
  // instead of being refused.
  auto r = s.Get("/v1/jobs");
  REQUIRE(r.ok());
  CHECK(r->status == 200);
  RawResult oldest = ReadUntilClose(idle[0]);
  CHECK(oldest.closed);
  CHECK(oldest.data.empty());
  CHECK_FALSE(ClosedWithin(idle[3], 50ms));
  // So is an anonymous one, and so on: nobody is refused while someone merely waits.
  for (int i = 0; i < 6; ++i) s.ExpectHealthy();
  ServerStats st = s.OnIo([&] { return s.server().stats(); });
  CHECK(st.evicted >= 1);
  CHECK(st.refused == 0);
  for (int fd : idle) ::close(fd);
}

TEST_CASE("when every connection is mid-request, a new one is refused with 503") {
  TestServer s;
  s.options.max_connections = 3;
  AddHealthz(*s.router);
  std::vector<std::shared_ptr<Responder>> held;
  s.router->Add("GET", "/v1/wait",
                [&](const Request&, std::shared_ptr<Responder> res) { held.push_back(res); });
  s.Start();
  int busy[3];
  for (int& fd : busy) {
    fd = ConnectRaw(s.port);
    REQUIRE(SendRaw(fd, std::string("GET /v1/wait HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ") +
                            kToken + "\r\n\r\n"));
  }
  REQUIRE(Eventually([&] { return s.OnIo([&] { return held.size(); }) == 3; }));

  int extra = ConnectRaw(s.port);
  SendRaw(extra, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  RawResult raw = ReadUntilClose(extra);
  ::close(extra);
  CHECK(raw.closed);
  CHECK(raw.data.find("200 OK") == std::string::npos);
  if (!raw.data.empty()) CHECK(raw.data.rfind("HTTP/1.1 503", 0) == 0);
  CHECK(s.OnIo([&] { return s.server().stats().refused; }) >= 1);

  // The busy connections were not disturbed; once they are answered, new ones are served.
  s.OnIo([&] {
    for (auto& r : held) r->SendJson(200, {{"done", true}});
    held.clear();
    return 0;
  });
  for (int fd : busy) {
    CHECK(ReadUntil(fd, "{\"done\":true}").rfind("HTTP/1.1 200", 0) == 0);
    ::close(fd);
  }
  CHECK(Eventually([&] {
    auto r = Fetch("127.0.0.1", s.port, "GET", "/healthz", "", {}, 2s);
    return r.ok() && r->status == 200;
  }));
  s.ExpectHealthy();
}

TEST_CASE("one source's anonymous connections are bounded and displace only each other") {
  TestServer s;
  s.options.max_anonymous_per_source = 3;
  AddHealthz(*s.router);
  s.router->Add("GET", "/v1/jobs", [](const Request&, std::shared_ptr<Responder> res) {
    res->SendJson(200, {{"jobs", json::array()}});
  });
  s.Start();
  auto accepted = [&] { return s.OnIo([&] { return s.server().stats().accepted; }); };
  int mine = ConnectRaw(s.port);  // from 127.0.0.1, sends its request line only
  REQUIRE(SendRaw(mine, "GET /v1/jobs HTTP/1.1\r\n"));
  REQUIRE(Eventually([&] { return accepted() == 1; }));
  int flood[6];
  for (int& fd : flood) {
    fd = ConnectRaw(s.port, "127.0.0.2");
    REQUIRE(SendRaw(fd, "G"));
    const uint64_t n = static_cast<uint64_t>(&fd - flood) + 2;
    REQUIRE(Eventually([&] { return accepted() == n; }));
  }
  // 127.0.0.2's three oldest made room for its three newest; 127.0.0.1's was left alone.
  for (int i = 0; i < 3; ++i) CHECK(ReadUntilClose(flood[i]).closed);
  for (int i = 3; i < 6; ++i) CHECK_FALSE(ClosedWithin(flood[i], 50ms));
  CHECK(s.OnIo([&] { return s.server().stats().evicted; }) == 3);
  REQUIRE(SendRaw(mine, std::string("Host: x\r\nAuthorization: Bearer ") + kToken + "\r\n\r\n"));
  CHECK(ReadUntil(mine, "{\"jobs\":[]}").rfind("HTTP/1.1 200", 0) == 0);
  // Authenticated, it no longer counts against 127.0.0.1's anonymous bound.
  int more[3];
  for (int& fd : more) {
    fd = ConnectRaw(s.port);
    REQUIRE(SendRaw(fd, "G"));
  }
  CHECK(Eventually([&] { return accepted() == 10; }));
  CHECK_FALSE(ClosedWithin(mine, 50ms));
  for (int fd : more) CHECK_FALSE(ClosedWithin(fd, 0ms));
  ::close(mine);
  for (int fd : flood) ::close(fd);
  for (int fd : more) ::close(fd);
  s.ExpectHealthy();
}

TEST_CASE("anonymous connections get a short deadline, authenticated ones the long idle time") {
  TestServer s;
  s.options.anonymous_header_timeout = 300ms;
  s.options.header_timeout = 30s;
  s.options.keep_alive_timeout = 30s;
  AddHealthz(*s.router);
  s.router->Add("GET", "/v1/jobs", [](const Request&, std::shared_ptr<Responder> res) {
    res->SendJson(200, {{"jobs", json::array()}});
  });
  s.Start();
  const std::string authed =
      std::string("GET /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ") + kToken +
      "\r\n\r\n";

  SECTION("a connection that sends nothing") {
    int fd = ConnectRaw(s.port);
    // Long before header_timeout (30 s); the kernel holds it for about a second first.
    CHECK(ClosedWithin(fd, 8000ms));
    ::close(fd);
  }
  SECTION("a connection that sends part of a request line") {
    int fd = ConnectRaw(s.port);
    REQUIRE(SendRaw(fd, "GET /heal"));
    CHECK(ClosedWithin(fd, 5000ms));
    ::close(fd);
  }
  SECTION("a header trickled after a pause") {
    int fd = ConnectRaw(s.port);
    std::this_thread::sleep_for(200ms);
    REQUIRE(SendRaw(fd, "GET /healthz HTTP/1.1\r\n"));
    // The deadline counts from accept, not from the first byte.
    CHECK(ClosedWithin(fd, 5000ms));
    ::close(fd);
  }
  SECTION("an anonymous keep-alive connection after its answer") {
    int fd = ConnectRaw(s.port);
    REQUIRE(SendRaw(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"));
    CHECK(ReadUntil(fd, "{\"status\":\"ok\"}").rfind("HTTP/1.1 200", 0) == 0);
    CHECK(ClosedWithin(fd, 5000ms));
    ::close(fd);
  }
  SECTION("a wrong token does not earn the long idle time") {
    int fd = ConnectRaw(s.port);
    REQUIRE(SendRaw(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nope\r\n\r\n"));
    CHECK(ReadUntil(fd, "{\"status\":\"ok\"}").rfind("HTTP/1.1 200", 0) == 0);
    CHECK(ClosedWithin(fd, 5000ms));
    ::close(fd);
  }
  SECTION("an authenticated keep-alive connection stays open while idle") {
    int fd = ConnectRaw(s.port);
    REQUIRE(SendRaw(fd, authed));
    CHECK(ReadUntil(fd, "{\"jobs\":[]}").rfind("HTTP/1.1 200", 0) == 0);
    CHECK_FALSE(ClosedWithin(fd, 1000ms));
    REQUIRE(SendRaw(fd, authed));
    CHECK(ReadUntil(fd, "{\"jobs\":[]}").rfind("HTTP/1.1 200", 0) == 0);
    ::close(fd);
  }
  s.ExpectHealthy();
}

TEST_CASE("a flood of reconnecting idle clients does not keep authenticated clients out") {
  TestServer s;
  s.options.max_connections = 32;
  s.options.max_anonymous_per_source = 16;
  AddHealthz(*s.router);
  s.router->Add("GET", "/v1/jobs", [](const Request&, std::shared_ptr<Responder> res) {
    res->SendJson(200, {{"jobs", json::array()}});
  });
  s.Start();
  // 64 connections held open from each of two sources, each having sent one byte; each
  // one the server closes is replaced at once.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> opened{0};
  auto flooder = [&](const char* source) {
    std::vector<int> fds;
    for (int i = 0; i < 64; ++i) fds.push_back(-1);
    while (!stop) {
      for (int& fd : fds) {
        if (fd >= 0 && ClosedWithin(fd, 0ms)) {
          ::close(fd);
          fd = -1;
        }
        if (fd < 0) {
          fd = ConnectQuietly(s.port, source);
          if (fd >= 0) ::send(fd, "G", 1, MSG_NOSIGNAL);
          ++opened;
        }
      }
      std::this_thread::sleep_for(1ms);
    }
    for (int fd : fds) ::close(fd);
  };
  std::thread a(flooder, "127.0.0.1"), b(flooder, "127.0.0.3");
  REQUIRE(Eventually([&] { return opened.load() > 256; }));
  int answered = 0;
  for (int i = 0; i < 50; ++i) {
    auto r = Fetch("127.0.0.1", s.port, "GET", "/v1/jobs", "", Auth(), 5s);
    answered += r.ok() && r->status == 200;
  }
  stop = true;
  a.join();
  b.join();
  CHECK(answered == 50);
  s.ExpectHealthy();
}
