#include "worker/data/http_client.h"

#include <openssl/ssl.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

namespace traintl {
namespace data {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;

// How often a blocked operation checks its cancel flag.
constexpr auto kPollInterval = std::chrono::milliseconds(50);

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Parses "bytes a-b/total" or "bytes */total"; the total, when given.
std::optional<uint64_t> ContentRangeTotal(const std::string& value) {
  auto slash = value.rfind('/');
  if (slash == std::string::npos || slash + 1 >= value.size() || value[slash + 1] == '*') {
    return std::nullopt;
  }
  try {
    return static_cast<uint64_t>(std::stoull(value.substr(slash + 1)));
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace

Result<HttpUrl> ParseHttpUrl(const std::string& url) {
  HttpUrl out;
  std::string rest;
  if (Lower(url.substr(0, 7)) == "http://") {
    rest = url.substr(7);
  } else if (Lower(url.substr(0, 8)) == "https://") {
    out.tls = true;
    rest = url.substr(8);
  } else {
    return Status::InvalidArgument(url + ": not an http:// or https:// URL");
  }
  const size_t slash = rest.find_first_of("/?#");
  std::string authority = rest.substr(0, slash);
  out.target = slash == std::string::npos ? "/" : rest.substr(slash);
  if (auto hash = out.target.find('#'); hash != std::string::npos) out.target.resize(hash);
  if (out.target.empty() || out.target[0] != '/') out.target = "/" + out.target;
  if (auto at = authority.rfind('@'); at != std::string::npos) {
    return Status::InvalidArgument(url + ": credentials in URLs are not supported");
  }
  if (!authority.empty() && authority[0] == '[') {  // [v6addr]:port
    auto close = authority.find(']');
    if (close == std::string::npos) return Status::InvalidArgument(url + ": bad IPv6 host");
    out.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size() && authority[close + 1] == ':') {
      out.port = authority.substr(close + 2);
    }
  } else if (auto colon = authority.rfind(':'); colon != std::string::npos) {
    out.host = authority.substr(0, colon);
    out.port = authority.substr(colon + 1);
  } else {
    out.host = authority;
  }
  if (out.host.empty()) return Status::InvalidArgument(url + ": no host");
  if (out.port.empty()) out.port = out.tls ? "443" : "80";
  if (out.port.find_first_not_of("0123456789") != std::string::npos) {
    return Status::InvalidArgument(url + ": bad port '" + out.port + "'");
  }
  return out;
}

struct HttpBodyReader::Impl {
  net::io_context ioc;
  std::optional<ssl::context> ssl_ctx;
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls;
  beast::flat_buffer buffer;
  std::optional<http::response_parser<http::buffer_body>> parser;
  std::string url;
  HttpOptions options;
  const std::atomic<bool>* cancel = nullptr;
  uint64_t skip = 0;  // body bytes to drop: the server ignored our Range
  bool eof_body = false;

  beast::tcp_stream& Lowest() { return tls ? beast::get_lowest_layer(*tls) : *plain; }
  std::chrono::steady_clock::duration Timeout() const {
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(options.timeout_s));
  }

  // Runs the io_context until the operation started just before has called back. The
  // tcp_stream's own timer fails it after the timeout; `cancel` aborts it. One handler at a
  // time, so that a leftover timer handler cannot delay the return.
  bool RunUntil(const bool& finished) {
    bool cancelled = false;
    if (ioc.stopped()) ioc.restart();
    while (!finished) {
      ioc.run_one_for(kPollInterval);
      if (ioc.stopped() && !finished) ioc.restart();
      if (!finished && !cancelled && cancel != nullptr && cancel->load()) {
        cancelled = true;
        Lowest().cancel();
      }
    }
    return cancelled;
  }

  Status Wait(const bool& finished, const beast::error_code& ec, const std::string& what) {
    const bool cancelled = RunUntil(finished);
    if (cancelled) return Status::Unavailable("GET " + url + ": cancelled");
    if (ec == beast::error::timeout) {
      return Status::Unavailable("GET " + url + ": " + what + " timed out after " +
                                 std::to_string(options.timeout_s) + " s");
    }
    if (ec) return Status::Unavailable("GET " + url + ": " + what + ": " + ec.message());
    return Status::Ok();
  }

  // Connects, sends the request, reads the head. Sets *location on a redirect.
  Status Start(const HttpUrl& u, uint64_t offset, std::string* location, int* status_code);
  Result<size_t> ReadBody(char* buf, size_t len);
};

Status HttpBodyReader::Impl::Start(const HttpUrl& u, uint64_t offset, std::string* location,
                                   int* status_code) {
  plain.reset();
  tls.reset();
  buffer.clear();
  parser.emplace();
  parser->body_limit((std::numeric_limits<std::uint64_t>::max)());

  tcp::resolver resolver(ioc);
  bool finished = false;
  beast::error_code ec;
  tcp::resolver::results_type endpoints;
  resolver.async_resolve(u.host, u.port, [&](beast::error_code e, tcp::resolver::results_type r) {
    ec = e;
    endpoints = std::move(r);
    finished = true;
  });
  TRAINTL_RETURN_IF_ERROR(Wait(finished, ec, "resolving " + u.host));

  if (u.tls) {
    if (!ssl_ctx) {
      ssl_ctx.emplace(ssl::context::tls_client);
      ssl_ctx->set_default_verify_paths();
      ssl_ctx->set_verify_mode(ssl::verify_peer);
    }
    tls.emplace(ioc, *ssl_ctx);
    tls->set_verify_callback(ssl::host_name_verification(u.host));
    if (!SSL_set_tlsext_host_name(tls->native_handle(), u.host.c_str())) {
      return Status::Unavailable("GET " + url + ": cannot set the TLS server name");
    }
  } else {
    plain.emplace(ioc);
  }
  finished = false;
  Lowest().expires_after(Timeout());
  Lowest().async_connect(endpoints, [&](beast::error_code e, const tcp::endpoint&) {
    ec = e;
    finished = true;
  });
  TRAINTL_RETURN_IF_ERROR(Wait(finished, ec, "connecting"));
  if (tls) {
    finished = false;
    Lowest().expires_after(Timeout());
    tls->async_handshake(ssl::stream_base::client, [&](beast::error_code e) {
      ec = e;
      finished = true;
    });
    TRAINTL_RETURN_IF_ERROR(Wait(finished, ec, "TLS handshake"));
  }

  http::request<http::empty_body> req{http::verb::get, u.target, 11};
  req.set(http::field::host, u.port == (u.tls ? "443" : "80") ? u.host : u.host + ":" + u.port);
  req.set(http::field::user_agent, "traintl-worker");
  req.set(http::field::connection, "close");
  if (offset > 0) req.set(http::field::range, "bytes=" + std::to_string(offset) + "-");
  finished = false;
  Lowest().expires_after(Timeout());
  auto on_done = [&](beast::error_code e, size_t) {
    ec = e;
    finished = true;
  };
  if (tls) {
    http::async_write(*tls, req, on_done);
  } else {
    http::async_write(*plain, req, on_done);
  }
  TRAINTL_RETURN_IF_ERROR(Wait(finished, ec, "sending the request"));

  finished = false;
  Lowest().expires_after(Timeout());
  if (tls) {
    http::async_read_header(*tls, buffer, *parser, on_done);
  } else {
    http::async_read_header(*plain, buffer, *parser, on_done);
  }
  TRAINTL_RETURN_IF_ERROR(Wait(finished, ec, "reading the response head"));

  const auto& head = parser->get();
  *status_code = static_cast<int>(head.result_int());
  if (*status_code >= 300 && *status_code < 400 && *status_code != 304) {
    auto it = head.find(http::field::location);
    if (it != head.end()) *location = std::string(it->value());
  }
  return Status::Ok();
}

Result<size_t> HttpBodyReader::Impl::ReadBody(char* buf, size_t len) {
  if (eof_body || parser->is_done() || len == 0) return size_t{0};
  auto& body = parser->get().body();
  body.data = buf;
  body.size = len;
  body.more = true;
  bool finished = false;
  beast::error_code ec;
  auto on_done = [&](beast::error_code e, size_t) {
    ec = e;
    finished = true;
  };
  Lowest().expires_after(Timeout());
  if (tls) {
    http::async_read(*tls, buffer, *parser, on_done);
  } else {
    http::async_read(*plain, buffer, *parser, on_done);
  }
  // need_buffer only says that our buffer is full, and a TLS peer that
  // closes without close_notify ends an EOF-delimited body.
  const bool cancelled = RunUntil(finished);
  const size_t n = len - body.size;
  if (cancelled) return Status::Unavailable("GET " + url + ": cancelled");
  if (ec == http::error::need_buffer) ec = {};
  if (ec == ssl::error::stream_truncated && !parser->content_length()) {
    eof_body = true;
    ec = {};
  }
  if (ec == beast::error::timeout) {
    return Status::Unavailable("GET " + url + ": reading the body timed out after " +
                               std::to_string(options.timeout_s) + " s");
  }
  if (ec) return Status::Unavailable("GET " + url + ": reading the body: " + ec.message());
  return n;
}

HttpBodyReader::HttpBodyReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpBodyReader::~HttpBodyReader() {
  if (impl_) {
    beast::error_code ignored;
    if (impl_->tls || impl_->plain) impl_->Lowest().socket().close(ignored);
  }
}

Result<std::unique_ptr<HttpBodyReader>> HttpBodyReader::Open(const std::string& url,
                                                             uint64_t offset,
                                                             const HttpOptions& options,
                                                             const std::atomic<bool>* cancel) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->cancel = cancel;
  std::string current = url;
  for (int redirects = 0;; ++redirects) {
    impl->url = current;
    TRAINTL_ASSIGN_OR_RETURN(HttpUrl u, ParseHttpUrl(current));
    std::string location;
    int status = 0;
    try {
      TRAINTL_RETURN_IF_ERROR(impl->Start(u, offset, &location, &status));
    } catch (const std::exception& e) {  // Asio/Beast throw on resource exhaustion
      return Status::Unavailable("GET " + current + ": " + e.what());
    }
    if (!location.empty()) {
      if (redirects >= options.max_redirects) {
        return Status::InvalidArgument("GET " + url + ": more than " +
                                       std::to_string(options.max_redirects) + " redirects");
      }
      if (location.rfind("http://", 0) != 0 && location.rfind("https://", 0) != 0) {
        if (location.empty() || location[0] != '/') location = "/" + location;
        location = std::string(u.tls ? "https://" : "http://") + u.host + ":" + u.port + location;
      }
      current = location;
      continue;
    }
    const std::string reason =
        std::to_string(status) + " " + std::string(impl->parser->get().reason());
    if (status == 404 || status == 410) {
      return Status::NotFound("GET " + current + ": " + reason + " (no such file on the server)");
    }
    if (status >= 500) return Status::Unavailable("GET " + current + ": " + reason);
    std::unique_ptr<HttpBodyReader> reader(new HttpBodyReader(std::move(impl)));
    Impl& im = *reader->impl_;
    const auto& head = im.parser->get();
    if (status == 416) {  // the offset is at or past the end: nothing to read
      auto cr = head.find(http::field::content_range);
      if (cr != head.end()) reader->total_size_ = ContentRangeTotal(std::string(cr->value()));
      im.eof_body = true;
      return reader;
    }
    if (status >= 400 || status < 200) {
      return Status::InvalidArgument("GET " + current + ": " + reason);
    }
    if (status == 206) {
      auto cr = head.find(http::field::content_range);
      if (cr != head.end()) reader->total_size_ = ContentRangeTotal(std::string(cr->value()));
      reader->range_honoured_ = true;
    } else {
      if (auto n = im.parser->content_length()) reader->total_size_ = *n;
      reader->range_honoured_ = offset == 0;
      im.skip = offset;
    }
    return reader;
  }
}

Result<size_t> HttpBodyReader::Read(char* buf, size_t len) {
  try {
    while (impl_->skip > 0) {
      std::vector<char> scratch(static_cast<size_t>(std::min<uint64_t>(impl_->skip, 1 << 16)));
      TRAINTL_ASSIGN_OR_RETURN(size_t n, impl_->ReadBody(scratch.data(), scratch.size()));
      if (n == 0) {
        impl_->skip = 0;
        return size_t{0};
      }
      impl_->skip -= n;
    }
    return impl_->ReadBody(buf, len);
  } catch (const std::exception& e) {
    return Status::Unavailable("GET " + impl_->url + ": " + e.what());
  }
}

}  // namespace data
}  // namespace traintl
