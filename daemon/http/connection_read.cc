// internal::Connection, reading a request: the header under its deadlines and size limit,
// the checks made before any handler runs (framing, target, percent-encoding, bearer
// token, route, Content-Length against the route's limit, Expect: 100-continue), then the
// body under the route's limit and the read timeout. Every refusal goes to RespondEarly
// (connection_respond.cc); a complete request goes to Dispatch.
#include "daemon/http/connection.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <mutex>

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>

#include "common/crypto.h"
#include "common/logging.h"
#include "daemon/http/browser_session.h"
#include "daemon/http/uri.h"

namespace traintl::http::internal {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using boost::system::error_code;

namespace {

std::string_view ToStd(beast::string_view s) { return std::string_view(s.data(), s.size()); }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool IsHttpError(const error_code& ec) {
  return ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category();
}

}  // namespace

void Connection::BeginHeaderRead() {
  state_ = State::kReadingHeader;
  ++request_seq_;
  route_ = nullptr;
  params_.clear();
  request_ = Request();
  keep_alive_ = false;
  head_request_ = false;
  http11_ = true;
  response_started_ = false;
  streaming_ = false;
  stream_ended_ = false;
  log_line_.clear();
  parser_.emplace(TrailerLimits{.max_trailer_bytes = server_->options.max_header_bytes});
  size_t limit =
      std::min<size_t>(server_->options.max_header_bytes, std::numeric_limits<uint32_t>::max());
  parser_->header_limit(static_cast<uint32_t>(limit));
  // Body limits are per route and only known once the header is parsed; Beast would
  // otherwise refuse a large Content-Length with its own 1 MiB default. Not boost::none:
  // Beast 1.74 compares `len > optional` there, which is true for every length when none.
  parser_->body_limit(std::numeric_limits<uint64_t>::max());
  // An anonymous connection's deadline counts from the start of its wait (idle time
  // included), so it cannot hold a slot longer by sending its first byte late; an
  // authenticated one gets the whole header time from its first byte.
  if (authenticated_) {
    ArmReadTimer(server_->options.header_timeout);
  } else {
    ArmReadTimerAt(wait_started_ + AnonymousHeaderTimeout());
  }
  WithStream([&](auto& stream) {
    bhttp::async_read_header(
        stream, buffer_, *parser_,
        [self = shared_from_this()](error_code ec, size_t) { self->OnHeader(ec); });
  });
}

void Connection::OnHeader(error_code ec) {
  if (closed()) return;
  CancelReadTimer();
  if (ec) {
    if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow) {
      RespondEarly(431, "request header too large", {}, /*close=*/true);
    } else if (ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message ||
               !IsHttpError(ec)) {
      CloseNow();  // the client closed, reset, or timed out
    } else {
      RespondEarly(400, "malformed request: " + ec.message(), {}, /*close=*/true);
    }
    return;
  }

  const auto& msg = parser_->get();
  http11_ = msg.version() >= 11;
  head_request_ = msg.method() == bhttp::verb::head;
  const bool body_unread = !parser_->is_done();
  std::string_view target = ToStd(msg.target());
  std::string logged(target.substr(0, std::min<size_t>(target.size(), 200)));
  // The dashboard's login link carries the token in its query: never log one.
  if (const size_t q = target.find('?');
      q != std::string_view::npos && target.find("token", q) != std::string_view::npos)
    logged = std::string(target.substr(0, std::min<size_t>(q, 200))) + "?(query withheld)";
  log_line_ = std::string(ToStd(msg.method_string())) + " " + logged;

  // A request Transfer-Encoding that does not end in "chunked" has no defined length;
  // guessing would let a front end and this server disagree about where it ends.
  if (msg.count(bhttp::field::transfer_encoding) > 0 && !parser_->chunked()) {
    RespondEarly(400, "unsupported transfer-encoding", {}, /*close=*/true);
    return;
  }
  if (target.empty() || target[0] != '/') {
    RespondEarly(400, "request target must be an absolute path", {}, /*close=*/true);
    return;
  }
  std::string_view without_fragment = target.substr(0, target.find('#'));
  size_t qpos = without_fragment.find('?');
  std::string_view raw_path = without_fragment.substr(0, qpos);
  std::string_view raw_query =
      qpos == std::string_view::npos ? std::string_view() : without_fragment.substr(qpos + 1);
  auto path = PercentDecode(raw_path);
  if (!path) {
    RespondEarly(400, "malformed percent-encoding in path", {}, body_unread);
    return;
  }
  auto query = ParseQuery(raw_query);
  if (!query) {
    RespondEarly(400, "malformed query string", {}, body_unread);
    return;
  }

  // A valid token makes the connection authenticated, on any route (it then keeps the
  // longer timeouts and is not displaced by new connections while it waits).
  std::string_view token;
  {
    auto it = msg.find(bhttp::field::authorization);
    std::string_view value = it == msg.end() ? std::string_view() : Trim(ToStd(it->value()));
    constexpr std::string_view kScheme = "bearer ";
    if (value.size() > kScheme.size() &&
        beast::iequals(beast::string_view(value.data(), kScheme.size()),
                       beast::string_view(kScheme.data(), kScheme.size()))) {
      token = Trim(value.substr(kScheme.size()));
    }
  }
  auto matches = [&token](const std::string& expected) {
    return !token.empty() && !expected.empty() && ConstantTimeEquals(std::string(token), expected);
  };
  const bool token_valid = matches(server_->options.token);
  const bool cluster_valid = matches(server_->options.cluster_token);
  // A browser session stands in for the token only with its header: see browser_session.h.
  bool session_valid = false;
  if (token.empty() && server_->options.browser_sessions) {
    auto key = msg.find(std::string(kSessionHeader));
    auto cookie = msg.find(bhttp::field::cookie);
    if (key != msg.end() && cookie != msg.end()) {
      const int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
      session_valid = BrowserSessionValid(ToStd(cookie->value()), std::string(ToStd(key->value())),
                                          server_->options.token, now_s);
    }
  }
  if (token_valid || session_valid || cluster_valid) MarkAuthenticated();

  request_.method = std::string(ToStd(msg.method_string()));
  request_.target = std::string(target);
  request_.path = std::move(*path);
  request_.query = std::move(*query);
  request_.remote = remote_;
  for (const auto& field : msg) {
    std::string name = AsciiLower(std::string(ToStd(field.name_string())));
    std::string value(ToStd(field.value()));
    auto it = request_.headers.find(name);
    if (it == request_.headers.end()) {
      request_.headers.emplace(std::move(name), std::move(value));
    } else {
      it->second += ", " + value;
    }
  }

  RouteMatch match = server_->router->Match(request_.method, raw_path);
  switch (match.kind) {
    case RouteMatch::Kind::kNotFound:
      RespondEarly(404, "not found", {}, body_unread);
      return;
    case RouteMatch::Kind::kMethodNotAllowed:
      RespondEarly(405, "method not allowed", {{"Allow", match.allow}}, body_unread);
      return;
    case RouteMatch::Kind::kBadRequest:
      RespondEarly(400, match.error, {}, body_unread);
      return;
    case RouteMatch::Kind::kFound:
      break;
  }
  route_ = match.route;
  params_ = std::move(match.params);

  const Access access = route_->options.access;
  const bool allowed = access == Access::kAnyone ||
                       (access == Access::kUser && (token_valid || session_valid)) ||
                       (access == Access::kCluster && cluster_valid);
  if (!allowed) {
    if (token.empty() && !session_valid) {
      WarnRejectedToken(remote_, "missing bearer token");
      RespondEarly(401, "missing bearer token", {{"WWW-Authenticate", "Bearer"}}, body_unread);
    } else if (token_valid || session_valid || cluster_valid) {
      // A known credential for the other kind of route: the API token does not open the
      // daemon-to-daemon routes (so that --cluster-secret-file keeps API users out of
      // them), nor the cluster credential the API.
      RespondEarly(403,
                   access == Access::kCluster
                       ? "daemon-to-daemon route: needs the cluster credential"
                       : "needs the API token",
                   {}, body_unread);
    } else {
      WarnRejectedToken(remote_, "invalid token");
      RespondEarly(401, "invalid token", {{"WWW-Authenticate", "Bearer error=\"invalid_token\""}},
                   body_unread);
    }
    return;
  }

  auto content_length = parser_->content_length();
  if (content_length && *content_length > route_->options.max_body_bytes) {
    RespondEarly(413,
                 "request body too large (limit " + std::to_string(route_->options.max_body_bytes) +
                     " bytes)",
                 {}, /*close=*/true);
    return;
  }
  if (!body_unread) {
    Dispatch();
    return;
  }
  parser_->body_limit(static_cast<uint64_t>(route_->options.max_body_bytes));
  auto expect = msg.find(bhttp::field::expect);
  if (http11_ && expect != msg.end() && beast::iequals(expect->value(), "100-continue")) {
    WriteItem item;
    item.message = std::make_unique<Message>(bhttp::status::continue_, 11);
    item.head_only = true;
    Enqueue(std::move(item));
  }
  state_ = State::kReadingBody;
  ReadBody();
}

void Connection::ReadBody() {
  // An idle timeout (reset on every progress) rather than a deadline: large uploads on a
  // slow link must still finish.
  ArmReadTimer(server_->options.read_timeout);
  WithStream([&](auto& stream) {
    bhttp::async_read_some(
        stream, buffer_, *parser_,
        [self = shared_from_this()](error_code ec, size_t) { self->OnBody(ec); });
  });
}

void Connection::OnBody(error_code ec) {
  if (closed()) return;
  CancelReadTimer();
  if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow) {
    RespondEarly(431, "request trailer or chunk extension too large", {}, /*close=*/true);
    return;
  }
  if (ec == bhttp::error::body_limit) {
    RespondEarly(413,
                 "request body too large (limit " + std::to_string(route_->options.max_body_bytes) +
                     " bytes)",
                 {}, /*close=*/true);
    return;
  }
  if (ec) {
    if (IsHttpError(ec) && ec != bhttp::error::end_of_stream &&
        ec != bhttp::error::partial_message) {
      RespondEarly(400, "malformed request body: " + ec.message(), {}, /*close=*/true);
    } else {
      CloseNow();
    }
    return;
  }
  if (!parser_->is_done()) {
    ReadBody();
    return;
  }
  Dispatch();
}

}  // namespace traintl::http::internal
