#include "daemon/http/server.h"

#include <vector>

#include <boost/asio/write.hpp>

#include "common/logging.h"
#include "daemon/http/connection.h"

namespace traintl::http {

namespace asio = boost::asio;
using boost::system::error_code;
using tcp = asio::ip::tcp;

namespace {

// A pause after a failed accept (e.g. EMFILE) so the loop does not spin at 100% CPU.
constexpr std::chrono::milliseconds kAcceptBackoff{100};
// At most one "connection limit reached" warning per this interval.
constexpr std::chrono::seconds kBusyLogInterval{10};

// Best effort: the socket is fresh, so a small non-blocking write normally fits its buffer.
void RejectBusy(tcp::socket& socket) {
  static const std::string kBody = R"({"error":"too many connections"})";
  static const std::string kResponse =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: " +
      std::to_string(kBody.size()) + "\r\nConnection: close\r\n\r\n" + kBody;
  error_code ignored;
  socket.non_blocking(true, ignored);
  socket.write_some(asio::buffer(kResponse), ignored);
  socket.shutdown(tcp::socket::shutdown_both, ignored);
  socket.close(ignored);
}

}  // namespace

Server::Server(asio::io_context& io_context, ServerOptions options, std::shared_ptr<Router> router)
    : io_context_(io_context),
      acceptor_(io_context),
      state_(std::make_shared<internal::ServerState>()),
      accept_backoff_(io_context) {
  state_->io_context = &io_context;
  state_->options = std::move(options);
  state_->router = router ? std::move(router) : std::make_shared<Router>();
}

Server::~Server() { Stop(); }

Status Server::Start() {
  if (started_) return Status::FailedPrecondition("http server already started");
  if (state_->stopped) return Status::FailedPrecondition("http server was stopped");
  const ServerOptions& o = state_->options;
  const std::string where = o.address + ":" + std::to_string(o.port);
  error_code ec;
  asio::ip::address address = asio::ip::make_address(o.address, ec);
  if (ec) return Status::InvalidArgument("invalid listen address '" + o.address + "'");
  tcp::endpoint endpoint(address, o.port);
  acceptor_.open(endpoint.protocol(), ec);
  if (ec) return Status::Unavailable("cannot open a socket for " + where + ": " + ec.message());
  // Lets a restarted daemon rebind while old connections sit in TIME_WAIT; Linux still
  // refuses a second listener on the same port.
  acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  acceptor_.bind(endpoint, ec);
  if (ec) {
    error_code ignored;
    acceptor_.close(ignored);
    return Status::Unavailable("cannot listen on " + where + ": " + ec.message());
  }
  acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    error_code ignored;
    acceptor_.close(ignored);
    return Status::Unavailable("cannot listen on " + where + ": " + ec.message());
  }
  local_endpoint_ = acceptor_.local_endpoint(ec);
  if (ec) local_endpoint_ = endpoint;
  started_ = true;
  if (o.token.empty()) {
    LOG_WARN << "http: no bearer token configured; routes requiring auth will answer 401";
  }
  LOG_INFO << "http: listening on " << local_endpoint_.address().to_string() << ":"
           << local_endpoint_.port();
  DoAccept();
  return Status::Ok();
}

void Server::DoAccept() {
  // Handlers capture the shared state, not just `this`: after Stop() (always run by the
  // destructor) they return before touching the Server.
  acceptor_.async_accept([this, state = state_](error_code ec, tcp::socket socket) {
    if (state->stopped) return;
    if (ec) {
      if (ec == asio::error::operation_aborted) return;
      LOG_WARN << "http: accept failed: " << ec.message();
      accept_backoff_.expires_after(kAcceptBackoff);
      accept_backoff_.async_wait([this, state](error_code wait_ec) {
        if (wait_ec || state->stopped) return;
        DoAccept();
      });
      return;
    }
    if (state->connections.size() >= state->options.max_connections) {
      auto now = std::chrono::steady_clock::now();
      if (now - last_busy_log_ >= kBusyLogInterval) {
        last_busy_log_ = now;
        LOG_WARN << "http: connection limit (" << state->options.max_connections
                 << ") reached; refusing new connections";
      }
      RejectBusy(socket);
    } else {
      uint64_t id = state->next_connection_id++;
      auto connection = std::make_shared<internal::Connection>(std::move(socket), state, id);
      state->connections.emplace(id, connection);
      connection->Start();
    }
    DoAccept();
  });
}

void Server::Stop() {
  if (state_->stopped) return;
  state_->stopped = true;
  error_code ignored;
  acceptor_.close(ignored);
  accept_backoff_.cancel();
  std::vector<std::shared_ptr<internal::Connection>> open;
  for (auto& [id, weak] : state_->connections) {
    if (auto c = weak.lock()) open.push_back(std::move(c));
  }
  for (auto& c : open) c->CloseNow();
  state_->connections.clear();
  if (started_) {
    LOG_INFO << "http: server stopped";
  }
}

}  // namespace traintl::http
