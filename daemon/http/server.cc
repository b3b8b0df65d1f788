#include "daemon/http/server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <sstream>
#include <vector>

#include <boost/asio/ssl/context.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include "common/logging.h"
#include "common/result.h"
#include "daemon/http/browser_session.h"
#include "daemon/http/client.h"
#include "daemon/http/connection.h"

namespace traintl::http {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using boost::system::error_code;
using tcp = asio::ip::tcp;

namespace {

// A pause after a failed accept (e.g. EMFILE) so the loop does not spin at 100% CPU.
constexpr std::chrono::milliseconds kAcceptBackoff{100};
// At most one warning about displaced or refused connections per this interval.
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
  static const std::string kResponse = [] {
    bhttp::response<bhttp::string_body> busy(bhttp::status::service_unavailable, 11);
    busy.set(bhttp::field::content_type, "application/json");
    busy.set(kRefusedUnreadHeader, "1");
    busy.set(bhttp::field::retry_after, "1");
    busy.set(bhttp::field::connection, "close");
    busy.body() = R"({"error":"too many connections"})";
    busy.prepare_payload();
    std::ostringstream text;
    text << busy;
    return text.str();
  }();
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
  // The kernel hands us a connection only once its first bytes arrived (or after about
  // the anonymous header time): a client that speaks at once has its request read as soon
  // as it is accepted, so newer connections cannot displace it first, and connections that
  // say nothing wait in the kernel, not in the connection table. Best effort (Linux).
  {
    const auto secs = std::chrono::duration_cast<std::chrono::seconds>(
        std::min(o.anonymous_header_timeout, o.header_timeout) + std::chrono::milliseconds(999));
    int defer = static_cast<int>(std::max<int64_t>(1, secs.count()));
    if (::setsockopt(acceptor_.native_handle(), IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer,
                     sizeof defer) != 0) {
      LOG_DEBUG << "http: TCP_DEFER_ACCEPT not available";
    }
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

ServerStats Server::stats() const { return state_->stats; }

bool Server::PressureLogDue() {
  auto now = std::chrono::steady_clock::now();
  if (last_busy_log_ != std::chrono::steady_clock::time_point{} &&
      now - last_busy_log_ < kBusyLogInterval) {
    ++unlogged_pressure_;
    return false;
  }
  last_busy_log_ = now;
  return true;
}

std::string Server::PressureSuffix() {
  std::string out = unlogged_pressure_ > 0 ? " (and " + std::to_string(unlogged_pressure_) +
                                                 " more since the last report)"
                                           : std::string();
  unlogged_pressure_ = 0;
  return out;
}

bool Server::MakeRoom(const asio::ip::address& source) {
  internal::ServerState& s = *state_;
  // The connection to close among those `eligible`: the lowest EvictionRank above 0, and
  // within it the one that started waiting first.
  auto pick = [&s](auto eligible) -> std::shared_ptr<internal::Connection> {
    std::shared_ptr<internal::Connection> best;
    int best_rank = 0;
    for (const auto& [id, weak] : s.connections) {
      auto c = weak.lock();
      if (!c || c->closed() || !eligible(*c)) continue;
      int rank = c->EvictionRank();
      if (rank == 0) continue;
      if (!best || rank < best_rank ||
          (rank == best_rank && c->wait_ticket() < best->wait_ticket())) {
        best = std::move(c);
        best_rank = rank;
      }
    }
    return best;
  };
  const size_t per_source = s.options.max_anonymous_per_source;
  if (per_source > 0) {
    auto it = s.anonymous_by_source.find(source);
    if (it != s.anonymous_by_source.end() && it->second >= per_source) {
      auto victim = pick([&source](const internal::Connection& c) {
        return c.anonymous() && c.source() == source;
      });
      if (!victim) {
        if (PressureLogDue()) {
          LOG_WARN << "http: " << source.to_string() << " holds " << per_source
                   << " anonymous connections (max_anonymous_per_source), all mid-request; "
                      "refusing new ones from it"
                   << PressureSuffix();
        }
        return false;
      }
      if (PressureLogDue()) {
        LOG_WARN << "http: " << source.to_string() << " holds " << per_source
                 << " anonymous connections (max_anonymous_per_source); closing its oldest "
                    "waiting ones for new ones"
                 << PressureSuffix();
      }
      ++s.stats.evicted;
      victim->CloseNow();
    }
  }
  if (s.connections.size() >= s.options.max_connections) {
    auto victim = pick([](const internal::Connection&) { return true; });
    if (!victim) {
      if (PressureLogDue()) {
        LOG_WARN << "http: connection limit (" << s.options.max_connections
                 << ") reached, every connection mid-request; refusing new connections"
                 << PressureSuffix();
      }
      return false;
    }
    if (PressureLogDue()) {
      LOG_WARN << "http: connection limit (" << s.options.max_connections
               << ") reached; closing the oldest waiting connections for new ones"
               << PressureSuffix();
    }
    ++s.stats.evicted;
    victim->CloseNow();
  }
  return true;
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
    error_code peer_ec;
    const tcp::endpoint peer = socket.remote_endpoint(peer_ec);
    if (peer_ec) {
      // Reset before we got to it: nothing to serve.
      error_code ignored;
      socket.close(ignored);
    } else if (!MakeRoom(peer.address())) {
      ++state->stats.refused;
      RejectBusy(socket, state->tls_context != nullptr);
    } else {
      ++state->stats.accepted;
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
