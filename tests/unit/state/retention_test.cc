#include <catch2/catch.hpp>

#include "daemon/state/retention.h"

using namespace traintl;

static std::vector<CheckpointRecord> Make(const std::vector<double>& losses) {
  std::vector<CheckpointRecord> out;
  for (size_t i = 0; i < losses.size(); ++i) {
    CheckpointRecord c;
    c.id = static_cast<int64_t>(i + 1);
    c.metrics = "{\"loss\": " + std::to_string(losses[i]) + "}";
    out.push_back(c);
  }
  return out;
}

TEST_CASE("num_to_keep 0 keeps everything") {
  CHECK(CheckpointsToDelete(Make({1, 2, 3}), {}).empty());
}

TEST_CASE("recency keeps the newest N") {
  RetentionPolicy p;
  p.num_to_keep = 2;
  CHECK(CheckpointsToDelete(Make({5, 4, 3, 2}), p) == std::vector<int64_t>{1, 2});
}

TEST_CASE("score min keeps the best N plus the latest") {
  RetentionPolicy p;
  p.num_to_keep = 2;
  p.score_attribute = "loss";
  // Best two are ids 2 (0.1) and 3 (0.2); id 5 is latest and kept regardless.
  CHECK(CheckpointsToDelete(Make({0.9, 0.1, 0.2, 0.5, 0.7}), p) == std::vector<int64_t>{1, 4});
}

TEST_CASE("score max and missing attribute") {
  RetentionPolicy p;
  p.num_to_keep = 1;
  p.score_attribute = "acc";
  p.score_max = true;
  auto cks = Make({0, 0, 0});
  cks[0].metrics = R"({"acc": 0.9})";
  cks[1].metrics = R"({"acc": 0.95})";
  cks[2].metrics = R"({"other": 1})";  // latest, unscored: kept because latest
  CHECK(CheckpointsToDelete(cks, p) == std::vector<int64_t>{1});
}
