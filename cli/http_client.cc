#include "cli/http_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <cstdint>
#include <exception>
#include <limits>
#include <type_traits>

namespace traintl {
namespace cli {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

constexpr char kUserAgent[] = "traintl/0.1.0";

// Plain Beast synchronous calls have no timeouts; running one asynchronous operation at a
// time on a private io_context gives tcp_stream's deadlines with synchronous control flow.
void RunPending(net::io_context& ioc) {
  ioc.restart();
  ioc.run();
}

std::string ConnectErrorText(const beast::error_code& ec, int64_t timeout_ms) {
  if (ec == net::error::connection_refused) return "connection refused";
  if (ec == beast::error::timeout) {
    return "no answer within " + std::to_string(timeout_ms / 1000) + "s";
  }
  if (ec == net::error::host_unreachable) return "host unreachable";
  if (ec == net::error::network_unreachable) return "network unreachable";
  return ec.message();
}

}  // namespace

Result<HttpResponse> BeastHttpClient::Send(const HttpRequest& request) {
  return Exchange(request, nullptr);
}

Result<HttpResponse> BeastHttpClient::Stream(const HttpRequest& request,
                                             const std::function<void(std::string_view)>& on_data) {
  return Exchange(request, &on_data);
}

Result<HttpResponse> BeastHttpClient::Exchange(
    const HttpRequest& request, const std::function<void(std::string_view)>* on_data) {
  try {
    net::io_context ioc;
    if (!options_.tls) {
      beast::tcp_stream stream(ioc);
      return ExchangeOn(ioc, stream, request, on_data);
    }
    net::ssl::context ctx(net::ssl::context::tls_client);
    beast::error_code ec;
    ctx.set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                        net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                        net::ssl::context::no_tlsv1_1,
                    ec);
    if (options_.tls_ca_file.empty()) {
      ctx.set_default_verify_paths(ec);
    } else {
      ctx.load_verify_file(options_.tls_ca_file, ec);
    }
    if (ec) {
      return Status::InvalidArgument("cannot use CA file '" + options_.tls_ca_file +
                                     "': " + ec.message());
    }
    ctx.set_verify_mode(net::ssl::verify_peer);
    beast::ssl_stream<beast::tcp_stream> stream(ioc, ctx);
    const std::string name =
        options_.tls_server_name.empty() ? options_.host : options_.tls_server_name;
    stream.set_verify_callback(net::ssl::host_name_verification(name));
    beast::error_code not_ip;
    net::ip::make_address(name, not_ip);
    // SNI carries host names only (RFC 6066).
    if (not_ip) SSL_set_tlsext_host_name(stream.native_handle(), name.c_str());
    return ExchangeOn(ioc, stream, request, on_data);
  } catch (const std::exception& e) {
    return Status::Internal(std::string("HTTP client error: ") + e.what());
  }
}

template <class AsyncStream>
Result<HttpResponse> BeastHttpClient::ExchangeOn(
    net::io_context& ioc, AsyncStream& stream, const HttpRequest& request,
    const std::function<void(std::string_view)>* on_data) {
  constexpr bool kTls = !std::is_same_v<AsyncStream, beast::tcp_stream>;
  beast::tcp_stream& lowest = beast::get_lowest_layer(stream);
  tcp::resolver resolver(ioc);
  beast::error_code ec;

  tcp::resolver::results_type endpoints;
  resolver.async_resolve(options_.host, std::to_string(options_.port),
                         [&](const beast::error_code& e, tcp::resolver::results_type r) {
                           ec = e;
                           endpoints = std::move(r);
                         });
  RunPending(ioc);
  if (ec) return Status::Unavailable("cannot resolve '" + options_.host + "': " + ec.message());

  lowest.expires_after(std::chrono::milliseconds(options_.connect_timeout_ms));
  lowest.async_connect(endpoints,
                       [&](const beast::error_code& e, const tcp::endpoint&) { ec = e; });
  RunPending(ioc);
  if (ec) return Status::Unavailable(ConnectErrorText(ec, options_.connect_timeout_ms));

  if constexpr (kTls) {
    stream.async_handshake(net::ssl::stream_base::client,
                           [&](const beast::error_code& e) { ec = e; });
    RunPending(ioc);
    if (ec) {
      // Verification failures read "certificate verify failed"; a plain-HTTP daemon makes
      // the handshake fail with "wrong version number".
      return Status::Unavailable("TLS handshake with " + options_.host + ":" +
                                 std::to_string(options_.port) + " failed: " + ec.message());
    }
  }

  http::request<http::string_body> req{http::string_to_verb(request.method), request.target, 11};
  if (req.method() == http::verb::unknown) {
    return Status::InvalidArgument("unknown HTTP method " + request.method);
  }
  req.set(http::field::host, options_.host + ":" + std::to_string(options_.port));
  req.set(http::field::user_agent, kUserAgent);
  req.set(http::field::connection, "close");
  if (!options_.token.empty()) req.set(http::field::authorization, "Bearer " + options_.token);
  if (!request.content_type.empty()) req.set(http::field::content_type, request.content_type);
  req.body() = request.body;
  req.prepare_payload();

  int64_t timeout_ms = request.timeout_ms == 0 ? options_.request_timeout_ms : request.timeout_ms;
  if (timeout_ms > 0) {
    lowest.expires_after(std::chrono::milliseconds(timeout_ms));
  } else {
    lowest.expires_never();
  }
  http::async_write(stream, req, [&](const beast::error_code& e, size_t) { ec = e; });
  RunPending(ioc);
  if (ec) return Status::Internal("sending the request failed: " + ec.message());

  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  // Not boost::none: Boost 1.74's parser compares sizes against the empty optional and
  // then rejects every body with "body limit exceeded".
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  // A HEAD answer carries the Content-Length of a body that never comes.
  if (req.method() == http::verb::head) parser.skip(true);
  http::async_read_header(stream, buffer, parser,
                          [&](const beast::error_code& e, size_t) { ec = e; });
  RunPending(ioc);
  if (ec) return Status::Internal("reading the response failed: " + ec.message());

  HttpResponse response;
  response.status = static_cast<int>(parser.get().result_int());
  response.content_type = std::string(parser.get()[http::field::content_type]);
  bool streaming = on_data != nullptr && response.status / 100 == 2;

  char chunk[16384];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof(chunk);
    http::async_read_some(stream, buffer, parser,
                          [&](const beast::error_code& e, size_t) { ec = e; });
    RunPending(ioc);
    if (ec == http::error::need_buffer) ec = {};
    size_t n = sizeof(chunk) - parser.get().body().size;
    if (n > 0) {
      if (streaming) {
        (*on_data)(std::string_view(chunk, n));
      } else {
        response.body.append(chunk, n);
      }
    }
    if (ec) return Status::Internal("reading the response failed: " + ec.message());
  }
  // No TLS close_notify exchange: the response is complete (length-delimited), and
  // waiting for the server's close_notify could only add latency.
  beast::error_code ignored;
  lowest.socket().shutdown(tcp::socket::shutdown_both, ignored);
  return response;
}

std::string UrlEncode(std::string_view text) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

}  // namespace cli
}  // namespace traintl
