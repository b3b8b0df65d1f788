#include "proto/rank_list.h"

#include <algorithm>

namespace traintl {

Result<std::vector<int>> ParseRankList(const std::string& text) {
  std::vector<int> ranks;
  for (size_t pos = 0; pos <= text.size();) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    if (item.empty() || item.size() > 6 ||
        item.find_first_not_of("0123456789") != std::string::npos) {
      return Status::InvalidArgument("a rank (0 or more) or a comma-separated list of them, got '" +
                                     text + "'");
    }
    ranks.push_back(std::stoi(item));
    pos = comma + 1;
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

}  // namespace traintl
