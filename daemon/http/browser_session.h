// Browser sessions: how a page served by the daemon (the dashboard) authenticates its API
// calls without holding the bearer token.
//
// A login (dashboard_routes.h) makes a session: a random id, an expiry, and two values
// derived from them with the cluster token as HMAC key, so that any daemon of the cluster
// (which all hold the token) checks them without shared state, and a new token ends every
// session:
//   - the cookie kSessionCookie, "v2.<id>.<expiry>.<mac>" (HttpOnly, SameSite=Strict);
//   - the page key, which the login answers in its body and the page keeps in its
//     origin's storage, and sends as the header kSessionHeader.
// The server accepts a session in place of "Authorization: Bearer" only when both are
// there and belong together. Neither alone is worth anything:
//   - a cross-site page can make the browser send the cookie, but not the header (a custom
//     header needs a CORS preflight the daemon never grants);
//   - cookies are not separated by port: every service on the daemon's host (a job's
//     TensorBoard, another user's server on 127.0.0.1) receives the cookie when the
//     browser visits it, while the page key stays in storage of the daemon's origin,
//     whose port is part of it.
//
// Also the rate-limited warning for rejected tokens, which the server's bearer check and the
// dashboard's login share.
//
// Thread-safety: free functions; WarnRejectedToken's rate limit is under a mutex.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace traintl::http {

// The session cookie's name, or its prefix: a login names it after the port the page was
// loaded from ("traintl_session_7450"), because cookies are not separated by port and two
// daemons on one host (or two tunnels to them) would otherwise log each other out.
inline constexpr std::string_view kSessionCookie = "traintl_session";
// Lower case, as Request::headers keys are.
inline constexpr std::string_view kSessionHeader = "x-traintl-ui";

struct BrowserSession {
  std::string cookie;    // the value of kSessionCookie
  std::string page_key;  // the value of kSessionHeader
};

// A new session valid until now_s + max_age_s (unix seconds); none (empty fields) for an
// empty token.
BrowserSession NewBrowserSession(const std::string& token, int64_t now_s, int64_t max_age_s);

// The cookie name a login answers for a page loaded from `host_header` (its port, digits
// only; kSessionCookie alone without one).
std::string SessionCookieName(std::string_view host_header);

// Whether a session cookie in `cookie_header` (any cookie named kSessionCookie or
// kSessionCookie_<port>: a service on another port may set one of its own beside ours) is a
// session of `token` unexpired at now_s whose page key is `page_key`. Constant-time in the
// secrets.
bool BrowserSessionValid(std::string_view cookie_header, const std::string& page_key,
                         const std::string& token, int64_t now_s);

// The value of the first cookie `name` in a Cookie header ("a=1; b=2"), or "" when absent.
std::string CookieValue(std::string_view cookie_header, std::string_view name);
// Every value of cookie `name`, in order.
std::vector<std::string> CookieValues(std::string_view cookie_header, std::string_view name);
// Every session cookie of `cookie_header` ("name=value", in order), as BrowserSessionValid
// considers them.
std::vector<std::string> SessionCookies(std::string_view cookie_header);

// Logs a rejected token (a bearer token, or a dashboard login) at warning: an operator's
// concern (journalctl -p warning), but a client retrying in a loop must not flood the
// journal: at most one line per 10 s, saying how many rejections it stands for.
// Thread-safe.
void WarnRejectedToken(const std::string& remote, const char* why);

}  // namespace traintl::http
