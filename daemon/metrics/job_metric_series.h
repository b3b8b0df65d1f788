// The traintl_job_metric series of GET /metrics: each active job's latest numeric metrics
// (rank 0's last report, JobRecord::metrics), bounded so that what jobs report cannot make
// a scrape unbounded: a report of 500,000 keys (or of keys of megabytes) would otherwise
// become as many series, and jobs of zero CPUs are not bounded in number by the nodes'
// resources. result.json and the API keep every metric.
//
// Thread-safety: a pure function.
#pragma once

#include <cstddef>
#include <vector>

#include "daemon/metrics/prometheus_text.h"
#include "daemon/state/records.h"

namespace traintl {

struct JobMetricBounds {
  size_t per_job = 100;     // series of one job, its metrics in name order. Default 100.
  size_t total = 10000;     // series of all jobs together. Default 10000.
  size_t name_bytes = 128;  // a longer metric name is left out. Default 128.
};

// Writes the samples of family `family` (already started) for `active`, in order; metrics
// that are not numbers (or NaN, or booleans) are skipped. Returns how many series the
// total bound left out (those of `per_job` or name length are not counted).
size_t WriteJobMetricSeries(PrometheusText& out, const std::string& family,
                            const std::vector<JobRecord>& active,
                            const JobMetricBounds& bounds = {});

}  // namespace traintl
