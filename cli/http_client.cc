#include "cli/http_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdint>
#include <exception>
#include <limits>

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
    tcp::resolver resolver(ioc);
    beast::tcp_stream stream(ioc);
    beast::error_code ec;

    tcp::resolver::results_type endpoints;
    resolver.async_resolve(options_.host, std::to_string(options_.port),
                           [&](const beast::error_code& e, tcp::resolver::results_type r) {
                             ec = e;
                             endpoints = std::move(r);
                           });
    RunPending(ioc);
    if (ec) return Status::Unavailable("cannot resolve '" + options_.host + "': " + ec.message());

    stream.expires_after(std::chrono::milliseconds(options_.connect_timeout_ms));
    stream.async_connect(endpoints,
                         [&](const beast::error_code& e, const tcp::endpoint&) { ec = e; });
    RunPending(ioc);
    if (ec) return Status::Unavailable(ConnectErrorText(ec, options_.connect_timeout_ms));

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
      stream.expires_after(std::chrono::milliseconds(timeout_ms));
    } else {
      stream.expires_never();
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
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    return response;
  } catch (const std::exception& e) {
    return Status::Internal(std::string("HTTP client error: ") + e.what());
  }
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
