#include "daemon/http/browser_session.h"

#include <chrono>
#include <mutex>

#include "common/crypto.h"
#include "common/logging.h"

namespace traintl::http {

std::string SessionValueForToken(const std::string& token) {
  if (token.empty()) return "";
  return Sha256Hex(std::string("traintl browser session v1\n") + token);
}

std::string CookieValue(std::string_view header, std::string_view name) {
  while (!header.empty()) {
    const size_t end = header.find(';');
    std::string_view pair = header.substr(0, end);
    header = end == std::string_view::npos ? std::string_view() : header.substr(end + 1);
    while (!pair.empty() && (pair.front() == ' ' || pair.front() == '\t')) pair.remove_prefix(1);
    while (!pair.empty() && (pair.back() == ' ' || pair.back() == '\t')) pair.remove_suffix(1);
    const size_t eq = pair.find('=');
    if (eq == std::string_view::npos || pair.substr(0, eq) != name) continue;
    std::string_view value = pair.substr(eq + 1);
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"')
      value = value.substr(1, value.size() - 2);
    return std::string(value);
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
