// PrometheusText and LatencyHistogram (daemon/metrics/prometheus_text.h): the text format
// 0.0.4's HELP/TYPE lines, label and HELP escaping, numbers as Prometheus reads them,
// metric names made of users' names, and a histogram's cumulative buckets, _sum and
// _count.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "daemon/metrics/prometheus_text.h"

using namespace traintl;

namespace {

// The text of one unlabelled sample of `v`: "x <number>\n".
std::string NumberOf(double v) {
  PrometheusText t;
  t.Sample("x", {}, v);
  return t.text();
}

}  // namespace

TEST_CASE("Family writes the HELP and TYPE lines") {
  PrometheusText t;
  t.Family("traintl_nodes", "gauge", "Nodes by state.");
  CHECK(t.text() == "# HELP traintl_nodes Nodes by state.\n# TYPE traintl_nodes gauge\n");
}

TEST_CASE("HELP escapes backslash and newline but not quotes") {
  PrometheusText t;
  t.Family("m", "counter", "a\\b\nc \"q\"");
  CHECK(t.text() == "# HELP m a\\\\b\\nc \"q\"\n# TYPE m counter\n");
}

TEST_CASE("a sample without labels is the name and the value") {
  PrometheusText t;
  t.Sample("traintl_up", {}, 1);
  CHECK(t.text() == "traintl_up 1\n");
}

TEST_CASE("label values escape backslash and quote and newline") {
  PrometheusText t;
  t.Sample("m", {{"job_name", "a\\b\"c\nd"}, {"rank", "0"}}, 2.5);
  CHECK(t.text() == "m{job_name=\"a\\\\b\\\"c\\nd\",rank=\"0\"} 2.5\n");
}

TEST_CASE("samples append in order") {
  PrometheusText t;
  t.Family("m", "gauge", "h");
  t.Sample("m", {{"state", "alive"}}, 3);
  t.Sample("m", {{"state", "dead"}}, 0);
  CHECK(t.text() == "# HELP m h\n# TYPE m gauge\nm{state=\"alive\"} 3\nm{state=\"dead\"} 0\n");
}

TEST_CASE("numbers are the shortest text that reads back") {
  CHECK(NumberOf(0.005) == "x 0.005\n");
  CHECK(NumberOf(0.1) == "x 0.1\n");
  CHECK(NumberOf(0) == "x 0\n");
  CHECK(NumberOf(42) == "x 42\n");
  CHECK(NumberOf(-1.5) == "x -1.5\n");
  CHECK(NumberOf(1e21) == "x 1e+21\n");
  CHECK(NumberOf(1.0 / 3) == "x 0.33333333333333331\n");  // 17 digits needed
  CHECK(NumberOf(9007199254740993.0) == "x 9007199254740992\n");
  CHECK(NumberOf(1234567890123.0) == "x 1234567890123\n");
}

TEST_CASE("NaN and infinities are written as Prometheus spells them") {
  CHECK(NumberOf(std::numeric_limits<double>::quiet_NaN()) == "x NaN\n");
  CHECK(NumberOf(std::numeric_limits<double>::infinity()) == "x +Inf\n");
  CHECK(NumberOf(-std::numeric_limits<double>::infinity()) == "x -Inf\n");
}

TEST_CASE("SanitizeName makes a metric name of a user's name") {
  CHECK(PrometheusText::SanitizeName("val-accuracy") == "val_accuracy");
  CHECK(PrometheusText::SanitizeName("loss") == "loss");
  CHECK(PrometheusText::SanitizeName("ok_Name9") == "ok_Name9");
  CHECK(PrometheusText::SanitizeName("a.b/c d") == "a_b_c_d");
  CHECK(PrometheusText::SanitizeName("1st") == "_1st");
  CHECK(PrometheusText::SanitizeName("") == "_");
  CHECK(PrometheusText::SanitizeName("\xc3\xa9t\xc3\xa9") == "__t__");  // "été", per byte
  CHECK(PrometheusText::SanitizeName("a:b") == "a_b");
}

TEST_CASE("a histogram's buckets are cumulative and +Inf equals the count") {
  LatencyHistogram h;
  // Exact binary fractions, so that _sum is exact.
  h.Record(0.0048828125);  // <= 0.005
  h.Record(0.0625);        // <= 0.1
  h.Record(0.5);           // <= 0.5 (a bound is inclusive)
  h.Record(3);             // <= 5
  h.Record(100);           // over every bound: only +Inf
  CHECK(h.count() == 5);
  PrometheusText t;
  h.Write(t, "traintl_commit_seconds", "Commit latency.");
  CHECK(t.text() ==
        "# HELP traintl_commit_seconds Commit latency.\n"
        "# TYPE traintl_commit_seconds histogram\n"
        "traintl_commit_seconds_bucket{le=\"0.005\"} 1\n"
        "traintl_commit_seconds_bucket{le=\"0.01\"} 1\n"
        "traintl_commit_seconds_bucket{le=\"0.025\"} 1\n"
        "traintl_commit_seconds_bucket{le=\"0.05\"} 1\n"
        "traintl_commit_seconds_bucket{le=\"0.1\"} 2\n"
        "traintl_commit_seconds_bucket{le=\"0.25\"} 2\n"
        "traintl_commit_seconds_bucket{le=\"0.5\"} 3\n"
        "traintl_commit_seconds_bucket{le=\"1\"} 3\n"
        "traintl_commit_seconds_bucket{le=\"2.5\"} 3\n"
        "traintl_commit_seconds_bucket{le=\"5\"} 4\n"
        "traintl_commit_seconds_bucket{le=\"10\"} 4\n"
        "traintl_commit_seconds_bucket{le=\"60\"} 4\n"
        "traintl_commit_seconds_bucket{le=\"+Inf\"} 5\n"
        "traintl_commit_seconds_sum 103.5673828125\n"
        "traintl_commit_seconds_count 5\n");
}

TEST_CASE("a value exactly on a bound counts in that bucket") {
  LatencyHistogram h;
  h.Record(0.005);
  h.Record(60);
  PrometheusText t;
  h.Write(t, "m", "h");
  const std::string& s = t.text();
  CHECK(s.find("m_bucket{le=\"0.005\"} 1\n") != std::string::npos);
  CHECK(s.find("m_bucket{le=\"10\"} 1\n") != std::string::npos);
  CHECK(s.find("m_bucket{le=\"60\"} 2\n") != std::string::npos);
  CHECK(s.find("m_bucket{le=\"+Inf\"} 2\n") != std::string::npos);
  CHECK(s.find("m_count 2\n") != std::string::npos);
}

TEST_CASE("an empty histogram writes zero buckets sum and count") {
  LatencyHistogram h;
  PrometheusText t;
  h.Write(t, "m", "h");
  const std::string& s = t.text();
  CHECK(s.find("m_bucket{le=\"0.005\"} 0\n") != std::string::npos);
  CHECK(s.find("m_bucket{le=\"+Inf\"} 0\n") != std::string::npos);
  CHECK(s.find("m_sum 0\n") != std::string::npos);
  CHECK(s.find("m_count 0\n") != std::string::npos);
  // HELP, TYPE, 12 bounds, +Inf, _sum, _count.
  CHECK(std::count(s.begin(), s.end(), '\n') == 17);
}
