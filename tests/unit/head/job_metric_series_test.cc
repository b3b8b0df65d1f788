// The bounds of GET /metrics' traintl_job_metric series (daemon/metrics/job_metric_series.h).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/metrics/job_metric_series.h"

using nlohmann::json;
using traintl::JobMetricBounds;
using traintl::JobRecord;
using traintl::PrometheusText;
using traintl::WriteJobMetricSeries;

namespace {

JobRecord Job(const std::string& id, const json& metrics) {
  JobRecord j;
  j.id = id;
  j.name = "n-" + id;
  j.metrics = metrics.dump();
  return j;
}

size_t Samples(const PrometheusText& out) {
  size_t n = 0;
  for (size_t at = 0; (at = out.text().find("m{job_id=", at)) != std::string::npos; ++at) ++n;
  return n;
}

}  // namespace

TEST_CASE("job metrics: numbers only, names bounded, a job's series bounded") {
  json m = {{"loss", 0.5},
            {"epoch", 3},
            {"tag", "x"},
            {"ok", true},
            {"nan", NAN},
            {std::string(129, 'k'), 1.0},
            {std::string(128, 'j'), 2.0}};
  PrometheusText out;
  CHECK(WriteJobMetricSeries(out, "m",
                             {Job("a", m), Job("b", json::array({1})), Job("c", json())}) == 0);
  CHECK(Samples(out) == 3);  // epoch, loss and the 128-byte name
  CHECK(out.text().find("m{job_id=\"a\",job_name=\"n-a\",metric=\"loss\"} 0.5\n") !=
        std::string::npos);
  CHECK(out.text().find(std::string(129, 'k')) == std::string::npos);

  json many = json::object();
  for (int i = 0; i < 150; ++i) many["m" + std::to_string(1000 + i)] = i;
  PrometheusText capped;
  CHECK(WriteJobMetricSeries(capped, "m", {Job("a", many)}) == 0);  // not counted as left out
  CHECK(Samples(capped) == 100);
  CHECK(capped.text().find("metric=\"m1099\"") != std::string::npos);
  CHECK(capped.text().find("metric=\"m1100\"") == std::string::npos);
}

TEST_CASE("job metrics: the total bound leaves out the rest of the jobs and counts them") {
  json hundred = json::object();
  for (int i = 0; i < 100; ++i) hundred["x" + std::to_string(100 + i)] = i;
  std::vector<JobRecord> jobs;
  for (int j = 0; j < 150; ++j) jobs.push_back(Job("j" + std::to_string(j), hundred));
  PrometheusText out;
  CHECK(WriteJobMetricSeries(out, "m", jobs) == 5000);  // 15,000 series, 10,000 written
  CHECK(Samples(out) == 10000);
  CHECK(out.text().find("job_id=\"j99\"") != std::string::npos);  // the first jobs, in order
  CHECK(out.text().find("job_id=\"j100\"") == std::string::npos);
  JobMetricBounds small;
  small.total = 250;
  PrometheusText bounded;
  CHECK(WriteJobMetricSeries(bounded, "m", jobs, small) == 15000 - 250);
  CHECK(Samples(bounded) == 250);
  CHECK(bounded.text().find("job_id=\"j2\",job_name=\"n-j2\",metric=\"x149\"") !=
        std::string::npos);
  CHECK(bounded.text().find("job_id=\"j2\",job_name=\"n-j2\",metric=\"x150\"") ==
        std::string::npos);  // j0, j1 whole, then half of j2
  CHECK(bounded.text().find("job_id=\"j3\"") == std::string::npos);
}
