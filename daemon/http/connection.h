// internal::Connection: one accepted TCP connection of a Server. It reads requests with
// a Beast parser under the timeouts of ServerOptions, routes and authenticates them,
// calls the handler, and writes the responses its Responders queue. Internal to
// traintl_http; handlers only ever see Request and Responder.
//
// With TLS, a handshake (under tls_handshake_timeout) comes first, and every read and write
// goes through the TLS stream; the lingering close is a TCP half-close without a TLS
// close_notify (responses are always length-delimited, so a client never needs it).
//
// Life cycle per request: kIdle (waiting for a first byte) -> kReadingHeader ->
// kReadingBody -> kResponding (handler running or pending; a small read keeps watching
// the socket so a client that goes away is noticed) -> back to kIdle on keep-alive, or
// kLingering (half-closed, draining input) -> kClosed.
//
// A connection is anonymous until a request carries the valid bearer token; the Server
// may close an anonymous connection that is waiting for a request (or an authenticated
// idle one) to make room for a new connection (EvictionRank).
//
// Where it is: connection.cc holds the lifetime (start and TLS handshake, waits and
// eviction, timers, keep-alive or lingering close after an answer, closing),
// connection_read.cc reading a request (limits, routing, authentication), and
// connection_respond.cc answering it (the handler, responses and streams, the write queue).
//
// Thread-safety: not thread-safe; every method, the destructor included, runs on the
// server's io_context thread (Responders post there; RunningInIoThread checks it).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <nlohmann/json.hpp>

#include "daemon/http/bounded_parser.h"
#include "daemon/http/request.h"
#include "daemon/http/router.h"
#include "daemon/http/server.h"

namespace traintl::http::internal {

class Connection;

// What a Server shares with its connections; it outlives the Server while connections
// (kept by pending Responders) still refer to it.
//
// Thread-safety: none of its own; it is used only on the server's io_context thread.
struct ServerState {
  // Set by the Server's constructor (tls_context by Start); constant once it accepts.
  boost::asio::io_context* io_context = nullptr;
  ServerOptions options;
  std::shared_ptr<Router> router;
  // Set when the server speaks TLS.
  std::shared_ptr<boost::asio::ssl::context> tls_context;

  // Changed by the Server and its connections on the io_context thread.
  // Open connections by id (ids grow with accept order).
  std::unordered_map<uint64_t, std::weak_ptr<Connection>> connections;
  // Open anonymous connections per source address (max_anonymous_per_source).
  std::map<boost::asio::ip::address, size_t> anonymous_by_source;
  uint64_t next_connection_id = 1;
  // Orders the starts of connections' waits for a request (oldest evicted first).
  uint64_t next_wait_ticket = 1;
  ServerStats stats;
  bool stopped = false;
};

using HeaderList = std::vector<std::pair<std::string, std::string>>;

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(boost::asio::ip::tcp::socket socket, std::shared_ptr<ServerState> state, uint64_t id);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void Start();
  // Closes the socket at once; queued writes report failure.
  void CloseNow();
  bool closed() const { return state_ == State::kClosed; }

  // Whether the Server may close this connection for a new one, and in which order:
  // 0 never (an authenticated request is being read or answered), 1 first (anonymous, or
  // lingering after its last answer), 2 next (authenticated, idle between requests).
  int EvictionRank() const;
  // Orders connections of the same rank: smaller started waiting earlier.
  uint64_t wait_ticket() const { return wait_ticket_; }
  const boost::asio::ip::address& source() const { return source_; }
  bool anonymous() const { return !authenticated_; }
  bool RunningInIoThread() const;

  // Used by the Responder of request `seq`; ignored when `seq` is not the request being
  // answered.
  void Respond(uint64_t seq, int status, const HeaderList& headers, const std::string& content_type,
               std::string body);
  void BeginStream(uint64_t seq, int status, const HeaderList& headers,
                   const std::string& content_type);
  void StreamChunk(uint64_t seq, std::string data, std::function<void(bool)> on_written);
  // complete=false: the handler abandoned the stream; close without the final chunk.
  void EndStream(uint64_t seq, bool complete);
  // Runs `cb(ok)` later on the io thread.
  void PostCallback(std::function<void(bool)> cb, bool ok);

 private:
  enum class State { kIdle, kReadingHeader, kReadingBody, kResponding, kLingering, kClosed };
  using Message = boost::beast::http::response<boost::beast::http::string_body>;
  // One write: a message (a response, or a stream's head) or a piece of a streamed body.
  struct WriteItem {
    // Written by Beast's serializer; the head only when `head_only` (a stream's body follows
    // as other items).
    std::unique_ptr<Message> message;
    bool head_only = false;
    // A streamed body piece: one chunk when `chunk`, else raw bytes (HTTP/1.0).
    std::string data;
    bool chunk = false;
    bool last_chunk = false;  // the final, empty chunk
    std::function<void(bool)> on_written;
    bool final = false;  // the last write of the response
  };

  // Runs `op(stream)` on the TLS stream when there is one, else on the socket.
  template <class Op>
  void WithStream(Op&& op) {
    if (tls_) {
      op(*tls_);
    } else {
      op(socket_);
    }
  }
  void OnHandshake(boost::system::error_code ec);
  void BeginHeaderRead();
  void OnHeader(boost::system::error_code ec);
  void ReadBody();
  void OnBody(boost::system::error_code ec);
  void Dispatch();
  void RawRead();
  void OnRawRead(boost::system::error_code ec, size_t n);
  // An answer decided by the server itself (errors). `close` ends the connection after it
  // (required when request bytes were left unread).
  void RespondEarly(int status, const std::string& message, const HeaderList& headers, bool close);
  // False (logged unless closed) when `seq` is not the request being answered.
  bool AcceptsAnswer(uint64_t seq, const char* what) const;
  static int CheckedStatus(int status);
  void FinishResponse();
  void StartLinger();
  void Enqueue(WriteItem item);
  void DoWrite();
  void OnWrite(boost::system::error_code ec);
  void ArmReadTimer(std::chrono::milliseconds d);
  void ArmReadTimerAt(std::chrono::steady_clock::time_point deadline);
  void CancelReadTimer();
  // A wait for the next request starts now (accept, TLS handshake done, answer sent).
  void StartWait();
  // The request carried the valid token: the connection is no longer anonymous.
  void MarkAuthenticated();
  // Stops counting this connection in ServerState::anonymous_by_source (idempotent).
  void ReleaseAnonymous();
  // Limits of an anonymous connection (both capped by header_timeout).
  std::chrono::milliseconds AnonymousHeaderTimeout() const;
  std::chrono::milliseconds TlsHandshakeTimeout() const;
  // A response head with Date, Content-Type (unless empty), the valid `headers` and
  // Connection; the caller adds the framing.
  std::unique_ptr<Message> BuildHead(int status, const HeaderList& headers,
                                     const std::string& content_type);
  static void InvokeCallback(const std::function<void(bool)>& cb, bool ok);

  // The transport, set up in the constructor (the objects, not their state, are fixed).
  boost::asio::ip::tcp::socket socket_;
  // The TLS layer over socket_, when the server speaks TLS.
  std::optional<boost::asio::ssl::stream<boost::asio::ip::tcp::socket&>> tls_;

  // Constant after construction.
  std::shared_ptr<ServerState> server_;
  uint64_t id_;
  std::string remote_;  // "ip:port" of the peer, for logs and Request::remote
  boost::asio::ip::address source_;

  // Everything below changes on the io_context thread only (see Thread-safety above).
  // Presented the valid bearer token in some request.
  bool authenticated_ = false;
  // Counted in ServerState::anonymous_by_source.
  bool counted_anonymous_ = false;
  uint64_t wait_ticket_ = 0;
  // When the current wait for a request started (anonymous header deadline).
  std::chrono::steady_clock::time_point wait_started_;
  State state_ = State::kReadingHeader;
  boost::beast::flat_buffer buffer_;
  std::optional<BoundedRequestParser> parser_;
  boost::asio::steady_timer read_timer_;
  uint64_t read_timer_gen_ = 0;
  boost::asio::steady_timer write_timer_;
  uint64_t write_timer_gen_ = 0;
  bool raw_read_pending_ = false;
  bool resume_after_cancel_ = false;
  // Current request.
  uint64_t request_seq_ = 0;
  Request request_;  // filled from the header, handed to the handler in Dispatch
  const Route* route_ = nullptr;
  std::map<std::string, std::string> params_;
  bool keep_alive_ = false;
  bool head_request_ = false;
  bool http11_ = true;
  bool response_started_ = false;
  bool streaming_ = false;
  bool stream_ended_ = false;
  std::string log_line_;  // "METHOD target" for the access log
  // Output.
  std::deque<WriteItem> writes_;
  bool writing_ = false;
};

}  // namespace traintl::http::internal
