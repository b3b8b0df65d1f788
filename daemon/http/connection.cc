#include "daemon/http/connection.h"

#include <algorithm>
#include <ctime>
#include <limits>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/write.hpp>

#include "common/crypto.h"
#include "common/logging.h"
#include "daemon/http/responder.h"
#include "daemon/http/uri.h"

namespace traintl::http::internal {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using boost::system::error_code;
using tcp = asio::ip::tcp;

namespace {

// Bytes read at a time while watching a connection whose request is being answered
// (pipelined input or EOF) or while draining one that is closing.
constexpr size_t kRawReadChunk = 4096;
// Beast reads at most this much at a time into the request buffer.
constexpr size_t kMaxReadBytes = 64 * 1024;

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

std::string_view ToStd(beast::string_view s) { return std::string_view(s.data(), s.size()); }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool IsHttpError(const error_code& ec) {
  return ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category();
}

bool IsFramingHeader(const std::string& name) {
  return beast::iequals(name, "content-length") || beast::iequals(name, "transfer-encoding") ||
         beast::iequals(name, "connection");
}

}  // namespace

Connection::Connection(tcp::socket socket, std::shared_ptr<ServerState> state, uint64_t id)
    : socket_(std::move(socket)),
      server_(std::move(state)),
      id_(id),
      read_timer_(socket_.get_executor()),
      write_timer_(socket_.get_executor()) {
  error_code ec;
  tcp::endpoint ep = socket_.remote_endpoint(ec);
  if (!ec) {
    remote_ = ep.address().to_string() + ":" + std::to_string(ep.port());
    source_ = ep.address();
  }
  ++server_->anonymous_by_source[source_];
  counted_anonymous_ = true;
  if (server_->tls_context) tls_.emplace(socket_, *server_->tls_context);
  // Beast keeps a chunked body's trailer in this buffer until its end is found: bound it
  // (header + trailer allowance + one read), so a peer cannot grow it without limit.
  buffer_.max_size(2 * server_->options.max_header_bytes + kMaxReadBytes);
}

Connection::~Connection() {
  if (state_ != State::kClosed) server_->connections.erase(id_);
  ReleaseAnonymous();
}

bool Connection::RunningInIoThread() const {
  return server_->io_context->get_executor().running_in_this_thread();
}

void Connection::Start() {
  StartWait();
  if (!tls_) {
    BeginHeaderRead();
    return;
  }
  // A client that stalls in the handshake is cut off like one that trickles a header.
  ArmReadTimer(TlsHandshakeTimeout());
  tls_->async_handshake(boost::asio::ssl::stream_base::server,
                        [self = shared_from_this()](error_code ec) { self->OnHandshake(ec); });
}

void Connection::OnHandshake(error_code ec) {
  if (closed()) return;
  CancelReadTimer();
  if (ec) {
    LOG_DEBUG << "http: " << remote_ << " TLS handshake failed: " << ec.message();
    CloseNow();
    return;
  }
  StartWait();
  BeginHeaderRead();
}

int Connection::EvictionRank() const {
  if (closed()) return 0;
  // Whatever an anonymous connection does, it is worth no more than a new one: its
  // requests can only be /healthz or refused, and one that does not read their answers
  // must not hold its slot for write_timeout.
  if (!authenticated_) return 1;
  if (state_ == State::kLingering) return 1;
  // Idle between requests; any other state is a request being read or answered.
  return state_ == State::kIdle ? 2 : 0;
}

void Connection::StartWait() {
  wait_ticket_ = server_->next_wait_ticket++;
  wait_started_ = std::chrono::steady_clock::now();
}

void Connection::MarkAuthenticated() {
  authenticated_ = true;
  ReleaseAnonymous();
}

void Connection::ReleaseAnonymous() {
  if (!counted_anonymous_) return;
  counted_anonymous_ = false;
  auto it = server_->anonymous_by_source.find(source_);
  if (it != server_->anonymous_by_source.end() && --it->second == 0) {
    server_->anonymous_by_source.erase(it);
  }
}

std::chrono::milliseconds Connection::AnonymousHeaderTimeout() const {
  return std::min(server_->options.anonymous_header_timeout, server_->options.header_timeout);
}

std::chrono::milliseconds Connection::TlsHandshakeTimeout() const {
  return std::min(server_->options.tls_handshake_timeout, server_->options.header_timeout);
}

void Connection::CloseNow() {
  if (state_ == State::kClosed) return;
  state_ = State::kClosed;
  CancelReadTimer();
  ++write_timer_gen_;
  write_timer_.cancel();
  error_code ignored;
  socket_.close(ignored);
  server_->connections.erase(id_);
  ReleaseAnonymous();
  if (!writing_) {
    // With a write in flight, OnWrite fails the queue when it sees the abort.
    auto pending = std::move(writes_);
    writes_.clear();
    for (auto& w : pending) PostCallback(std::move(w.on_written), false);
  }
}

void Connection::ArmReadTimer(std::chrono::milliseconds d) {
  ArmReadTimerAt(std::chrono::steady_clock::now() + d);
}

void Connection::ArmReadTimerAt(std::chrono::steady_clock::time_point deadline) {
  uint64_t gen = ++read_timer_gen_;
  read_timer_.expires_at(deadline);
  read_timer_.async_wait([self = shared_from_this(), gen](error_code ec) {
    if (ec || gen != self->read_timer_gen_ || self->closed()) return;
    LOG_DEBUG << "http: " << self->remote_ << " timed out (state " << static_cast<int>(self->state_)
              << "); closing";
    self->CloseNow();
  });
}

void Connection::CancelReadTimer() {
  ++read_timer_gen_;
  read_timer_.cancel();
}

// ---- Reading a request -------------------------------------------------------------

void Connection::BeginHeaderRead() {
  state_ = State::kReadingHeader;
  ++request_seq_;
  route_ = nullptr;
  params_.clear();
  request_ = Request();
  keep_alive_ = false;
  head_request_ = false;
  http11_ = true;
  response_started_ = false;
  streaming_ = false;
  stream_ended_ = false;
  log_line_.clear();
  parser_.emplace(TrailerLimits{.max_trailer_bytes = server_->options.max_header_bytes});
  size_t limit =
      std::min<size_t>(server_->options.max_header_bytes, std::numeric_limits<uint32_t>::max());
  parser_->header_limit(static_cast<uint32_t>(limit));
  // Body limits are per route and only known once the header is parsed; Beast would
  // otherwise refuse a large Content-Length with its own 1 MiB default. Not boost::none:
  // Beast 1.74 compares `len > optional` there, which is true for every length when none.
  parser_->body_limit(std::numeric_limits<uint64_t>::max());
  // An anonymous connection's deadline counts from the start of its wait (idle time
  // included), so it cannot hold a slot longer by sending its first byte late; an
  // authenticated one gets the whole header time from its first byte.
  if (authenticated_) {
    ArmReadTimer(server_->options.header_timeout);
  } else {
    ArmReadTimerAt(wait_started_ + AnonymousHeaderTimeout());
  }
  WithStream([&](auto& stream) {
    bhttp::async_read_header(
        stream, buffer_, *parser_,
        [self = shared_from_this()](error_code ec, size_t) { self->OnHeader(ec); });
  });
}

void Connection::OnHeader(error_code ec) {
  if (closed()) return;
  CancelReadTimer();
  if (ec) {
    if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow) {
      RespondEarly(431, "request header too large", {}, /*close=*/true);
    } else if (ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message ||
               !IsHttpError(ec)) {
      CloseNow();  // the client closed, reset, or timed out
    } else {
      RespondEarly(400, "malformed request: " + ec.message(), {}, /*close=*/true);
    }
    return;
  }

  const auto& msg = parser_->get();
  http11_ = msg.version() >= 11;
  head_request_ = msg.method() == bhttp::verb::head;
  const bool body_unread = !parser_->is_done();
  std::string_view target = ToStd(msg.target());
  log_line_ = std::string(ToStd(msg.method_string())) + " " +
              std::string(target.substr(0, std::min<size_t>(target.size(), 200)));

  // A request Transfer-Encoding that does not end in "chunked" has no defined length;
  // guessing would let a front end and this server disagree about where it ends.
  if (msg.count(bhttp::field::transfer_encoding) > 0 && !parser_->chunked()) {
    RespondEarly(400, "unsupported transfer-encoding", {}, /*close=*/true);
    return;
  }
  if (target.empty() || target[0] != '/') {
    RespondEarly(400, "request target must be an absolute path", {}, /*close=*/true);
    return;
  }
  std::string_view without_fragment = target.substr(0, target.find('#'));
  size_t qpos = without_fragment.find('?');
  std::string_view raw_path = without_fragment.substr(0, qpos);
  std::string_view raw_query =
      qpos == std::string_view::npos ? std::string_view() : without_fragment.substr(qpos + 1);
  auto path = PercentDecode(raw_path);
  if (!path) {
    RespondEarly(400, "malformed percent-encoding in path", {}, body_unread);
    return;
  }
  auto query = ParseQuery(raw_query);
  if (!query) {
    RespondEarly(400, "malformed query string", {}, body_unread);
    return;
  }

  // A valid token makes the connection authenticated, on any route (it then keeps the
  // longer timeouts and is not displaced by new connections while it waits).
  std::string_view token;
  {
    auto it = msg.find(bhttp::field::authorization);
    std::string_view value = it == msg.end() ? std::string_view() : Trim(ToStd(it->value()));
    constexpr std::string_view kScheme = "bearer ";
    if (value.size() > kScheme.size() &&
        beast::iequals(beast::string_view(value.data(), kScheme.size()),
                       beast::string_view(kScheme.data(), kScheme.size()))) {
      token = Trim(value.substr(kScheme.size()));
    }
  }
  const std::string& expected = server_->options.token;
  const bool token_valid =
      !token.empty() && !expected.empty() && ConstantTimeEquals(std::string(token), expected);
  if (token_valid) MarkAuthenticated();

  request_.method = std::string(ToStd(msg.method_string()));
  request_.target = std::string(target);
  request_.path = std::move(*path);
  request_.query = std::move(*query);
  request_.remote = remote_;
  for (const auto& field : msg) {
    std::string name = AsciiLower(std::string(ToStd(field.name_string())));
    std::string value(ToStd(field.value()));
    auto it = request_.headers.find(name);
    if (it == request_.headers.end()) {
      request_.headers.emplace(std::move(name), std::move(value));
    } else {
      it->second += ", " + value;
    }
  }

  RouteMatch match = server_->router->Match(request_.method, raw_path);
  switch (match.kind) {
    case RouteMatch::Kind::kNotFound:
      RespondEarly(404, "not found", {}, body_unread);
      return;
    case RouteMatch::Kind::kMethodNotAllowed:
      RespondEarly(405, "method not allowed", {{"Allow", match.allow}}, body_unread);
      return;
    case RouteMatch::Kind::kBadRequest:
      RespondEarly(400, match.error, {}, body_unread);
      return;
    case RouteMatch::Kind::kFound:
      break;
  }
  route_ = match.route;
  params_ = std::move(match.params);

  if (route_->options.require_auth) {
    if (token.empty()) {
      RespondEarly(401, "missing bearer token", {{"WWW-Authenticate", "Bearer"}}, body_unread);
      return;
    }
    if (!token_valid) {
      RespondEarly(401, "invalid token", {{"WWW-Authenticate", "Bearer error=\"invalid_token\""}},
                   body_unread);
      return;
    }
  }

  auto content_length = parser_->content_length();
  if (content_length && *content_length > route_->options.max_body_bytes) {
    RespondEarly(413,
                 "request body too large (limit " + std::to_string(route_->options.max_body_bytes) +
                     " bytes)",
                 {}, /*close=*/true);
    return;
  }
  if (!body_unread) {
    Dispatch();
    return;
  }
  parser_->body_limit(static_cast<uint64_t>(route_->options.max_body_bytes));
  auto expect = msg.find(bhttp::field::expect);
  if (http11_ && expect != msg.end() && beast::iequals(expect->value(), "100-continue")) {
    WriteItem item;
    item.message = std::make_unique<Message>(bhttp::status::continue_, 11);
    item.head_only = true;
    Enqueue(std::move(item));
  }
  state_ = State::kReadingBody;
  ReadBody();
}

void Connection::ReadBody() {
  // An idle timeout (reset on every progress) rather than a deadline: large uploads on a
  // slow link must still finish.
  ArmReadTimer(server_->options.read_timeout);
  WithStream([&](auto& stream) {
    bhttp::async_read_some(
        stream, buffer_, *parser_,
        [self = shared_from_this()](error_code ec, size_t) { self->OnBody(ec); });
  });
}

void Connection::OnBody(error_code ec) {
  if (closed()) return;
  CancelReadTimer();
  if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow) {
    RespondEarly(431, "request trailer or chunk extension too large", {}, /*close=*/true);
    return;
  }
  if (ec == bhttp::error::body_limit) {
    RespondEarly(413,
                 "request body too large (limit " + std::to_string(route_->options.max_body_bytes) +
                     " bytes)",
                 {}, /*close=*/true);
    return;
  }
  if (ec) {
    if (IsHttpError(ec) && ec != bhttp::error::end_of_stream &&
        ec != bhttp::error::partial_message) {
      RespondEarly(400, "malformed request body: " + ec.message(), {}, /*close=*/true);
    } else {
      CloseNow();
    }
    return;
  }
  if (!parser_->is_done()) {
    ReadBody();
    return;
  }
  Dispatch();
}

// ---- Answering -----------------------------------------------------------------------

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

void Connection::FinishResponse() {
  if (closed()) return;
  if (!keep_alive_ || server_->stopped) {
    StartLinger();
    return;
  }
  state_ = State::kIdle;
  StartWait();
  if (buffer_.size() > 0) {
    // The next request (pipelined) is already here, at least in part.
    if (raw_read_pending_) {
      resume_after_cancel_ = true;
      error_code ignored;
      socket_.cancel(ignored);  // no write is in flight: only the watch read is cancelled
      return;
    }
    BeginHeaderRead();
    return;
  }
  ArmReadTimer(authenticated_
                   ? server_->options.keep_alive_timeout
                   : std::min(server_->options.keep_alive_timeout, AnonymousHeaderTimeout()));
  if (!raw_read_pending_) RawRead();
}

void Connection::StartLinger() {
  state_ = State::kLingering;
  error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_send, ignored);
  buffer_.consume(buffer_.size());
  ArmReadTimer(server_->options.linger_timeout);
  if (!raw_read_pending_) RawRead();
}

// ---- Watching / idling / draining -------------------------------------------------------

void Connection::RawRead() {
  // prepare() throws past the buffer's max_size. It is that full only when a request was
  // refused for an oversize trailer (431, the connection closes): its bytes are of no use.
  if (buffer_.max_size() - buffer_.size() < kRawReadChunk) buffer_.consume(buffer_.size());
  raw_read_pending_ = true;
  WithStream([&](auto& stream) {
    stream.async_read_some(
        buffer_.prepare(kRawReadChunk),
        [self = shared_from_this()](error_code ec, size_t n) { self->OnRawRead(ec, n); });
  });
}

void Connection::OnRawRead(error_code ec, size_t n) {
  raw_read_pending_ = false;
  if (closed()) return;
  const bool resume = resume_after_cancel_;
  resume_after_cancel_ = false;
  if (!ec) buffer_.commit(n);
  if (ec && !(resume && ec == asio::error::operation_aborted)) {
    // EOF or reset: idle client done, lingering finished, or a client that went away
    // while its answer was pending.
    CloseNow();
    return;
  }
  switch (state_) {
    case State::kIdle:
      CancelReadTimer();
      BeginHeaderRead();
      return;
    case State::kResponding:
      // Pipelined input is kept for the next request, up to one header's worth; past
      // that, stop watching (the data is not lost, just not read yet).
      if (buffer_.size() < server_->options.max_header_bytes) RawRead();
      return;
    case State::kLingering:
      buffer_.consume(buffer_.size());
      RawRead();
      return;
    default:
      return;
  }
}

}  // namespace traintl::http::internal
