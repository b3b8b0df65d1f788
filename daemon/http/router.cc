#include "daemon/http/router.h"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "common/logging.h"
#include "daemon/http/uri.h"

namespace traintl::http {
namespace {

[[noreturn]] void BadPattern(const std::string& method, const std::string& pattern,
                             const char* why) {
  LOG_ERROR << "http: invalid route " << method << " " << pattern << ": " << why;
  std::abort();
}

// True when `a` should win over `b` for the same path: the first segment where they
// differ in kind is a literal in `a`.
bool MoreSpecific(const Route& a, const Route& b) {
  for (size_t i = 0; i < a.segments.size() && i < b.segments.size(); ++i) {
    if (a.segments[i].is_param != b.segments[i].is_param) return !a.segments[i].is_param;
  }
  return false;
}

bool SameShape(const Route& a, const Route& b) {
  if (a.segments.size() != b.segments.size()) return false;
  for (size_t i = 0; i < a.segments.size(); ++i) {
    if (a.segments[i].is_param != b.segments[i].is_param) return false;
    if (!a.segments[i].is_param && a.segments[i].text != b.segments[i].text) return false;
  }
  return true;
}

}  // namespace

void Router::Add(std::string method, std::string pattern, Handler handler, RouteOptions options) {
  if (method.empty()) BadPattern(method, pattern, "empty method");
  if (pattern.empty() || pattern[0] != '/') BadPattern(method, pattern, "must start with '/'");
  if (!handler) BadPattern(method, pattern, "null handler");
  auto route = std::make_unique<Route>();
  std::set<std::string> names;
  for (std::string_view seg : SplitPath(pattern)) {
    Route::Segment s;
    if (seg.size() >= 2 && seg.front() == '{' && seg.back() == '}') {
      s.is_param = true;
      s.text = std::string(seg.substr(1, seg.size() - 2));
      if (s.text.empty()) BadPattern(method, pattern, "empty capture name");
      if (s.text.find_first_of("{}/") != std::string::npos)
        BadPattern(method, pattern, "bad capture name");
      if (!names.insert(s.text).second) BadPattern(method, pattern, "duplicate capture name");
    } else {
      if (seg.find_first_of("{}") != std::string_view::npos)
        BadPattern(method, pattern, "'{' or '}' inside a literal segment");
      s.text = std::string(seg);
    }
    route->segments.push_back(std::move(s));
  }
  route->method = std::move(method);
  route->pattern = std::move(pattern);
  route->handler = std::move(handler);
  route->options = options;
  for (const auto& r : routes_) {
    if (r->method == route->method && SameShape(*r, *route))
      BadPattern(route->method, route->pattern, "duplicate route");
  }
  routes_.push_back(std::move(route));
}

RouteMatch Router::Match(const std::string& method, std::string_view raw_path) const {
  RouteMatch m;
  std::vector<std::string> decoded;
  for (std::string_view seg : SplitPath(raw_path)) {
    auto d = PercentDecode(seg);
    if (!d) {
      m.kind = RouteMatch::Kind::kBadRequest;
      m.error = "malformed percent-encoding in path";
      return m;
    }
    decoded.push_back(std::move(*d));
  }

  const Route* best = nullptr;
  std::vector<std::string> allowed;
  for (const auto& r : routes_) {
    if (r->segments.size() != decoded.size()) continue;
    bool ok = true;
    for (size_t i = 0; i < decoded.size() && ok; ++i) {
      if (!r->segments[i].is_param && r->segments[i].text != decoded[i]) ok = false;
    }
    if (!ok) continue;
    if (r->method == method) {
      if (best == nullptr || MoreSpecific(*r, *best)) best = r.get();
    } else if (std::find(allowed.begin(), allowed.end(), r->method) == allowed.end()) {
      allowed.push_back(r->method);
    }
  }

  if (best == nullptr) {
    if (allowed.empty()) {
      m.kind = RouteMatch::Kind::kNotFound;
      return m;
    }
    std::sort(allowed.begin(), allowed.end());
    m.kind = RouteMatch::Kind::kMethodNotAllowed;
    for (const auto& a : allowed) m.allow += (m.allow.empty() ? "" : ", ") + a;
    return m;
  }

  for (size_t i = 0; i < decoded.size(); ++i) {
    const Route::Segment& s = best->segments[i];
    if (!s.is_param) continue;
    const std::string& v = decoded[i];
    if (v.empty()) {
      m.kind = RouteMatch::Kind::kBadRequest;
      m.error = "empty path parameter '" + s.text + "'";
      return m;
    }
    if (v == "." || v == ".." || v.find('/') != std::string::npos) {
      m.kind = RouteMatch::Kind::kBadRequest;
      m.error = "invalid path parameter '" + s.text + "'";
      return m;
    }
    m.params[s.text] = v;
  }
  m.kind = RouteMatch::Kind::kFound;
  m.route = best;
  return m;
}

}  // namespace traintl::http
