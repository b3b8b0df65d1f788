#include "daemon/http/server.h"

#include <vector>

#include <boost/asio/ssl/context.hpp>
#include <boost/asio/write.hpp>

#include "common/logging.h"
#include "common/result.h"
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

// Loads the certificate chain and key into a TLS 1.2+ server context.
Result<std::shared_ptr<asio::ssl::context>> MakeTlsContext(const ServerOptions& o) {
  auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_server);
  error_code ec;
  ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                       asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                       asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use,
                   ec);
  if (ec) return Status::Internal("TLS: cannot set context options: " + ec.message());
  ctx->use_certificate_chain_file(o.tls_cert_file, ec);
  if (ec) {
    return Status::InvalidArgument("TLS certificate " + o.tls_cert_file + ": " + ec.message());
  }
  ctx->use_private_key_file(o.tls_key_file, asio::ssl::context::pem, ec);
  if (ec) return Status::InvalidArgument("TLS key " + o.tls_key_file + ": " + ec.message());
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    return Status::InvalidArgument("TLS key " + o.tls_key_file + " does not match certificate " +
                                   o.tls_cert_file);
  }
  return ctx;
}

// Best effort: the socket is fresh, so a small non-blocking write normally fits its buffer.
// A TLS client could not read a plain answer, so it is just closed.
void RejectBusy(tcp::socket& socket, bool tls) {
  static const std::string kBody = R"({"error":"too many connections"})";
  static const std::string kResponse =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: " +
      std::to_string(kBody.size()) + "\r\nConnection: close\r\n\r\n" + kBody;
  error_code ignored;
  socket.non_blocking(true, ignored);
  if (!tls) socket.write_some(asio::buffer(kResponse), ignored);
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
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return Status::InvalidArgument("TLS needs both a certificate and a key file");
  }
  if (!o.tls_cert_file.empty()) {
    auto ctx = MakeTlsContext(o);
    if (!ctx.ok()) return ctx.status();
    state_->tls_context = std::move(*ctx);
  }
  error_code ec;
  asio::ip::address address = asio::ip::make_address(o.address, ec);
  if (ec) return Status::InvalidArgument("invalid listen address '" + o.address + "'");
  if (!address.is_loopback() && !state_->tls_context) {
    if (!o.allow_insecure_remote) {
      return Status::PermissionDenied(
          "refusing to serve plain HTTP on non-loopback address " + o.address +
          ": configure TLS (a certificate and key), or pass "
          "--insecure-allow-remote-without-tls to accept sending the token in clear");
    }
    LOG_WARN << "http: serving plain HTTP on non-loopback address " << o.address
             << ": the bearer token travels in clear";
  }
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
  LOG_INFO << "http: listening on " << (tls() ? "https://" : "http://")
           << local_endpoint_.address().to_string() << ":" << local_endpoint_.port();
  DoAccept();
  return Status::Ok();
}

bool Server::tls() const { return state_->tls_context != nullptr; }

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
      RejectBusy(socket, state->tls_context != nullptr);
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
