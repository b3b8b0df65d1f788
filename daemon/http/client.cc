#include "daemon/http/client.h"

#include <algorithm>
#include <exception>
#include <limits>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
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

Result<ClientResponse> Fetch(const std::string& host, uint16_t port, const std::string& method,
                             const std::string& target, const std::string& body,
                             const std::map<std::string, std::string>& headers,
                             std::chrono::milliseconds timeout) {
  if (method.empty() || HasSpaceOrControl(method))
    return Status::InvalidArgument("invalid HTTP method");
  if (target.empty() || HasSpaceOrControl(target))
    return Status::InvalidArgument("invalid request target");
  for (const auto& [name, value] : headers) {
    if (name.empty() || HasSpaceOrControl(name) || HasControlChars(value))
      return Status::InvalidArgument("invalid header '" + name + "'");
  }
  const std::string where = host + ":" + std::to_string(port);
  const std::string what = method + " http://" + where + target;
  try {
    asio::io_context ioc;
    tcp::resolver resolver(ioc);
    tcp::socket socket(ioc);
    asio::steady_timer deadline(ioc);

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
            stage = "write";
            bhttp::async_write(socket, req, [&](error_code ec, size_t) {
              // A server may answer (413, 401) and stop reading before the body is all
              // sent; its answer is still worth reading.
              write_error = ec;
              stage = "read";
              bhttp::async_read(socket, buffer, parser, [&](error_code ec, size_t) { finish(ec); });
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
