#include "common/ignore_rules.h"

#include <cstddef>

namespace traintl {
namespace {

std::vector<std::string> SplitComponents(const std::string& path) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    if (slash > start) out.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  return out;
}

// Parses the class starting at p[open] == '['. Returns the index just past its ']' and
// whether `c` is in it, or npos when the class is not closed (then '[' is a literal).
size_t MatchClass(const std::string& p, size_t open, char c, bool* matched) {
  size_t i = open + 1;
  bool negate = false;
  if (i < p.size() && (p[i] == '!' || p[i] == '^')) {
    negate = true;
    ++i;
  }
  bool in = false;
  bool first = true;
  while (i < p.size() && (first || p[i] != ']')) {
    first = false;
    char lo = p[i];
    if (lo == '\\' && i + 1 < p.size()) lo = p[++i];
    ++i;
    char hi = lo;
    if (i + 1 < p.size() && p[i] == '-' && p[i + 1] != ']') {
      hi = p[i + 1];
      if (hi == '\\' && i + 2 < p.size()) {
        hi = p[i + 2];
        ++i;
      }
      i += 2;
    }
    const auto uc = static_cast<unsigned char>(c);
    if (static_cast<unsigned char>(lo) <= uc && uc <= static_cast<unsigned char>(hi)) in = true;
  }
  if (i >= p.size()) return std::string::npos;
  *matched = (in != negate);
  return i + 1;
}

// Components of `pattern` against components of `path`; "**" handled as the header says.
bool MatchComponents(const std::vector<std::string>& pattern, size_t pi,
                     const std::vector<std::string>& path, size_t si) {
  while (pi < pattern.size()) {
    if (pattern[pi] == "**") {
      if (pi + 1 == pattern.size()) return path.size() > si;  // "x/**": something inside x
      for (size_t k = si; k <= path.size(); ++k) {
        if (MatchComponents(pattern, pi + 1, path, k)) return true;
      }
      return false;
    }
    if (si == path.size() || !GlobMatchComponent(pattern[pi], path[si])) return false;
    ++pi;
    ++si;
  }
  return si == path.size();
}

}  // namespace

bool GlobMatchComponent(const std::string& p, const std::string& s) {
  size_t pi = 0;
  size_t si = 0;
  size_t star_p = std::string::npos;  // where to resume the pattern after the last '*'
  size_t star_s = 0;                  // how much of s that '*' swallows, minus one
  while (si < s.size()) {
    if (pi < p.size()) {
      const char c = p[pi];
      if (c == '*') {
        while (pi < p.size() && p[pi] == '*') ++pi;
        star_p = pi;
        star_s = si;
        continue;
      }
      if (c == '?' && s[si] != '/') {
        ++pi;
        ++si;
        continue;
      }
      if (c == '[') {
        bool matched = false;
        size_t end = MatchClass(p, pi, s[si], &matched);
        if (end != std::string::npos) {
          if (matched && s[si] != '/') {
            pi = end;
            ++si;
            continue;
          }
        } else if (s[si] == '[') {
          ++pi;
          ++si;
          continue;
        }
      } else if (c != '?') {
        size_t len = 1;
        char literal = c;
        if (c == '\\' && pi + 1 < p.size()) {
          literal = p[pi + 1];
          len = 2;
        }
        if (literal == s[si]) {
          pi += len;
          ++si;
          continue;
        }
      }
    }
    // Mismatch: let the last '*' swallow one more character (never a '/').
    if (star_p == std::string::npos || s[star_s] == '/') return false;
    pi = star_p;
    si = ++star_s;
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

void IgnoreRules::Add(const std::string& raw) {
  std::string line = raw;
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  if (line.empty() || line[0] == '#') return;
  Rule rule;
  if (line[0] == '!') {
    rule.negate = true;
    line.erase(0, 1);
  }
  // Trailing spaces are dropped unless the last one is escaped by an odd run of '\'.
  while (!line.empty() && line.back() == ' ') {
    size_t backslashes = 0;
    for (size_t i = line.size() - 1; i > 0 && line[i - 1] == '\\'; --i) ++backslashes;
    if (backslashes % 2 == 1) break;
    line.pop_back();
  }
  while (!line.empty() && line.back() == '/') {
    rule.dir_only = true;
    line.pop_back();
  }
  const bool anchored = line.find('/') != std::string::npos;
  std::vector<std::string> components = SplitComponents(line);
  if (components.empty()) return;  // "/", "!" or only spaces: matches nothing
  if (!anchored) rule.components.push_back("**");
  for (auto& c : components) {
    // "**/**" is "**"; collapsing keeps MatchComponents' backtracking shallow.
    if (c == "**" && !rule.components.empty() && rule.components.back() == "**") continue;
    rule.components.push_back(std::move(c));
  }
  rules_.push_back(std::move(rule));
}

void IgnoreRules::AddLines(const std::string& text) {
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    Add(text.substr(start, nl - start));
    start = nl + 1;
  }
}

bool IgnoreRules::MatchEntry(const std::string& rel_path, bool is_dir) const {
  const std::vector<std::string> path = SplitComponents(rel_path);
  if (path.empty()) return false;
  for (auto it = rules_.rbegin(); it != rules_.rend(); ++it) {
    if (it->dir_only && !is_dir) continue;
    if (MatchComponents(it->components, 0, path, 0)) return !it->negate;
  }
  return false;
}

bool IgnoreRules::IsExcluded(const std::string& rel_path, bool is_dir) const {
  const std::vector<std::string> path = SplitComponents(rel_path);
  std::string prefix;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    prefix += (i == 0 ? "" : "/") + path[i];
    if (MatchEntry(prefix, true)) return true;
  }
  return MatchEntry(rel_path, is_dir);
}

}  // namespace traintl
