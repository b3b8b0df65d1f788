#include "daemon/metrics/job_metric_series.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "common/json_depth.h"

namespace traintl {

size_t WriteJobMetricSeries(PrometheusText& out, const std::string& family,
                            const std::vector<JobRecord>& active, const JobMetricBounds& bounds) {
  size_t total = 0, left_out = 0;
  for (const auto& j : active) {
    nlohmann::json m = ParseJsonBounded(j.metrics);
    if (!m.is_object()) continue;
    size_t series = 0;
    for (auto it = m.begin(); it != m.end() && series < bounds.per_job; ++it) {
      if (!it->is_number() || it->is_boolean() || it.key().size() > bounds.name_bytes) continue;
      const double v = it->get<double>();
      if (std::isnan(v)) continue;
      ++series;
      if (total == bounds.total) {
        ++left_out;
        continue;
      }
      ++total;
      out.Sample(family, {{"job_id", j.id}, {"job_name", j.name}, {"metric", it.key()}}, v);
    }
  }
  return left_out;
}

}  // namespace traintl
