#include "daemon/head/rank_metrics.h"

#include <algorithm>

namespace traintl {

using nlohmann::json;

void RankMetrics::Add(const std::string& job_id, int attempt, int rank, int seq, int64_t time_ms,
                      const json& metrics) {
  if (options_.per_rank == 0 || options_.jobs == 0) return;
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    while (jobs_.size() >= options_.jobs && !recency_.empty()) {
      jobs_.erase(recency_.front());
      recency_.pop_front();
    }
    it = jobs_.emplace(job_id, Rings{}).first;
    recency_.push_back(job_id);
  } else if (recency_.back() != job_id) {
    // A few jobs report at once; moving one to the back is a short walk.
    recency_.erase(std::find(recency_.begin(), recency_.end(), job_id));
    recency_.push_back(job_id);
  }
  std::deque<Entry>& ring = it->second[rank];
  // `replace`: a report's string that is not UTF-8 must not throw on the io thread.
  ring.push_back(
      Entry{attempt, seq, time_ms, metrics.dump(-1, ' ', false, json::error_handler_t::replace)});
  while (ring.size() > options_.per_rank) ring.pop_front();
}

json RankMetrics::History(const std::string& job_id, const std::vector<int>& ranks) const {
  json out = json::object();
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return out;
  for (const auto& [rank, ring] : it->second) {
    if (!ranks.empty() && std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) continue;
    json list = json::array();
    for (const auto& e : ring)
      list.push_back({{"attempt", e.attempt},
                      {"seq", e.seq},
                      {"time", e.time_ms},
                      {"metrics", json::parse(e.metrics)}});
    out[std::to_string(rank)] = std::move(list);
  }
  return out;
}

void RankMetrics::Forget(const std::string& job_id) {
  if (jobs_.erase(job_id) == 0) return;
  recency_.erase(std::find(recency_.begin(), recency_.end(), job_id));
}

}  // namespace traintl
