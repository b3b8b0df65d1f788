#include "common/http_client.h"

#include <openssl/ssl.h>

#include <algorithm>
#include <exception>
#include <limits>
#include <utility>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

namespace traintl::http {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
namespace ssl = asio::ssl;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;
using tcp = asio::ip::tcp;

namespace {

// How often a wait checks ClientOptions::cancel.
constexpr auto kPollInterval = std::chrono::milliseconds(50);
// Largest response head accepted (Beast's default, 8 KiB, is tight for proxies).
constexpr uint32_t kHeaderLimit = 64 * 1024;

bool HasControlChars(const std::string& s) {
  return std::any_of(s.begin(), s.end(),
                     [](char c) { return c == '\r' || c == '\n' || c == '\0'; });
}

bool HasSpaceOrControl(const std::string& s) {
  return std::any_of(s.begin(), s.end(),
                     [](char c) { return static_cast<unsigned char>(c) <= 32 || c == 127; });
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// "host:port", with an IPv6 literal in brackets.
std::string Authority(const std::string& host, uint16_t port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

// The Host field: the port only when it is not the scheme's default.
std::string HostField(const ClientRequest& r) {
  const std::string authority = Authority(r.host, r.port);
  return r.port == (r.tls ? 443 : 80) ? authority.substr(0, authority.rfind(':')) : authority;
}

std::string UrlOf(const ClientRequest& r) {
  return (r.tls ? "https://" : "http://") + HostField(r) + r.target;
}

// Parses "bytes a-b/total" or "bytes */total"; the total, when given.
std::optional<uint64_t> ContentRangeTotal(const std::string& value) {
  const auto slash = value.rfind('/');
  if (slash == std::string::npos || slash + 1 >= value.size()) return std::nullopt;
  const std::string total = value.substr(slash + 1);
  if (total.find_first_not_of("0123456789") != std::string::npos || total.size() > 19) {
    return std::nullopt;
  }
  return static_cast<uint64_t>(std::stoull(total));
}

// The first and last byte of "bytes FIRST-LAST/TOTAL" (TOTAL may be "*").
std::optional<std::pair<uint64_t, uint64_t>> ContentRangeSpan(const std::string& value) {
  const std::string unit = "bytes ";
  if (value.compare(0, unit.size(), unit) != 0) return std::nullopt;
  const auto dash = value.find('-', unit.size());
  const auto slash = value.find('/', unit.size());
  if (dash == std::string::npos || slash == std::string::npos || dash > slash) return std::nullopt;
  const std::string first = value.substr(unit.size(), dash - unit.size());
  const std::string last = value.substr(dash + 1, slash - dash - 1);
  for (const std::string* s : {&first, &last}) {
    if (s->empty() || s->size() > 19 || s->find_first_not_of("0123456789") != std::string::npos)
      return std::nullopt;
  }
  const uint64_t a = std::stoull(first), b = std::stoull(last);
  if (b < a) return std::nullopt;
  return std::make_pair(a, b);
}

std::string ConnectErrorText(const error_code& ec) {
  if (ec == asio::error::connection_refused) return "connection refused";
  if (ec == asio::error::host_unreachable) return "host unreachable";
  if (ec == asio::error::network_unreachable) return "network unreachable";
  return ec.message();
}

bool IsRedirect(int status) {
  return status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
}

// Where a redirect's Location leads, from the request that got it.
Status FollowLocation(const std::string& location, ClientRequest* r) {
  const std::string scheme = r->tls ? "https:" : "http:";
  std::string url = location;
  if (location.rfind("//", 0) == 0) {
    url = scheme + location;
  } else if (location[0] == '/') {
    url = scheme + "//" + Authority(r->host, r->port) + location;
  } else if (Lower(location).rfind("http://", 0) != 0 &&
             Lower(location).rfind("https://", 0) != 0) {
    const std::string path = r->target.substr(0, r->target.find('?'));  // relative to its folder
    url = scheme + "//" + Authority(r->host, r->port) + path.substr(0, path.rfind('/') + 1) +
          location;
  }
  TRAINTL_ASSIGN_OR_RETURN(Url next, ParseUrl(url));
  if (r->tls && !next.tls) {
    return Status::InvalidArgument("refused a redirect from https to " + url +
                                   ": it would drop TLS");
  }
  if (next.host != r->host || next.port != r->port) {
    for (auto it = r->headers.begin(); it != r->headers.end();) {  // a credential for one server
      it = Lower(it->first) == "authorization" ? r->headers.erase(it) : std::next(it);
    }
    if (r->tls) r->tls->server_name.clear();
  }
  if (next.tls && !r->tls) r->tls.emplace();
  if (!next.tls) r->tls.reset();
  r->host = next.host;
  r->port = next.port;
  r->target = next.target;
  return Status::Ok();
}

}  // namespace

std::string ClientResponse::header(const std::string& name) const {
  auto it = headers.find(Lower(name));
  return it == headers.end() ? std::string() : it->second;
}

Result<Url> ParseUrl(const std::string& url) {
  Url out;
  std::string rest;
  const std::string scheme = Lower(url.substr(0, 8));
  if (scheme.rfind("http://", 0) == 0) {
    rest = url.substr(7);
  } else if (scheme == "https://") {
    out.tls = true;
    rest = url.substr(8);
  } else {
    return Status::InvalidArgument(url + ": not an http:// or https:// URL");
  }
  const size_t slash = rest.find_first_of("/?#");
  const std::string authority = rest.substr(0, slash);
  out.target = slash == std::string::npos ? "/" : rest.substr(slash);
  if (auto hash = out.target.find('#'); hash != std::string::npos) out.target.resize(hash);
  if (out.target.empty() || out.target[0] != '/') out.target = "/" + out.target;
  if (authority.find('@') != std::string::npos) {
    return Status::InvalidArgument(url + ": credentials in URLs are not supported");
  }
  std::string port;
  if (!authority.empty() && authority[0] == '[') {  // [v6addr]:port
    const auto close = authority.find(']');
    if (close == std::string::npos) return Status::InvalidArgument(url + ": bad IPv6 host");
    out.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size() && authority[close + 1] == ':') {
      port = authority.substr(close + 2);
    }
  } else if (auto colon = authority.rfind(':'); colon != std::string::npos) {
    out.host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  } else {
    out.host = authority;
  }
  if (out.host.empty()) return Status::InvalidArgument(url + ": no host");
  if (HasSpaceOrControl(out.host) || HasSpaceOrControl(out.target)) {
    return Status::InvalidArgument(url + ": spaces or control characters");
  }
  if (port.empty()) {
    out.port = out.tls ? 443 : 80;
  } else if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
             std::stoi(port) == 0 || std::stoi(port) > 65535) {
    return Status::InvalidArgument(url + ": bad port '" + port + "'");
  } else {
    out.port = static_cast<uint16_t>(std::stoi(port));
  }
  return out;
}

struct ClientStream::Impl {
  explicit Impl(const ClientOptions& o) : options(o) {}

  ClientOptions options;
  asio::io_context ioc;
  tcp::resolver resolver{ioc};
  tcp::socket socket{ioc};
  std::optional<ssl::context> ssl_ctx;
  std::optional<ssl::stream<tcp::socket&>> tls;
  // Bounded: Beast 1.74 applies no limit to chunk-size lines, chunk extensions or
  // trailers, so a server sending one of them without end would grow an unbounded buffer
  // (each read counting as progress against the idle timeout). Full, it fails the read.
  boost::beast::flat_buffer buffer{2 * kHeaderLimit};
  std::optional<bhttp::response_parser<bhttp::buffer_body>> parser;
  Clock::time_point started;      // Open was called
  Clock::time_point hop_started;  // the current connection was begun
  bool sent = false;              // the request is (being) written: errors are Internal now
  bool eof_body = false;          // a TLS body that ended without close_notify
  uint64_t skip = 0;              // body bytes to drop: the server ignored the Range

  // Runs `op(stream)` on the TLS stream when there is one, else on the socket.
  template <class Op>
  void WithStream(Op&& op) {
    if (tls) {
      op(*tls);
    } else {
      op(socket);
    }
  }

  Status Failed(const std::string& stage, const error_code& ec) const {
    return Status(sent ? Status::Code::kInternal : Status::Code::kUnavailable,
                  stage + " failed: " + ec.message());
  }

  // Starts an operation with `start(handler)` and runs the io_context until it has called
  // back, leaving its error in `ec`. Past the nearest bound of ClientOptions, or once the
  // cancel flag is set, closing the socket makes it call back; that is the Status.
  template <class Start>
  Status Await(bool connecting, const std::string& stage, error_code& ec, Start&& start) {
    auto deadline = Clock::time_point::max();
    std::chrono::milliseconds bound{0};
    auto consider = [&](Clock::time_point from, std::chrono::milliseconds limit) {
      if (limit.count() > 0 && from + limit < deadline) {
        deadline = from + limit;
        bound = limit;
      }
    };
    consider(started, options.timeout);
    if (connecting) consider(hop_started, options.connect_timeout);
    consider(Clock::now(), options.idle_timeout);

    bool done = false;
    const char* aborted = nullptr;
    ec = {};
    start([&](const error_code& e, auto&&...) {
      ec = e;
      done = true;
    });
    ioc.restart();
    while (!done) {
      const auto now = Clock::now();
      if (!aborted && options.cancel != nullptr && options.cancel->load()) aborted = "cancelled";
      if (!aborted && now >= deadline) aborted = "timed out";
      if (aborted) {
        error_code ignored;
        resolver.cancel();
        socket.close(ignored);
      }
      auto until = aborted ? Clock::time_point::max() : deadline;
      if (!aborted && options.cancel != nullptr) until = std::min(until, now + kPollInterval);
      ioc.run_one_until(until);
      if (ioc.stopped()) ioc.restart();
    }
    if (!aborted) return Status::Ok();
    if (aborted[0] == 'c') return Status::Unavailable("cancelled");
    return Status(sent ? Status::Code::kInternal : Status::Code::kUnavailable,
                  stage + " timed out after " + std::to_string(bound.count()) + " ms");
  }

  // Connects, sends `r` and reads the response head.
  Status Start(const ClientRequest& r);
  Result<size_t> ReadSome(char* buf, size_t len);
};

Status ClientStream::Impl::Start(const ClientRequest& r) {
  error_code ec;
  socket.close(ec);
  tls.reset();
  buffer.clear();
  parser.emplace();
  parser->header_limit(kHeaderLimit);
  // Not boost::none: Boost 1.74's parser compares sizes against the empty optional and
  // then rejects every body with "body limit exceeded".
  parser->body_limit(std::numeric_limits<std::uint64_t>::max());
  // A HEAD answer carries the Content-Length of a body that never comes.
  if (r.method == "HEAD") parser->skip(true);
  hop_started = Clock::now();
  sent = false;
  eof_body = false;

  std::vector<tcp::endpoint> endpoints;
  // An IP literal (the usual case of the CLI: its daemon's api_address is 127.0.0.1:port)
  // is its own endpoint. Asio resolves on a thread it starts for each io_context's first
  // lookup, and a short CLI call would pay that thread and getaddrinfo for nothing.
  error_code not_literal;
  const asio::ip::address literal = asio::ip::make_address(r.host, not_literal);
  if (!not_literal) {
    endpoints.emplace_back(literal, r.port);
  } else {
    TRAINTL_RETURN_IF_ERROR(Await(true, "resolving " + r.host, ec, [&](auto done) {
      resolver.async_resolve(r.host, std::to_string(r.port),
                             [&, done](const error_code& e, tcp::resolver::results_type found) {
                               for (const auto& entry : found)
                                 endpoints.push_back(entry.endpoint());
                               done(e);
                             });
    }));
    if (ec) return Status::Unavailable("cannot resolve '" + r.host + "': " + ec.message());
  }
  TRAINTL_RETURN_IF_ERROR(Await(true, "connecting", ec,
                                [&](auto done) { asio::async_connect(socket, endpoints, done); }));
  if (ec) return Status::Unavailable(ConnectErrorText(ec));

  if (r.tls) {
    ssl_ctx.emplace(ssl::context::tls_client);
    SSL_CTX_set_min_proto_version(ssl_ctx->native_handle(), TLS1_2_VERSION);
    if (r.tls->ca_file.empty()) {
      ssl_ctx->set_default_verify_paths(ec);
    } else {
      ssl_ctx->load_verify_file(r.tls->ca_file, ec);
    }
    if (ec) {
      return Status::InvalidArgument("cannot use CA file '" + r.tls->ca_file +
                                     "': " + ec.message());
    }
    ssl_ctx->set_verify_mode(ssl::verify_peer);
    const std::string name = r.tls->server_name.empty() ? r.host : r.tls->server_name;
    tls.emplace(socket, *ssl_ctx);
    tls->set_verify_callback(ssl::host_name_verification(name));
    asio::ip::make_address(name, ec);
    // SNI carries host names only (RFC 6066).
    if (ec) SSL_set_tlsext_host_name(tls->native_handle(), name.c_str());
    // Verification failures read "certificate verify failed"; a plain-HTTP server makes the
    // handshake fail with "wrong version number".
    const std::string stage = "TLS handshake with " + Authority(r.host, r.port);
    TRAINTL_RETURN_IF_ERROR(Await(
        true, stage, ec, [&](auto done) { tls->async_handshake(ssl::stream_base::client, done); }));
    if (ec) return Failed(stage, ec);
  }

  bhttp::request<bhttp::string_body> req;
  req.method_string(r.method);
  req.target(r.target);
  req.version(11);
  req.set(bhttp::field::host, HostField(r));
  req.set(bhttp::field::user_agent, options.user_agent);
  req.set(bhttp::field::connection, "close");
  if (r.range_from > 0) {
    req.set(bhttp::field::range, "bytes=" + std::to_string(r.range_from) + "-");
  }
  for (const auto& [name, value] : r.headers) req.set(name, value);
  req.body() = r.body;
  req.prepare_payload();
  sent = true;
  error_code write_error;
  TRAINTL_RETURN_IF_ERROR(Await(false, "sending the request", write_error, [&](auto done) {
    WithStream([&](auto& stream) { bhttp::async_write(stream, req, done); });
  }));
  // Read even after a failed write: a server may answer (413, 401) and stop reading before
  // the body is all sent, and its answer is worth more than the write error.
  TRAINTL_RETURN_IF_ERROR(Await(false, "reading the response head", ec, [&](auto done) {
    WithStream([&](auto& stream) { bhttp::async_read_header(stream, buffer, *parser, done); });
  }));
  if (ec && write_error) return Failed("sending the request", write_error);
  if (ec) return Failed("reading the response head", ec);
  return Status::Ok();
}

Result<size_t> ClientStream::Impl::ReadSome(char* buf, size_t len) {
  // A read may consume only chunk framing; go on until body bytes or the end.
  while (!eof_body && !parser->is_done()) {
    auto& body = parser->get().body();
    body.data = buf;
    body.size = len;
    body.more = true;
    error_code ec;
    TRAINTL_RETURN_IF_ERROR(Await(false, "reading the body", ec, [&](auto done) {
      WithStream([&](auto& stream) { bhttp::async_read_some(stream, buffer, *parser, done); });
    }));
    // need_buffer only says that `buf` is full.
    if (ec == bhttp::error::need_buffer) ec = {};
    // A TLS peer that closes without close_notify ends a body delimited by the close.
    if (ec == ssl::error::stream_truncated && !parser->content_length() && !parser->chunked()) {
      eof_body = true;
      ec = {};
    }
    if (ec) return Failed("reading the body", ec);
    if (len > body.size) return len - body.size;
  }
  return size_t{0};
}

ClientStream::ClientStream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ClientStream::~ClientStream() {
  // No TLS close_notify exchange: the answer has been read (or is abandoned), and waiting
  // for the server's close_notify could only add latency.
  error_code ignored;
  if (impl_) impl_->socket.close(ignored);
}

Result<std::unique_ptr<ClientStream>> ClientStream::Open(const ClientRequest& request,
                                                         const ClientOptions& options) {
  if (request.method.empty() || HasSpaceOrControl(request.method)) {
    return Status::InvalidArgument("invalid HTTP method '" + request.method + "'");
  }
  if (request.target.empty() || HasSpaceOrControl(request.target)) {
    return Status::InvalidArgument("invalid request target");
  }
  for (const auto& [name, value] : request.headers) {
    if (name.empty() || HasSpaceOrControl(name) || HasControlChars(value)) {
      return Status::InvalidArgument("invalid header '" + name + "'");
    }
  }
  try {
    auto impl = std::make_unique<Impl>(options);
    impl->started = Clock::now();
    ClientRequest current = request;
    std::unique_ptr<ClientStream> stream(new ClientStream(std::move(impl)));
    Impl& im = *stream->impl_;
    for (int redirects = 0;; ++redirects) {
      TRAINTL_RETURN_IF_ERROR(im.Start(current));
      const auto& head = im.parser->get();
      const int status = static_cast<int>(head.result_int());
      const auto location = head.find(bhttp::field::location);
      const bool follow = options.max_redirects > 0 && IsRedirect(status) &&
                          location != head.end() && !location->value().empty() &&
                          (current.method == "GET" || current.method == "HEAD");
      if (!follow) break;
      if (redirects >= options.max_redirects) {
        return Status::InvalidArgument("more than " + std::to_string(options.max_redirects) +
                                       " redirects");
      }
      TRAINTL_RETURN_IF_ERROR(FollowLocation(std::string(location->value()), &current));
    }

    const auto& head = im.parser->get();
    const int status = static_cast<int>(head.result_int());
    stream->head_.status = status;
    stream->reason_ = std::string(head.reason());
    stream->url_ = UrlOf(current);
    for (const auto& field : head) {
      std::string& value = stream->head_.headers[Lower(std::string(field.name_string()))];
      value += (value.empty() ? "" : ", ") + std::string(field.value());
    }
    if (status == 206) {
      // A 206 for other bytes than those asked for would be read as if it were them.
      const std::string content_range = stream->header("content-range");
      const auto span = ContentRangeSpan(content_range);
      if (!span || span->first != current.range_from) {
        return Status::InvalidArgument("the server answered 206 with Content-Range '" +
                                       content_range + "' to a request for the bytes from " +
                                       std::to_string(current.range_from));
      }
      stream->range_end_ = span->second;
    }
    if (status == 206 || status == 416) {
      stream->total_size_ = ContentRangeTotal(stream->header("content-range"));
    } else if (status == 200 && im.parser->content_length()) {
      stream->total_size_ = *im.parser->content_length();
    }
    if (current.range_from > 0 && status == 200) {
      stream->range_honoured_ = false;
      im.skip = current.range_from;
    }
    return stream;
  } catch (const std::exception& e) {  // Asio and Beast throw on resource exhaustion
    return Status::Unavailable(std::string("HTTP client: ") + e.what());
  }
}

Result<size_t> ClientStream::Read(char* buf, size_t len) {
  if (len == 0) return size_t{0};
  try {
    while (impl_->skip > 0) {  // bytes before range_from, into `buf` and dropped
      TRAINTL_ASSIGN_OR_RETURN(size_t n,
                               impl_->ReadSome(buf, std::min<uint64_t>(impl_->skip, len)));
      if (n == 0) return n;
      impl_->skip -= n;
    }
    return impl_->ReadSome(buf, len);
  } catch (const std::exception& e) {
    return Status::Internal(std::string("HTTP client: ") + e.what());
  }
}

Status ClientStream::ReadAll(std::string* out) {
  constexpr size_t kStep = 64 * 1024;
  while (true) {
    const size_t old = out->size();
    out->resize(old + kStep);
    auto n = Read(out->data() + old, kStep);
    out->resize(old + (n.ok() ? *n : 0));
    if (!n.ok()) return n.status();
    if (*n == 0) return Status::Ok();
  }
}

Result<ClientResponse> Exchange(const ClientRequest& request, const ClientOptions& options) {
  TRAINTL_ASSIGN_OR_RETURN(auto stream, ClientStream::Open(request, options));
  ClientResponse out = stream->head();
  TRAINTL_RETURN_IF_ERROR(stream->ReadAll(&out.body));
  return out;
}

}  // namespace traintl::http
