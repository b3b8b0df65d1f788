// RankMetrics: every rank's reported metrics, kept by the head in memory, bounded: a ring
// of the latest `per_rank` reports per (job, rank), for the latest `jobs` jobs that
// reported. Rank 0's reports are also replicated (the store's metrics table) and survive a
// failover; the other ranks' are only here, so a new head starts with empty rings. The
// reports reach the head anyway (the attempt tracker needs them), so keeping them costs
// no traffic, only this bounded memory.
//
// Thread-safety: not thread-safe; the JobManager's io_context thread owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace traintl {

struct RankMetricsOptions {
  size_t per_rank = 1000;  // reports kept per rank of a job. Default 1000.
  size_t jobs = 256;  // jobs whose rings are kept (the least recently reporting go). Default 256.
};

class RankMetrics {
 public:
  explicit RankMetrics(RankMetricsOptions options = {}) : options_(options) {}

  void Add(const std::string& job_id, int attempt, int rank, int seq, int64_t time_ms,
           const nlohmann::json& metrics);
  // {"<rank>": [{"attempt","seq","time","metrics"}, ...]} oldest first, for `ranks` (empty:
  // every rank that reported).
  nlohmann::json History(const std::string& job_id, const std::vector<int>& ranks) const;
  void Forget(const std::string& job_id);

 private:
  struct Entry {
    int attempt;
    int seq;
    int64_t time_ms;
    // Serialized: a parsed object costs several times its text (a map node per key),
    // and the rings are written per report but read only when someone looks.
    std::string metrics;
  };
  using Rings = std::map<int, std::deque<Entry>>;  // rank -> its latest reports

  const RankMetricsOptions options_;
  std::map<std::string, Rings> jobs_;
  std::list<std::string> recency_;  // job ids, the most recently reporting last
};

}  // namespace traintl
