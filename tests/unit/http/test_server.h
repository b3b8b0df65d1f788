// The fixture of the http::Server tests (http_server*_test.cc): TestServer, a server on
// 127.0.0.1 port 0 with its io_context on a background thread, and blocking raw-socket
// helpers that drive it byte by byte (each socket has a receive timeout, only as a guard
// against a hung server; tls_test.cc uses them too).
//
// Thread-safety: a TestServer belongs to the test's thread; OnIo runs work on its io
// thread and waits for the result. The socket helpers act only on the descriptor they are
// given; all but ConnectQuietly may REQUIRE, so they belong to the test's thread too.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "common/result.h"
#include "daemon/http/client.h"
#include "daemon/http/router.h"
#include "daemon/http/server.h"

namespace traintl::testing {

// The token of every TestServer.
inline constexpr char kToken[] = "s3cret-token-0123456789";

// {"Authorization": "Bearer <kToken>"}.
std::map<std::string, std::string> Auth();

// A server on its own io_context thread. Set `options` and add routes to `router` before
// Start().
class TestServer {
 public:
  TestServer();
  // Stops the server and joins the io thread.
  ~TestServer();
  TestServer(const TestServer&) = delete;
  TestServer& operator=(const TestServer&) = delete;

  // Starts the server (REQUIREs success) and sets `port`.
  void Start();

  // Runs `f` on the io thread and waits for its result.
  template <typename F>
  auto OnIo(F f) -> decltype(f()) {
    std::packaged_task<decltype(f())()> task(std::move(f));
    auto fut = task.get_future();
    boost::asio::post(io_, [&task] { task(); });
    return fut.get();
  }

  // GET `target` with `headers` (by default the valid token).
  Result<http::ClientResponse> Get(const std::string& target,
                                   std::map<std::string, std::string> headers = Auth());
  // CHECKs that GET /healthz (see AddHealthz) answers 200 {"status": "ok"}.
  void ExpectHealthy();

  boost::asio::io_context& io() { return io_; }
  http::Server& server() { return *server_; }
  // Server::Stop on the io thread.
  void Stop();

  http::ServerOptions options;
  std::shared_ptr<http::Router> router = std::make_shared<http::Router>();
  uint16_t port = 0;

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_{
      io_.get_executor()};
  std::unique_ptr<http::Server> server_;
  std::thread thread_;
};

// GET /healthz without a token, answering {"status": "ok"}.
void AddHealthz(http::Router& r);

// ---- Raw sockets (blocking, with a receive timeout as a hang guard only) ----

// `source`: the local address to connect from ("" = the kernel's choice, 127.0.0.1).
int ConnectRaw(uint16_t port, const char* source = "");
// ConnectRaw for other threads than the test's (no REQUIRE): -1 on failure.
int ConnectQuietly(uint16_t port, const char* source);
bool SendRaw(int fd, const std::string& data);

struct RawResult {
  std::string data;
  bool closed = false;  // the server closed (EOF or reset), as opposed to the hang guard
};

// Reads until the server closes the connection.
RawResult ReadUntilClose(int fd);
// Reads until `needle` has been seen (or the connection ends).
std::string ReadUntil(int fd, const std::string& needle);
// Occurrences of `needle` in `hay`.
size_t Count(const std::string& hay, const std::string& needle);
// True when the server has closed `fd` (EOF or reset, data before it discarded) within
// `limit`; false when it is still open then.
bool ClosedWithin(int fd, std::chrono::milliseconds limit);

// Polls `pred` until true; the bound only keeps a broken server from hanging the test.
template <typename P>
bool Eventually(P pred) {
  for (int i = 0; i < 400; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return false;
}

}  // namespace traintl::testing
