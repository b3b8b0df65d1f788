// RankMetrics (daemon/head/rank_metrics.h): a bounded ring of reports per (job, rank), the
// least recently reporting jobs evicted past `jobs`, History oldest first and filtered by
// ranks, Forget.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/head/rank_metrics.h"

using namespace traintl;
using nlohmann::json;

namespace {

// The seqs of rank `rank`'s history in `h`, in order.
std::vector<int> Seqs(const json& h, int rank) {
  std::vector<int> out;
  for (const auto& e : h.at(std::to_string(rank))) out.push_back(e.at("seq").get<int>());
  return out;
}

RankMetrics Make(size_t per_rank, size_t jobs) {
  RankMetricsOptions o;
  o.per_rank = per_rank;
  o.jobs = jobs;
  return RankMetrics(o);
}

}  // namespace

TEST_CASE("History holds each report's attempt seq time and metrics oldest first") {
  RankMetrics m;
  m.Add("j", 1, 0, 0, 1000, {{"loss", 0.9}});
  m.Add("j", 1, 0, 1, 2000, {{"loss", 0.5}});
  m.Add("j", 2, 0, 0, 3000, {{"loss", 0.7}});  // a restart's seq starts again at 0
  const json h = m.History("j", {});
  const json expected = {
      {"0",
       {{{"attempt", 1}, {"seq", 0}, {"time", 1000}, {"metrics", {{"loss", 0.9}}}},
        {{"attempt", 1}, {"seq", 1}, {"time", 2000}, {"metrics", {{"loss", 0.5}}}},
        {{"attempt", 2}, {"seq", 0}, {"time", 3000}, {"metrics", {{"loss", 0.7}}}}}}};
  CHECK(h == expected);
}

TEST_CASE("each rank's ring keeps its latest per_rank reports") {
  RankMetrics m = Make(3, 4);
  for (int seq = 0; seq < 5; ++seq) m.Add("j", 1, 0, seq, 100 * seq, json::object());
  m.Add("j", 1, 1, 0, 0, json::object());
  m.Add("j", 1, 1, 1, 100, json::object());
  const json h = m.History("j", {});
  CHECK(Seqs(h, 0) == std::vector<int>{2, 3, 4});
  CHECK(Seqs(h, 1) == std::vector<int>{0, 1});
  CHECK(h["0"][0]["time"] == 200);
}

TEST_CASE("the least recently reporting job goes past jobs") {
  RankMetrics m = Make(10, 2);
  m.Add("a", 1, 0, 0, 0, json::object());
  m.Add("b", 1, 0, 0, 0, json::object());
  m.Add("a", 1, 0, 1, 0, json::object());  // a reports again: b is now the oldest
  m.Add("c", 1, 0, 0, 0, json::object());
  CHECK(m.History("b", {}) == json::object());
  CHECK(Seqs(m.History("a", {}), 0) == std::vector<int>{0, 1});
  CHECK(Seqs(m.History("c", {}), 0) == std::vector<int>{0});

  m.Add("d", 1, 0, 0, 0, json::object());  // now a is the oldest
  CHECK(m.History("a", {}) == json::object());
  CHECK_FALSE(m.History("c", {}).empty());
  CHECK_FALSE(m.History("d", {}).empty());
}

TEST_CASE("History keeps only the ranks asked for") {
  RankMetrics m;
  for (int rank = 0; rank < 4; ++rank) m.Add("j", 1, rank, 0, rank, {{"rank", rank}});
  const json h = m.History("j", {0, 2, 7});
  CHECK(h.size() == 2);
  CHECK(h.contains("0"));
  CHECK(h.contains("2"));
  CHECK(h["2"][0]["metrics"] == json{{"rank", 2}});
  CHECK(m.History("j", {}).size() == 4);
  CHECK(m.History("j", {9}) == json::object());
}

TEST_CASE("History of an unknown job is an empty object") {
  RankMetrics m;
  m.Add("j", 1, 0, 0, 0, json::object());
  const json h = m.History("other", {});
  CHECK(h.is_object());
  CHECK(h.empty());
}

TEST_CASE("Forget drops a job and frees its place") {
  RankMetrics m = Make(10, 2);
  m.Add("a", 1, 0, 0, 0, json::object());
  m.Add("b", 1, 0, 0, 0, json::object());
  m.Forget("a");
  m.Forget("never");  // no-op
  CHECK(m.History("a", {}) == json::object());
  m.Add("c", 1, 0, 0, 0, json::object());  // room for c: b stays
  CHECK_FALSE(m.History("b", {}).empty());
  CHECK_FALSE(m.History("c", {}).empty());
  m.Add("a", 1, 0, 5, 0, json::object());  // b is the least recent now
  CHECK(m.History("b", {}) == json::object());
  CHECK(Seqs(m.History("a", {}), 0) == std::vector<int>{5});
}

TEST_CASE("a zero bound keeps nothing") {
  RankMetrics none_per_rank = Make(0, 4);
  none_per_rank.Add("j", 1, 0, 0, 0, json::object());
  CHECK(none_per_rank.History("j", {}) == json::object());
  RankMetrics no_jobs = Make(4, 0);
  no_jobs.Add("j", 1, 0, 0, 0, json::object());
  CHECK(no_jobs.History("j", {}) == json::object());
}

TEST_CASE("a report with a string that is not UTF-8 is kept, the bytes replaced, no throw") {
  RankMetrics m;
  json bad = {{"loss", 0.5}, {"tag", std::string("ok\xff")}};
  REQUIRE_NOTHROW(m.Add("j", 1, 0, 0, 1000, bad));
  json h = m.History("j", {});
  REQUIRE(h["0"].size() == 1);
  CHECK(h["0"][0]["metrics"]["loss"] == 0.5);
  CHECK(h["0"][0]["metrics"]["tag"] == "ok\xef\xbf\xbd");  // U+FFFD
}
