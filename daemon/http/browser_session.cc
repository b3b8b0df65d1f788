#include "daemon/http/browser_session.h"

#include <chrono>
#include <mutex>

#include "common/crypto.h"
#include "common/logging.h"

namespace traintl::http {

namespace {

constexpr char kLabel[] = "traintl browser session v2\n";

std::string CookieMac(const std::string& token, const std::string& id, const std::string& expiry) {
  return HmacSha256Hex(token, std::string(kLabel) + "cookie\n" + id + "\n" + expiry);
}

std::string PageKey(const std::string& token, const std::string& id) {
  return HmacSha256Hex(token, std::string(kLabel) + "page\n" + id);
}

// "v2.<id>.<expiry>.<mac>" split into its fields; false when it is not that shape.
bool ParseCookie(const std::string& value, std::string* id, std::string* expiry, std::string* mac) {
  if (value.size() > 256 || value.rfind("v2.", 0) != 0) return false;
  const size_t a = 3, b = value.find('.', a);
  if (b == std::string::npos) return false;
  const size_t c = value.find('.', b + 1);
  if (c == std::string::npos) return false;
  *id = value.substr(a, b - a);
  *expiry = value.substr(b + 1, c - b - 1);
  *mac = value.substr(c + 1);
  return !id->empty() && !expiry->empty() && expiry->size() <= 15 &&
         expiry->find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace

BrowserSession NewBrowserSession(const std::string& token, int64_t now_s, int64_t max_age_s) {
  if (token.empty()) return {};
  const std::string id = RandomHex(16);
  const std::string expiry = std::to_string(now_s + max_age_s);
  return {"v2." + id + "." + expiry + "." + CookieMac(token, id, expiry), PageKey(token, id)};
}

bool BrowserSessionValid(std::string_view cookie_header, const std::string& page_key,
                         const std::string& token, int64_t now_s) {
  if (token.empty() || page_key.empty()) return false;
  for (const std::string& cookie : SessionCookies(cookie_header)) {
    const std::string value = cookie.substr(cookie.find('=') + 1);
    std::string id, expiry, mac;
    if (!ParseCookie(value, &id, &expiry, &mac)) continue;
    if (std::stoll(expiry) <= now_s) continue;
    if (ConstantTimeEquals(mac, CookieMac(token, id, expiry)) &&
        ConstantTimeEquals(page_key, PageKey(token, id))) {
      return true;
    }
  }
  return false;
}

namespace {

// Calls fn(name, value) for each cookie of a Cookie header.
template <typename F>
void ForEachCookie(std::string_view header, F fn) {
  while (!header.empty()) {
    const size_t end = header.find(';');
    std::string_view pair = header.substr(0, end);
    header = end == std::string_view::npos ? std::string_view() : header.substr(end + 1);
    while (!pair.empty() && (pair.front() == ' ' || pair.front() == '\t')) pair.remove_prefix(1);
    while (!pair.empty() && (pair.back() == ' ' || pair.back() == '\t')) pair.remove_suffix(1);
    const size_t eq = pair.find('=');
    if (eq == std::string_view::npos) continue;
    std::string_view value = pair.substr(eq + 1);
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"')
      value = value.substr(1, value.size() - 2);
    fn(pair.substr(0, eq), value);
  }
}

bool IsSessionCookieName(std::string_view name) {
  if (name == kSessionCookie) return true;
  if (name.size() <= kSessionCookie.size() + 1 || name.size() > kSessionCookie.size() + 6 ||
      name.substr(0, kSessionCookie.size()) != kSessionCookie || name[kSessionCookie.size()] != '_')
    return false;
  const std::string_view port = name.substr(kSessionCookie.size() + 1);
  return port.find_first_not_of("0123456789") == std::string_view::npos;
}

}  // namespace

std::vector<std::string> CookieValues(std::string_view header, std::string_view name) {
  std::vector<std::string> out;
  ForEachCookie(header, [&](std::string_view n, std::string_view v) {
    if (n == name) out.emplace_back(v);
  });
  return out;
}

std::vector<std::string> SessionCookies(std::string_view header) {
  std::vector<std::string> out;
  ForEachCookie(header, [&](std::string_view n, std::string_view v) {
    if (IsSessionCookieName(n)) out.push_back(std::string(n) + "=" + std::string(v));
  });
  return out;
}

std::string SessionCookieName(std::string_view host) {
  const size_t colon = host.rfind(':');
  if (colon == std::string_view::npos || host.find(']', colon) != std::string_view::npos)
    return std::string(kSessionCookie);
  const std::string_view port = host.substr(colon + 1);
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string_view::npos)
    return std::string(kSessionCookie);
  return std::string(kSessionCookie) + "_" + std::string(port);
}

std::string CookieValue(std::string_view header, std::string_view name) {
  for (std::string& v : CookieValues(header, name)) {
    if (!v.empty()) return std::move(v);
  }
  return "";
}

void WarnRejectedToken(const std::string& remote, const char* why) {
  constexpr auto kRejectedTokenLogGap = std::chrono::seconds(10);
  static std::mutex mu;
  static std::chrono::steady_clock::time_point last{};
  static int unlogged = 0;
  std::lock_guard<std::mutex> l(mu);
  const auto now = std::chrono::steady_clock::now();
  if (last != std::chrono::steady_clock::time_point{} && now - last < kRejectedTokenLogGap) {
    ++unlogged;
    return;
  }
  LOG_WARN << "http: rejected a request from " << remote << ": " << why
           << (unlogged > 0 ? " (and " + std::to_string(unlogged) + " more since the last report)"
                            : "");
  last = now;
  unlogged = 0;
}

}  // namespace traintl::http
