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
// HTTPS (TLS 1.2 or later; the handshake has its own deadline, tls_handshake_timeout).
// Plain HTTP on that port fails the handshake and is closed.
//
// Floods. A connection is anonymous until one of its requests carries the valid bearer
// token; the daemon's own traffic (heartbeats, forwarded requests, launches) and the CLI
// always carry it, in the first request of each connection. Anonymous connections cannot
// crowd authenticated traffic out:
//   - an anonymous connection must complete each request header within
//     anonymous_header_timeout (2 s) of the start of its wait (accept, TLS handshake done,
//     or its previous answer sent), idle time included; a TLS handshake must finish within
//     tls_handshake_timeout (2 s). Authenticated connections keep the longer
//     keep_alive_timeout and header_timeout;
//   - when max_connections are open, a new connection closes the oldest anonymous
//     connection (then, if there is none, the authenticated connection idle the longest)
//     instead of being refused; it is refused (503) only when every connection is an
//     authenticated one busy with a request;
//   - one source address may hold at most max_anonymous_per_source anonymous
//     connections; a new one beyond that closes that source's oldest anonymous
//     connection.
// The listening socket defers accept until a connection's first bytes arrive
// (TCP_DEFER_ACCEPT, about anonymous_header_timeout): a client sends its request right
// after connecting, so its header is read as soon as it is accepted, before newer
// connections could displace it. A flood of slow or idle connections, reconnecting as
// fast as it is closed, only displaces itself; connections that send nothing wait in the
// kernel until that time has passed and only then take a slot.
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
  // Bearer token of the kUser routes, compared in constant time and never logged. When
  // empty, every kUser route answers 401 (fail closed). Default "".
  std::string token;
  // Bearer credential of the kCluster routes (what daemons send each other), likewise
  // compared and never logged; only it opens them (`token` too only when they are equal).
  // When empty, every kCluster route answers 401. Default "".
  std::string cluster_token;
  // Also accept a browser session (daemon/http/browser_session.h) in place of the bearer
  // token: the cookie derived from `token` together with the header kSessionHeader.
  // Default false.
  bool browser_sessions = false;
  // Request line plus header fields; larger gets 431 and the connection closes.
  // Default 16 KiB.
  size_t max_header_bytes = 16 * 1024;
  // Open connections. A connection accepted beyond this closes the oldest anonymous
  // connection, else the longest-idle authenticated one; when every connection is an
  // authenticated one busy with a request, it gets a best-effort 503 (with the
  // kRefusedUnreadHeader of client.h) and is closed at once. Default 256.
  size_t max_connections = 256;
  // Anonymous connections (no request with the valid token yet) from one source address.
  // A connection beyond it closes that source's oldest anonymous connection. 0: no
  // per-source bound. Default 64.
  size_t max_anonymous_per_source = 64;
  // Whole time allowed for a request's header on an authenticated connection, from the
  // request's first byte (after an idle keep-alive wait). A client trickling a header is
  // cut off when it runs out. Also the upper bound of anonymous_header_timeout and
  // tls_handshake_timeout. Default 10 s.
  std::chrono::milliseconds header_timeout{std::chrono::seconds(10)};
  // Whole time an anonymous connection has for each request header, counted from accept
  // (first request; from the end of the TLS handshake with TLS) or from the end of its
  // previous answer (keep-alive: idle time counts). At most header_timeout. Default 2 s.
  std::chrono::milliseconds anonymous_header_timeout{std::chrono::seconds(2)};
  // Time a TLS handshake may take, from accept. At most header_timeout. Default 2 s.
  std::chrono::milliseconds tls_handshake_timeout{std::chrono::seconds(2)};
  // Longest gap without progress while reading a body. Default 30 s.
  std::chrono::milliseconds read_timeout{std::chrono::seconds(30)};
  // Longest time a single response write (a whole response or one chunk) may take before
  // the client is considered stuck and the connection closed. Default 30 s.
  std::chrono::milliseconds write_timeout{std::chrono::seconds(30)};
  // Idle time allowed between keep-alive requests of an authenticated connection (an
  // anonymous one has anonymous_header_timeout for idle time and header together).
  // Default 60 s.
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

// Counters of a Server's connection management, for tests and diagnostics.
struct ServerStats {
  uint64_t accepted = 0;  // connections accepted and served
  uint64_t evicted = 0;   // older connections closed to make room for new ones
  uint64_t refused = 0;   // new connections refused (503): every connection was busy
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
  // Connection counters. io_context thread only.
  ServerStats stats() const;
  // Closes the acceptor and every connection; pending Responders see closed(). Idempotent.
  void Stop();

 private:
  void DoAccept();
  // Makes room for a new connection from `source` under max_connections and
  // max_anonymous_per_source, closing older connections (see ServerOptions); false when
  // the new connection must be refused.
  bool MakeRoom(const boost::asio::ip::address& source);
  // Warnings about displaced or refused connections, at most one per 10 s: true when one
  // is due now; PressureSuffix says how many were left out since the last.
  bool PressureLogDue();
  std::string PressureSuffix();

  // io_context_ and the state_ pointer are constant after construction; local_endpoint_ is
  // written by Start only (and read from any thread after it returned); everything else,
  // and what state_ points to, changes on the io_context thread.
  boost::asio::io_context& io_context_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::shared_ptr<internal::ServerState> state_;
  boost::asio::ip::tcp::endpoint local_endpoint_;
  boost::asio::steady_timer accept_backoff_;
  std::chrono::steady_clock::time_point last_busy_log_{};
  uint64_t unlogged_pressure_ = 0;
  bool started_ = false;
};

}  // namespace traintl::http
