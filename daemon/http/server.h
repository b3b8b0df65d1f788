// Server: a hardened HTTP/1.1 server on Boost.Beast that dispatches requests through a
// Router. It bounds everything a client controls: header size, body size (per route),
// number of connections, and the time a client may take to send a request (slow-loris),
// to read a response, or to sit idle between keep-alive requests.
//
// Request processing order: parse header (431 when too large, 400 when malformed) ->
// route (404 / 405 with Allow / 400 for a refused path capture) -> bearer token when the
// route requires it (401) -> Content-Length against the route's limit (413) -> read body
// (413 when a chunked body overflows) -> handler. Answers given before the body was read
// close the connection afterwards (lingering briefly so the client still reads them).
//
// TLS: with ServerOptions::tls_cert_file and tls_key_file set, the server speaks only
// HTTPS (TLS 1.2 or later; the handshake counts against header_timeout). Plain HTTP on that
// port fails the handshake and is closed.
//
// Thread-safety: single-threaded. Everything, handlers included, runs on the one thread
// that runs the io_context passed in. Start() and Stop() must be called on that thread or
// while the io_context is not running; local_endpoint() is safe from any thread after
// Start() returned.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "common/status.h"
#include "daemon/http/router.h"

namespace traintl::http {

namespace internal {
struct ServerState;
}

struct ServerOptions {
  // Address to listen on. Default "127.0.0.1".
  std::string address = "127.0.0.1";
  // TCP port; 0 picks any free port (see Server::local_endpoint). Default 7450.
  uint16_t port = 7450;
  // Bearer token for routes with require_auth, compared in constant time and never
  // logged. When empty, every require_auth route answers 401 (fail closed). Default "".
  std::string token;
  // Request line plus header fields; larger gets 431 and the connection closes.
  // Default 16 KiB.
  size_t max_header_bytes = 16 * 1024;
  // Open connections; one accepted beyond this gets a best-effort 503 and is closed at
  // once. Default 256.
  size_t max_connections = 256;
  // Whole time allowed for a request's header, from the connection's accept (first
  // request) or from its first byte (later keep-alive requests). A client trickling a
  // header is cut off when it runs out. Default 10 s.
  std::chrono::milliseconds header_timeout{std::chrono::seconds(10)};
  // Longest gap without progress while reading a body. Default 30 s.
  std::chrono::milliseconds read_timeout{std::chrono::seconds(30)};
  // Longest time a single response write (a whole response or one chunk) may take before
  // the client is considered stuck and the connection closed. Default 30 s.
  std::chrono::milliseconds write_timeout{std::chrono::seconds(30)};
  // Idle time allowed between keep-alive requests. Default 60 s.
  std::chrono::milliseconds keep_alive_timeout{std::chrono::seconds(60)};
  // TLS certificate chain (PEM: the server's certificate first) and private key (PEM).
  // Both set: HTTPS only; both empty: plain HTTP; one alone is an error at Start. The key
  // file should be mode 0600. Default "".
  std::string tls_cert_file;
  std::string tls_key_file;
  // Plain HTTP on an address other than loopback (127.0.0.0/8, ::1) would send the bearer
  // token and all job data in clear over the network: Start refuses it unless TLS is
  // configured or this is set (traintld --insecure-allow-remote-without-tls). Default false.
  bool allow_insecure_remote = false;
  // After an answer that closes the connection with request bytes still unread, how long
  // the server keeps draining input so the client is not reset before reading the answer.
  // Default 2 s.
  std::chrono::milliseconds linger_timeout{std::chrono::seconds(2)};
};

class Server {
 public:
  // `io_context` must outlive the Server and every Responder it hands out.
  Server(boost::asio::io_context& io_context, ServerOptions options,
         std::shared_ptr<Router> router);
  // Stops (see Stop()).
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Loads the TLS certificate and key (when configured), binds and listens, then accepts
  // on the io_context. Errors: InvalidArgument for a bad address or an unusable
  // certificate/key (the message names the file), PermissionDenied for plain HTTP on a
  // non-loopback address (see allow_insecure_remote), Unavailable when binding fails (e.g.
  // "address already in use"), FailedPrecondition when called twice.
  Status Start();
  // The bound address (with the real port when options.port was 0).
  boost::asio::ip::tcp::endpoint local_endpoint() const { return local_endpoint_; }
  // True when the server speaks HTTPS (set by Start).
  bool tls() const;
  // Closes the acceptor and every connection; pending Responders see closed(). Idempotent.
  void Stop();

 private:
  void DoAccept();

  boost::asio::io_context& io_context_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::shared_ptr<internal::ServerState> state_;
  boost::asio::ip::tcp::endpoint local_endpoint_;
  boost::asio::steady_timer accept_backoff_;
  std::chrono::steady_clock::time_point last_busy_log_{};
  bool started_ = false;
};

}  // namespace traintl::http
