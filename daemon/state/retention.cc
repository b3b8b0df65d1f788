#include "daemon/state/retention.h"

#include "common/json_depth.h"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

namespace traintl {

std::vector<int64_t> CheckpointsToDelete(const std::vector<CheckpointRecord>& checkpoints,
                                         const RetentionPolicy& policy) {
  if (policy.num_to_keep <= 0 || checkpoints.empty()) return {};
  struct Ranked {
    size_t index;
    bool has_score;
    double score;
  };
  std::vector<Ranked> ranked;
  for (size_t i = 0; i < checkpoints.size(); ++i) {
    Ranked r{i, false, 0};
    if (!policy.score_attribute.empty()) {
      auto m = ParseJsonBounded(checkpoints[i].metrics);
      if (m.is_object() && m.contains(policy.score_attribute) &&
          m[policy.score_attribute].is_number()) {
        r.has_score = true;
        r.score = m[policy.score_attribute].get<double>();
      }
    }
    ranked.push_back(r);
  }
  std::stable_sort(ranked.begin(), ranked.end(), [&](const Ranked& a, const Ranked& b) {
    if (!policy.score_attribute.empty()) {
      if (a.has_score != b.has_score) return a.has_score;
      if (a.has_score && a.score != b.score)
        return policy.score_max ? a.score > b.score : a.score < b.score;
    }
    return a.index > b.index;  // newer first
  });
  std::set<size_t> keep{checkpoints.size() - 1};
  for (size_t i = 0; i < ranked.size() && i < static_cast<size_t>(policy.num_to_keep); ++i)
    keep.insert(ranked[i].index);
  std::vector<int64_t> out;
  for (size_t i = 0; i < checkpoints.size(); ++i)
    if (!keep.count(i)) out.push_back(checkpoints[i].id);
  return out;
}

}  // namespace traintl
