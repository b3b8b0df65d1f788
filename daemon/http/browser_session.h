// Browser sessions: how a page served by the daemon (the dashboard) authenticates its API
// calls without holding the bearer token in script-readable storage.
//
// The login answer sets the cookie kSessionCookie (HttpOnly, SameSite=Strict) to
// SessionValueForToken(token): a digest of the token, so the cookie cannot be replayed as
// a bearer token elsewhere, and changing the token ends every session. The server accepts
// the cookie in place of "Authorization: Bearer" only on requests that also carry the
// header kSessionHeader: a cross-site page can neither read the answers (same-origin
// policy) nor send that header without a CORS preflight the daemon never grants, so a
// forged form or image request gets 401 even if the browser attached the cookie.
//
// Also the rate-limited warning for rejected tokens, which the server's bearer check and the
// dashboard's login share.
//
// Thread-safety: free functions; WarnRejectedToken's rate limit is under a mutex.
#pragma once

#include <string>
#include <string_view>

namespace traintl::http {

inline constexpr std::string_view kSessionCookie = "traintl_session";
// Lower case, as Request::headers keys are.
inline constexpr std::string_view kSessionHeader = "x-traintl-ui";

// Hex SHA-256 of a fixed label and `token`; "" for an empty token (no sessions).
std::string SessionValueForToken(const std::string& token);

// The value of cookie `name` in a Cookie header ("a=1; b=2"), or "" when absent.
std::string CookieValue(std::string_view cookie_header, std::string_view name);

// Logs a rejected token (a bearer token, or a dashboard login) at warning: an operator's
// concern (journalctl -p warning), but a client retrying in a loop must not flood the
// journal: at most one line per 10 s, saying how many rejections it stands for.
// Thread-safe.
void WarnRejectedToken(const std::string& remote, const char* why);

}  // namespace traintl::http
