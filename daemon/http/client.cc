#include "daemon/http/client.h"

#include <algorithm>
#include <exception>
#include <limits>
#include <memory>
#include <optional>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include "daemon/http/request.h"

namespace traintl::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using boost::system::error_code;
using tcp = asio::ip::tcp;

namespace {

bool HasControlChars(const std::string& s) {
  return std::any_of(s.begin(), s.end(),
                     [](char c) { return c == '\r' || c == '\n' || c == '\0'; });
}

bool HasSpaceOrControl(const std::string& s) {
  return std::any_of(s.begin(), s.end(),
                     [](char c) { return static_cast<unsigned char>(c) <= 32 || c == 127; });
}

}  // namespace

std::string ClientResponse::header(const std::string& name) const {
  auto it = headers.find(AsciiLower(name));
  return it == headers.end() ? std::string() : it->second;
}

bool RefusedUnread(const ClientResponse& r) {
  return r.status == 503 && r.header(kRefusedUnreadHeader) == "1";
}

Result<ClientResponse> Fetch(const std::string& host, uint16_t port, const std::string& method,
                             const std::string& target, const std::string& body,
                             const std::map<std::string, std::string>& headers,
                             std::chrono::milliseconds timeout, const ClientTls* tls) {
  if (method.empty() || HasSpaceOrControl(method))
    return Status::InvalidArgument("invalid HTTP method");
  if (target.empty() || HasSpaceOrControl(target))
    return Status::InvalidArgument("invalid request target");
  for (const auto& [name, value] : headers) {
    if (name.empty() || HasSpaceOrControl(name) || HasControlChars(value))
      return Status::InvalidArgument("invalid header '" + name + "'");
  }
  const std::string where = host + ":" + std::to_string(port);
  const std::string what = method + (tls ? " https://" : " http://") + where + target;
  try {
    asio::io_context ioc;
    tcp::resolver resolver(ioc);
    tcp::socket socket(ioc);
    asio::steady_timer deadline(ioc);
    std::optional<asio::ssl::context> tls_context;
    std::optional<asio::ssl::stream<tcp::socket&>> tls_stream;
    if (tls) {
      tls_context.emplace(asio::ssl::context::tls_client);
      error_code ec;
      tls_context->set_options(asio::ssl::context::default_workarounds |
                                   asio::ssl::context::no_sslv2 | asio::ssl::context::no_sslv3 |
                                   asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1,
                               ec);
      if (tls->ca_file.empty()) {
        tls_context->set_default_verify_paths(ec);
      } else {
        tls_context->load_verify_file(tls->ca_file, ec);
      }
      if (ec) {
        return Status::InvalidArgument("TLS CA file '" + tls->ca_file + "': " + ec.message());
      }
      tls_context->set_verify_mode(asio::ssl::verify_peer);
      const std::string name = tls->server_name.empty() ? host : tls->server_name;
      tls_stream.emplace(socket, *tls_context);
      tls_stream->set_verify_callback(asio::ssl::host_name_verification(name));
      error_code not_ip;
      asio::ip::make_address(name, not_ip);
      // SNI carries host names only (RFC 6066).
      if (not_ip) SSL_set_tlsext_host_name(tls_stream->native_handle(), name.c_str());
    }
    // Runs `op(stream)` on the TLS stream when there is one, else on the socket.
    auto with_stream = [&](auto&& op) {
      if (tls_stream) {
        op(*tls_stream);
      } else {
        op(socket);
      }
    };

    bhttp::request<bhttp::string_body> req;
    req.method_string(method);
    req.target(target);
    req.version(11);
    req.set(bhttp::field::host, where);
    req.set(bhttp::field::user_agent, "traintl-http");
    req.set(bhttp::field::connection, "close");
    for (const auto& [name, value] : headers) req.set(name, value);
    req.body() = body;
    req.prepare_payload();

    beast::flat_buffer buffer;
    bhttp::response_parser<bhttp::string_body> parser;
    parser.header_limit(64 * 1024);
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());  // see connection.cc
    if (method == "HEAD") parser.skip(true);

    bool timed_out = false;
    const char* stage = "resolve";
    error_code result;
    error_code write_error;
    auto finish = [&](error_code ec) {
      result = ec;
      deadline.cancel();
    };
    deadline.expires_after(timeout);
    deadline.async_wait([&](error_code ec) {
      if (ec) return;
      timed_out = true;
      resolver.cancel();
      error_code ignored;
      socket.close(ignored);
    });
    resolver.async_resolve(
        host, std::to_string(port), [&](error_code ec, tcp::resolver::results_type results) {
          if (ec) return finish(ec);
          stage = "connect";
          asio::async_connect(socket, results, [&](error_code ec, const tcp::endpoint&) {
            if (ec) return finish(ec);
            auto exchange = [&]() {
              stage = "write";
              with_stream([&](auto& stream) {
                bhttp::async_write(stream, req, [&](error_code ec, size_t) {
                  // A server may answer (413, 401) and stop reading before the body is all
                  // sent; its answer is still worth reading.
                  write_error = ec;
                  stage = "read";
                  bhttp::async_read(stream, buffer, parser,
                                    [&](error_code ec, size_t) { finish(ec); });
                });
              });
            };
            if (!tls_stream) return exchange();
            stage = "TLS handshake";
            tls_stream->async_handshake(asio::ssl::stream_base::client,
                                        [&, exchange](error_code ec) {
                                          if (ec) return finish(ec);
                                          exchange();
                                        });
          });
        });
    ioc.run();

    if (timed_out) {
      return Status::Unavailable(what + ": timed out after " + std::to_string(timeout.count()) +
                                 " ms (" + stage + ")");
    }
    if (result) {
      if (write_error) result = write_error;
      return Status::Unavailable(what + ": " + stage + " failed: " + result.message());
    }
    ClientResponse out;
    auto& msg = parser.get();
    out.status = static_cast<int>(msg.result_int());
    for (const auto& field : msg) {
      std::string name = AsciiLower(std::string(field.name_string()));
      std::string value(field.value());
      auto it = out.headers.find(name);
      if (it == out.headers.end()) {
        out.headers.emplace(std::move(name), std::move(value));
      } else {
        it->second += ", " + value;
      }
    }
    out.body = std::move(msg.body());
    return out;
  } catch (const std::exception& e) {
    return Status::Unavailable(what + ": " + e.what());
  }
}

}  // namespace traintl::http
