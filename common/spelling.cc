#include "common/spelling.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <utility>

namespace traintl {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string Closest(const std::string& key, const std::vector<std::string>& candidates) {
  if (key.size() > 64) return "";
  std::string lk = Lower(key);
  std::string best;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  for (const auto& c : candidates) {
    std::size_t d = EditDistance(lk, Lower(c));
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  std::size_t limit = key.size() <= 4 ? 1 : key.size() <= 8 ? 2 : 3;
  return best_d <= limit ? best : "";
}

}  // namespace traintl
