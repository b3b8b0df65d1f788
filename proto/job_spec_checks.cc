// Validation primitives of the job spec parser (job_spec_internal.h).
#include "proto/job_spec_internal.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace traintl {
namespace spec_internal {
namespace {

bool IsNameChar(unsigned char c) { return std::isalnum(c) || c == '.' || c == '_' || c == '-'; }

bool HasControlChars(const std::string& s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7F;
  });
}

}  // namespace

bool IsValidName(const std::string& s, std::size_t max_len) {
  if (s.empty() || s.size() > max_len) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return IsNameChar(c); });
}

bool IsEnvName(const std::string& s) {
  if (s.empty() || s.size() > kMaxEnvKeyLen) return false;
  auto c0 = static_cast<unsigned char>(s[0]);
  if (!std::isalpha(c0) && c0 != '_') return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return std::isalnum(u) || u == '_';
  });
}

bool IsCIdentifier(const std::string& s) { return IsEnvName(s); }

bool IsAbsolutePath(const std::string& s) {
  return !s.empty() && s[0] == '/' && s.size() <= kMaxPathLen && s.find('\0') == std::string::npos;
}

bool IsLowerHex(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
}

// "" when `uri` is acceptable, else why not.
std::string CheckUri(const std::string& uri) {
  const std::string expected = "must be a file://, http:// or https:// URI";
  if (uri.size() > kMaxPathLen) return "must be at most 4096 characters";
  if (HasControlChars(uri) || uri.find(' ') != std::string::npos) {
    return "must not contain spaces or control characters";
  }
  auto starts = [&](const char* p) { return uri.rfind(p, 0) == 0; };
  if (starts("file://")) {
    std::string rest = uri.substr(7);
    if (rest.rfind("localhost/", 0) == 0) rest = rest.substr(9);
    if (rest.empty() || rest[0] != '/') {
      return "a file:// URI must name an absolute path (file:///data/x.csv)";
    }
    if (rest.size() < 2) return "a file:// URI must name a file or directory, not /";
    return "";
  }
  std::string rest;
  if (starts("http://")) {
    rest = uri.substr(7);
  } else if (starts("https://")) {
    rest = uri.substr(8);
  } else {
    return expected;
  }
  std::size_t host_end = rest.find_first_of("/?#");
  if (rest.substr(0, host_end).empty()) return "an http(s) URI must name a host";
  return "";
}

bool IsResourceNameChar(unsigned char c) {
  return std::isalnum(c) || c == '_' || c == '.' || c == '-';
}

std::string GpuAmountProblem(double x) {
  if (x < 0) return "must not be negative";
  if (x > 1 && x != std::floor(x)) {
    return "must be a fraction in (0, 1] or a whole number of GPUs";
  }
  return "";
}

// ---------------------------------------------------------------------------------------
// Section parsers.

const json* Find(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

// Iterative, so that it is safe on documents of any depth. Returns the depth of `v`
// (a scalar is 0, {} is 1) capped at limit + 1.
int JsonDepth(const json& v, int limit) {
  std::vector<std::pair<const json*, int>> stack{{&v, 0}};
  int max_depth = 0;
  while (!stack.empty()) {
    auto [node, depth] = stack.back();
    stack.pop_back();
    if (!node->is_structured()) continue;
    int d = depth + 1;
    max_depth = std::max(max_depth, d);
    if (max_depth > limit) return max_depth;
    for (const auto& child : *node) stack.emplace_back(&child, d);
  }
  return max_depth;
}

}  // namespace spec_internal
}  // namespace traintl
