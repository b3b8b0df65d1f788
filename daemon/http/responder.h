// Responder: the answer side of one request. A handler receives it as a
// std::shared_ptr and may answer at once or keep it and answer later (after a raft
// commit, from a timer, ...). Exactly one of Send/SendJson/SendError, or a
// BeginChunked ... EndChunked stream, is expected; later calls are ignored (and logged).
//
// A Responder released without any answer sends 500, so a handler bug cannot hang a
// client. One released in the middle of a chunked stream closes the connection without the
// final chunk, so the client sees a truncated response rather than a complete one.
//
// Thread-safety: NOT thread-safe. Every method, including the destructor, must run on the
// thread that runs the server's io_context (post to it from other threads); a call from
// another thread aborts. The io_context must outlive every Responder.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace traintl::http {

namespace internal {
class Connection;
}

class Responder {
 public:
  // Created by the server for each request; not for handlers.
  Responder(std::shared_ptr<internal::Connection> connection, uint64_t request_seq);
  ~Responder();
  Responder(const Responder&) = delete;
  Responder& operator=(const Responder&) = delete;

  // Adds a response header (before Send/BeginChunked). Names or values containing CR, LF
  // or NUL are dropped. Framing headers (Content-Length, Transfer-Encoding, Connection)
  // are set by the server and must not be added.
  void SetHeader(std::string name, std::string value);

  // A complete response. An empty content_type sends no Content-Type. For a HEAD request
  // the body is not sent (Content-Length still says its size).
  void Send(int status, std::string content_type, std::string body);
  // application/json; strings with invalid UTF-8 are replaced, never thrown about.
  void SendJson(int status, const nlohmann::json& body);
  // {"error": message, ...extra}; `extra` must be an object (or null), its "error" is
  // ignored.
  void SendError(int status, const std::string& message, nlohmann::json extra = {});

  // Streaming: Transfer-Encoding: chunked (HTTP/1.1), or raw bytes then close (HTTP/1.0).
  void BeginChunked(int status, std::string content_type);
  // Queues one chunk; `on_written(true)` runs (on the io thread, never inside this call)
  // once it has been handed to the kernel, `on_written(false)` when the client went away or
  // the stream is not open. Write the next chunk from on_written to get backpressure; the
  // queue is unbounded. Empty data writes nothing and reports true.
  void WriteChunk(std::string data, std::function<void(bool ok)> on_written = nullptr);
  // Sends the final chunk; the connection is then kept alive when the request allowed it.
  void EndChunked();

  // True once the connection is gone (client closed it, a timeout, Server::Stop); further
  // writes are dropped. A streaming handler polls this (or watches on_written) to stop.
  bool closed() const;
  // True once Send*/BeginChunked has been called.
  bool responded() const { return state_ != State::kNone; }

 private:
  enum class State { kNone, kSent, kStreaming, kEnded };
  void CheckThread() const;

  // Constant after construction.
  std::shared_ptr<internal::Connection> conn_;
  uint64_t request_seq_;

  // Changed on the io_context thread only (CheckThread).
  State state_ = State::kNone;
  std::vector<std::pair<std::string, std::string>> headers_;
};

}  // namespace traintl::http
