// internal::Connection, its lifetime: construction and the TLS handshake, the waits for a
// request and the anonymous/authenticated bookkeeping they feed (EvictionRank), the read
// timers, what follows an answer (keep-alive or the lingering close), the small reads that
// watch a connection while it answers, idles or drains, and closing. Reading a request is
// in connection_read.cc, answering it in connection_respond.cc (see connection.h).
#include "daemon/http/connection.h"

#include <algorithm>

#include <boost/asio/error.hpp>

#include "common/logging.h"

namespace traintl::http::internal {

namespace asio = boost::asio;
using boost::system::error_code;
using tcp = asio::ip::tcp;

namespace {

// Bytes read at a time while watching a connection whose request is being answered
// (pipelined input or EOF) or while draining one that is closing.
constexpr size_t kRawReadChunk = 4096;
// Beast reads at most this much at a time into the request buffer.
constexpr size_t kMaxReadBytes = 64 * 1024;

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

// ---- After an answer: keep-alive or the lingering close ------------------------------

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
