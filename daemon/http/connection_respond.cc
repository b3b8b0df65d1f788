// internal::Connection, answering a request: running the handler (Dispatch), the server's
// own error answers (RespondEarly), the Responder's complete and streamed answers with the
// response heads they share (BuildHead), and the write queue that puts them on the wire
// under write_timeout, one item at a time.
#include "daemon/http/connection.h"

#include <algorithm>
#include <ctime>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/write.hpp>

#include "common/logging.h"
#include "daemon/http/responder.h"

namespace traintl::http::internal {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using boost::system::error_code;

namespace {

bool HasControlChars(const std::string& s) {
  return std::any_of(s.begin(), s.end(),
                     [](char c) { return c == '\r' || c == '\n' || c == '\0'; });
}

bool IsToken(const std::string& s) {
  if (s.empty()) return false;
  for (unsigned char c : s) {
    if (c <= 32 || c >= 127 || c == ':' || c == '(' || c == ')' || c == ',' || c == '"')
      return false;
  }
  return true;
}

std::string HttpDate() {
  std::time_t now = std::time(nullptr);
  std::tm tm;
  gmtime_r(&now, &tm);
  char buf[64];
  size_t n = std::strftime(buf, sizeof(buf), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return std::string(buf, n);
}

std::string JsonError(const std::string& message) {
  nlohmann::json j = {{"error", message}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool IsFramingHeader(const std::string& name) {
  return beast::iequals(name, "content-length") || beast::iequals(name, "transfer-encoding") ||
         beast::iequals(name, "connection");
}

}  // namespace

void Connection::Dispatch() {
  state_ = State::kResponding;
  keep_alive_ = parser_->keep_alive() && !server_->stopped;
  Request request = std::move(request_);
  request_ = Request();
  request.params = std::move(params_);
  request.body = std::move(parser_->get().body());
  parser_.reset();
  const Route* route = route_;
  {
    auto responder = std::make_shared<Responder>(shared_from_this(), request_seq_);
    const char* failure = nullptr;
    std::string what;
    try {
      route->handler(request, responder);
    } catch (const std::exception& e) {
      failure = "exception";
      what = e.what();
    } catch (...) {
      failure = "unknown exception";
    }
    if (failure != nullptr) {
      LOG_ERROR << "http: handler for " << route->method << " " << route->pattern << " threw "
                << failure << (what.empty() ? "" : ": ") << what;
      if (!responder->responded()) {
        responder->SendError(500, "internal error");
      } else {
        EndStream(request_seq_, /*complete=*/false);  // no-op unless mid-stream
      }
    }
  }  // a responder the handler did not keep answers 500 here
  // Watch the socket while the answer is pending, so a client that goes away is noticed
  // (Responder::closed, failed WriteChunk) instead of holding the connection forever.
  if (state_ == State::kResponding && !raw_read_pending_) RawRead();
}

void Connection::RespondEarly(int status, const std::string& message, const HeaderList& headers,
                              bool close) {
  state_ = State::kResponding;
  keep_alive_ =
      !close && parser_ && parser_->is_header_done() && parser_->keep_alive() && !server_->stopped;
  parser_.reset();
  response_started_ = true;
  LOG_DEBUG << "http: " << remote_ << " " << log_line_ << " -> " << status << " (" << message
            << ")";
  std::string body = JsonError(message);
  WriteItem item;
  item.message = BuildHead(status, headers, "application/json");
  item.message->content_length(body.size());
  if (!head_request_) item.message->body() = std::move(body);
  item.final = true;
  Enqueue(std::move(item));
  if (!closed() && !raw_read_pending_) RawRead();
}

std::unique_ptr<Connection::Message> Connection::BuildHead(int status, const HeaderList& headers,
                                                           const std::string& content_type) {
  auto head = std::make_unique<Message>();
  head->version(11);
  head->result(static_cast<unsigned>(status));
  if (bhttp::int_to_status(static_cast<unsigned>(status)) == bhttp::status::unknown) {
    head->reason("Unknown");
  }
  head->set(bhttp::field::date, HttpDate());
  if (!content_type.empty() && !HasControlChars(content_type)) {
    head->set(bhttp::field::content_type, content_type);
  }
  for (const auto& [name, value] : headers) {
    if (!IsToken(name) || HasControlChars(value) || IsFramingHeader(name)) {
      LOG_WARN << "http: dropping invalid or reserved response header '" << name << "'";
      continue;
    }
    head->insert(name, value);
  }
  if (!keep_alive_) {
    head->set(bhttp::field::connection, "close");
  } else if (!http11_) {
    head->set(bhttp::field::connection, "keep-alive");
  }
  return head;
}

bool Connection::AcceptsAnswer(uint64_t seq, const char* what) const {
  if (closed()) return false;
  if (seq != request_seq_ || state_ != State::kResponding) {
    LOG_WARN << "http: " << what << " for a request that is no longer pending; ignored";
    return false;
  }
  return true;
}

int Connection::CheckedStatus(int status) {
  if (status < 200 || status > 599) {
    LOG_ERROR << "http: handler answered with invalid status " << status << "; sending 500";
    return 500;
  }
  return status;
}

void Connection::Respond(uint64_t seq, int status, const HeaderList& headers,
                         const std::string& content_type, std::string body) {
  if (!AcceptsAnswer(seq, "response") || response_started_) return;
  response_started_ = true;
  status = CheckedStatus(status);
  const bool no_body = status == 204 || status == 304;
  WriteItem item;
  item.message = BuildHead(status, headers, no_body ? std::string() : content_type);
  if (!no_body) item.message->content_length(body.size());
  if (!no_body && !head_request_) item.message->body() = std::move(body);
  item.final = true;
  LOG_DEBUG << "http: " << remote_ << " " << log_line_ << " -> " << status;
  Enqueue(std::move(item));
}

void Connection::BeginStream(uint64_t seq, int status, const HeaderList& headers,
                             const std::string& content_type) {
  if (!AcceptsAnswer(seq, "stream") || response_started_) return;
  response_started_ = true;
  streaming_ = true;
  status = CheckedStatus(status);
  // HTTP/1.0 has no chunked encoding: the body ends when the connection does.
  if (!http11_) keep_alive_ = false;
  WriteItem item;
  item.message = BuildHead(status, headers, content_type);
  if (http11_) item.message->chunked(true);
  item.head_only = true;
  LOG_DEBUG << "http: " << remote_ << " " << log_line_ << " -> " << status << " (stream)";
  Enqueue(std::move(item));
}

void Connection::StreamChunk(uint64_t seq, std::string data, std::function<void(bool)> on_written) {
  if (closed() || seq != request_seq_ || !streaming_ || stream_ended_) {
    PostCallback(std::move(on_written), false);
    return;
  }
  if (data.empty() || head_request_) {
    PostCallback(std::move(on_written), true);
    return;
  }
  WriteItem item;
  item.chunk = http11_;
  item.data = std::move(data);
  item.on_written = std::move(on_written);
  Enqueue(std::move(item));
}

void Connection::EndStream(uint64_t seq, bool complete) {
  if (closed() || seq != request_seq_ || !streaming_ || stream_ended_) return;
  stream_ended_ = true;
  WriteItem item;
  if (complete) {
    item.last_chunk = http11_ && !head_request_;
  } else {
    keep_alive_ = false;  // the client must see the body end early, not a complete one
  }
  item.final = true;
  Enqueue(std::move(item));
}

void Connection::PostCallback(std::function<void(bool)> cb, bool ok) {
  if (!cb) return;
  asio::post(socket_.get_executor(), [cb = std::move(cb), ok]() { InvokeCallback(cb, ok); });
}

void Connection::InvokeCallback(const std::function<void(bool)>& cb, bool ok) {
  if (!cb) return;
  try {
    cb(ok);
  } catch (const std::exception& e) {
    LOG_ERROR << "http: on_written callback threw: " << e.what();
  } catch (...) {
    LOG_ERROR << "http: on_written callback threw";
  }
}

// ---- Writing -----------------------------------------------------------------------------

void Connection::Enqueue(WriteItem item) {
  if (closed()) {
    PostCallback(std::move(item.on_written), false);
    return;
  }
  writes_.push_back(std::move(item));
  DoWrite();
}

void Connection::DoWrite() {
  if (writing_ || writes_.empty() || closed()) return;
  writing_ = true;
  const WriteItem& w = writes_.front();
  uint64_t gen = ++write_timer_gen_;
  write_timer_.expires_after(server_->options.write_timeout);
  write_timer_.async_wait([self = shared_from_this(), gen](error_code ec) {
    if (ec || gen != self->write_timer_gen_ || self->closed()) return;
    LOG_DEBUG << "http: " << self->remote_ << " does not read its response; closing";
    self->CloseNow();
  });
  WithStream([&](auto& stream) {
    auto done = [self = shared_from_this()](error_code ec, size_t) { self->OnWrite(ec); };
    if (w.message) {
      // The serializer lives until the write completes; the message stays in writes_.
      auto serializer =
          std::make_shared<bhttp::response_serializer<bhttp::string_body>>(*w.message);
      auto done_with = [serializer, done](error_code ec, size_t n) { done(ec, n); };
      if (w.head_only) {
        bhttp::async_write_header(stream, *serializer, std::move(done_with));
      } else {
        bhttp::async_write(stream, *serializer, std::move(done_with));
      }
    } else if (w.last_chunk) {
      asio::async_write(stream, bhttp::make_chunk_last(), std::move(done));
    } else if (w.chunk) {
      asio::async_write(stream, bhttp::make_chunk(asio::buffer(w.data)), std::move(done));
    } else {
      asio::async_write(stream, asio::buffer(w.data), std::move(done));
    }
  });
}

void Connection::OnWrite(error_code ec) {
  writing_ = false;
  ++write_timer_gen_;
  write_timer_.cancel();
  if (ec || closed()) {
    auto pending = std::move(writes_);
    writes_.clear();
    for (auto& w : pending) PostCallback(std::move(w.on_written), false);
    CloseNow();
    return;
  }
  WriteItem done = std::move(writes_.front());
  writes_.pop_front();
  if (done.final) {
    FinishResponse();
  } else {
    DoWrite();
  }
  InvokeCallback(done.on_written, true);
}

}  // namespace traintl::http::internal
