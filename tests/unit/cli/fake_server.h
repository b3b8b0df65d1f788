// FakeServer: a tiny HTTP/1.1 server on 127.0.0.1 (port 0) for testing the CLI's real
// HTTP client. One thread serves one connection at a time; every request is recorded.
//
// Thread-safety: requests() may be called from any thread; the handler runs on the
// server thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace traintl {
namespace cli {
namespace testing {

struct RecordedRequest {
  std::string method;
  std::string target;
  std::string body;
  std::string authorization;
  std::string content_type;
};

struct FakeResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  // When non-empty, the body is sent chunked, one HTTP chunk per element, and `body` is
  // ignored.
  std::vector<std::string> chunks;
  // Called on the server thread before chunk i is written.
  std::function<void(size_t i)> before_chunk;
};

class FakeServer {
 public:
  using Handler = std::function<FakeResponse(const RecordedRequest&)>;

  explicit FakeServer(Handler handler);
  ~FakeServer();
  FakeServer(const FakeServer&) = delete;
  FakeServer& operator=(const FakeServer&) = delete;

  uint16_t port() const { return port_; }
  std::vector<RecordedRequest> requests() const;

 private:
  void Serve();

  Handler handler_;
  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mu_;
  std::vector<RecordedRequest> requests_;
  std::thread thread_;
};

}  // namespace testing
}  // namespace cli
}  // namespace traintl
