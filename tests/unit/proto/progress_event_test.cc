// The worker's progress event (proto/worker_events.h, type "progress"): it round-trips
// through Encode/DecodeWorkerEvent and ProgressJson/ProgressFromJson; every field is
// optional, and a negative or ill-typed one counts as absent (0, false).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <variant>

#include <nlohmann/json.hpp>

#include "proto/worker_events.h"

using namespace traintl;
using nlohmann::json;

namespace {

events::Progress Full() {
  events::Progress p;
  p.steps = 12;
  p.step_s = 0.25;
  p.busy_s = 0.125;
  p.collective_seq = 40;
  p.in_collective = true;
  p.waiting_s = 1.5;
  return p;
}

events::Progress DecodeProgress(const std::string& line) {
  auto e = events::DecodeWorkerEvent(line);
  INFO(line << " -> " << (e.ok() ? "ok" : e.status().message()));
  REQUIRE(e.ok());
  REQUIRE(std::holds_alternative<events::Progress>(*e));
  return std::get<events::Progress>(*e);
}

}  // namespace

TEST_CASE("a progress event encodes as one sorted line and decodes back") {
  const events::WorkerEvent e = Full();
  CHECK(events::TypeOf(e) == "progress");
  const std::string line = events::Encode(e);
  CHECK(line ==
        R"({"busy_s":0.125,"collective_seq":40,"in_collective":true,"step_s":0.25,"steps":12,)"
        R"("type":"progress","waiting_s":1.5})"
        "\n");
  CHECK(DecodeProgress(line) == Full());
}

TEST_CASE("a progress event of defaults and one of large counts round-trip") {
  const events::Progress zero;
  CHECK(DecodeProgress(events::Encode(events::WorkerEvent(zero))) == zero);

  events::Progress big = Full();
  big.steps = 5'000'000'000;  // past an int
  big.collective_seq = std::numeric_limits<int64_t>::max();
  big.in_collective = false;
  big.waiting_s = 0;
  CHECK(DecodeProgress(events::Encode(events::WorkerEvent(big))) == big);
}

TEST_CASE("a progress event with no fields decodes as all absent") {
  const events::Progress p = DecodeProgress(R"({"type":"progress"})");
  CHECK(p == events::Progress{});
  CHECK(p.steps == 0);
  CHECK(p.step_s == 0);
  CHECK_FALSE(p.in_collective);
}

TEST_CASE("negative or ill-typed progress fields count as absent") {
  const events::Progress p = DecodeProgress(
      R"({"type":"progress","steps":-3,"step_s":-0.5,"busy_s":"fast","collective_seq":2.5,)"
      R"("in_collective":"yes","waiting_s":null})");
  CHECK(p == events::Progress{});

  // One bad field costs only itself.
  const events::Progress q = DecodeProgress(
      R"({"type":"progress","steps":7,"step_s":true,"busy_s":0.2,"collective_seq":-1,)"
      R"("in_collective":true,"waiting_s":[1]})");
  CHECK(q.steps == 7);
  CHECK(q.step_s == 0);
  CHECK(q.busy_s == 0.2);
  CHECK(q.collective_seq == 0);
  CHECK(q.in_collective);
  CHECK(q.waiting_s == 0);
}

TEST_CASE("progress seconds may be integers and counts may not be fractions") {
  const events::Progress p = DecodeProgress(
      R"({"type":"progress","steps":3.0,"step_s":2,"busy_s":1,"collective_seq":4,"waiting_s":0})");
  CHECK(p.steps == 0);  // 3.0 is no integer
  CHECK(p.step_s == 2.0);
  CHECK(p.busy_s == 1.0);
  CHECK(p.collective_seq == 4);
}

TEST_CASE("a progress count past int64 counts as absent") {
  const events::Progress p =
      DecodeProgress(R"({"type":"progress","steps":18446744073709551615,"collective_seq":5})");
  CHECK(p.steps == 0);
  CHECK(p.collective_seq == 5);
}

TEST_CASE("unknown fields in a progress event are ignored") {
  const events::Progress p =
      DecodeProgress(R"({"type":"progress","steps":2,"gpu_util":0.9,"extra":{"a":1}})");
  CHECK(p.steps == 2);
}

TEST_CASE("a NaN in a progress event is sent as null and read back as absent") {
  events::Progress p = Full();
  p.step_s = std::numeric_limits<double>::quiet_NaN();
  const std::string line = events::Encode(events::WorkerEvent(p));
  CHECK(line.find(R"("step_s":null)") != std::string::npos);
  const events::Progress back = DecodeProgress(line);
  CHECK(back.step_s == 0);
  CHECK(back.busy_s == 0.125);
}

TEST_CASE("ProgressJson holds the six fields and ProgressFromJson reads them back") {
  const json j = events::ProgressJson(Full());
  CHECK(j == json{{"steps", 12},
                  {"step_s", 0.25},
                  {"busy_s", 0.125},
                  {"collective_seq", 40},
                  {"in_collective", true},
                  {"waiting_s", 1.5}});
  CHECK_FALSE(j.contains("type"));
  CHECK(events::ProgressFromJson(j) == Full());
}

TEST_CASE("ProgressFromJson is lenient") {
  CHECK(events::ProgressFromJson(json()) == events::Progress{});
  CHECK(events::ProgressFromJson(json::array({1, 2})) == events::Progress{});
  CHECK(events::ProgressFromJson(json(5)) == events::Progress{});
  CHECK(events::ProgressFromJson(json::object()) == events::Progress{});
  const events::Progress p = events::ProgressFromJson(
      {{"steps", 9}, {"busy_s", -1.0}, {"waiting_s", std::nan("")}, {"in_collective", 1}});
  CHECK(p.steps == 9);
  CHECK(p.busy_s == 0);
  CHECK(p.waiting_s == 0);
  CHECK_FALSE(p.in_collective);
}
