// Peer calls: SplitAddress, a bad address refused before any connection, and the pool
// that runs blocking calls (every posted call runs; Stop drops what has not begun).
#include "daemon/http/peer_calls.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>

using namespace traintl;

TEST_CASE("SplitAddress", "[peer_calls]") {
  std::string host;
  uint16_t port = 0;
  REQUIRE(SplitAddress("127.0.0.1:8080", &host, &port));
  CHECK(host == "127.0.0.1");
  CHECK(port == 8080);
  REQUIRE(SplitAddress("[::1]:65535", &host, &port));
  CHECK(host == "[::1]");
  CHECK(port == 65535);
  CHECK_FALSE(SplitAddress("127.0.0.1", &host, &port));
  CHECK_FALSE(SplitAddress(":80", &host, &port));
  CHECK_FALSE(SplitAddress("host:", &host, &port));
  CHECK_FALSE(SplitAddress("host:0", &host, &port));
  CHECK_FALSE(SplitAddress("host:65536", &host, &port));
  CHECK_FALSE(SplitAddress("host:port", &host, &port));
}

TEST_CASE("PeerCalls: token header, bad address", "[peer_calls]") {
  PeerCallOptions o;
  o.token = "secret";
  PeerCalls peers(o);
  CHECK(peers.AuthHeaders().at("Authorization") == "Bearer secret");
  auto r = peers.Call("no-port", "GET", "/healthz", "", std::chrono::milliseconds(100));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Status::Code::kInvalidArgument);
}

TEST_CASE("BlockingCallPool runs posted work on its threads", "[peer_calls]") {
  BlockingCallPool pool(2);
  pool.Start();
  std::atomic<int> ran{0};
  std::promise<void> done;
  for (int i = 0; i < 10; ++i) {
    pool.Post([&] {
      if (++ran == 10) done.set_value();
    });
  }
  REQUIRE(done.get_future().wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  CHECK_FALSE(pool.stopping());
  pool.Stop();
  CHECK(pool.stopping());
  pool.Stop();  // idempotent
}
