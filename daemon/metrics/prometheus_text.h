// Prometheus text exposition format 0.0.4 (what GET /metrics answers): metric families
// with their HELP and TYPE lines, samples with escaped label values, and a latency
// histogram with fixed buckets.
//
// Thread-safety: PrometheusText is a value built on one thread. LatencyHistogram is not
// thread-safe; its owner says which thread records into it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace traintl {

using PromLabels = std::vector<std::pair<std::string, std::string>>;

class PrometheusText {
 public:
  // Starts a family: "# HELP name help" and "# TYPE name type" (gauge, counter,
  // histogram). Names must match [a-zA-Z_:][a-zA-Z0-9_:]*.
  void Family(const std::string& name, const char* type, const std::string& help);
  void Sample(const std::string& name, const PromLabels& labels, double value);
  const std::string& text() const { return out_; }

  // A metric name made of `raw` (a user's metric, e.g. "val-accuracy"): characters outside
  // [a-zA-Z0-9_] become '_', and a leading digit gets a '_' before it.
  static std::string SanitizeName(const std::string& raw);

 private:
  std::string out_;
};

// Seconds-long latencies in fixed buckets (5 ms .. 60 s), as a Prometheus histogram.
class LatencyHistogram {
 public:
  static constexpr std::array<double, 12> kBounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                     0.5,   1,    2.5,   5,    10,  60};
  void Record(double seconds);
  // The family `name` (_bucket, _sum, _count).
  void Write(PrometheusText& out, const std::string& name, const std::string& help) const;
  uint64_t count() const { return count_; }

 private:
  std::array<uint64_t, kBounds.size()> buckets_{};  // not cumulative
  uint64_t count_ = 0;
  double sum_ = 0;
};

}  // namespace traintl
