#include <catch2/catch.hpp>

#include "daemon/scheduler/scheduler.h"

using namespace traintl;

static NodeSnapshot Node(const std::string& id, double cpus, double gpus = 0) {
  NodeSnapshot n;
  n.node_id = id;
  n.total = {{"CPU", cpus}, {"GPU", gpus}, {"memory", 8.0 * (1 << 30)}};
  n.available = n.total;
  return n;
}

static PendingJob Job(const std::string& id, int workers, double cpu,
                      PlacementStrategy s = PlacementStrategy::kPack) {
  PendingJob j;
  j.job_id = id;
  j.num_workers = workers;
  j.per_worker = {{"CPU", cpu}, {"GPU", 0}};
  j.strategy = s;
  return j;
}

TEST_CASE("gang: all workers or none") {
  auto r = Schedule({Node("a", 2)}, {Job("j1", 3, 1)});
  CHECK(r.placements.empty());
  REQUIRE(r.waiting.count("j1"));
  CHECK(r.waiting["j1"].find("CPU: 3 needed, 2 free") != std::string::npos);
  r = Schedule({Node("a", 2)}, {Job("j1", 2, 1)});
  REQUIRE(r.placements.size() == 1);
  CHECK(r.placements[0].rank_nodes == std::vector<std::string>{"a", "a"});
}

TEST_CASE("earlier jobs take resources, a big job does not block a small one") {
  auto r = Schedule({Node("a", 4)},
                    {Job("big", 8, 1), Job("s1", 2, 1), Job("s2", 2, 1), Job("s3", 1, 1)});
  CHECK(r.waiting.count("big"));
  CHECK(r.waiting.count("s3"));
  CHECK(r.placements.size() == 2);
}

TEST_CASE("PACK prefers the fewest nodes, SPREAD spreads, ranks contiguous per node") {
  std::vector<NodeSnapshot> nodes = {Node("a", 2), Node("b", 4), Node("c", 4)};
  auto pack = Schedule(nodes, {Job("p", 4, 1)});
  REQUIRE(pack.placements.size() == 1);
  CHECK(pack.placements[0].rank_nodes == std::vector<std::string>{"b", "b", "b", "b"});
  auto spread = Schedule(nodes, {Job("s", 3, 1, PlacementStrategy::kSpread)});
  REQUIRE(spread.placements.size() == 1);
  CHECK(spread.placements[0].rank_nodes == std::vector<std::string>{"a", "b", "c"});
  auto spread5 = Schedule(nodes, {Job("s", 5, 1, PlacementStrategy::kSpread)});
  REQUIRE(spread5.placements.size() == 1);
  CHECK(spread5.placements[0].rank_nodes == std::vector<std::string>{"a", "b", "b", "c", "c"});
}

TEST_CASE("STRICT_PACK and STRICT_SPREAD") {
  std::vector<NodeSnapshot> nodes = {Node("a", 2), Node("b", 2)};
  CHECK(Schedule(nodes, {Job("x", 3, 1, PlacementStrategy::kStrictPack)}).placements.empty());
  CHECK(Schedule(nodes, {Job("x", 2, 1, PlacementStrategy::kStrictPack)}).placements.size() == 1);
  CHECK(Schedule(nodes, {Job("x", 3, 1, PlacementStrategy::kStrictSpread)}).placements.empty());
  auto r = Schedule(nodes, {Job("x", 2, 1, PlacementStrategy::kStrictSpread)});
  REQUIRE(r.placements.size() == 1);
  CHECK(r.placements[0].rank_nodes == std::vector<std::string>{"a", "b"});
}

TEST_CASE("feasibility against totals, custom resources, fractional GPUs, dead nodes") {
  std::vector<NodeSnapshot> nodes = {Node("a", 4, 1)};
  PendingJob gpu = Job("g", 2, 1);
  gpu.per_worker["GPU"] = 0.5;
  CHECK(CheckFeasible(nodes, gpu).ok());
  gpu.num_workers = 3;
  auto st = CheckFeasible(nodes, gpu);
  CHECK(!st.ok());
  CHECK(st.message().find("infeasible") != std::string::npos);
  CHECK(st.message().find("GPU: 1.5 needed, 1 in the cluster") != std::string::npos);
  PendingJob custom = Job("c", 1, 1);
  custom.per_worker["tpu_slice"] = 1;
  CHECK(!CheckFeasible(nodes, custom).ok());
  nodes[0].total["tpu_slice"] = 1;
  nodes[0].available["tpu_slice"] = 1;
  CHECK(CheckFeasible(nodes, custom).ok());
  nodes[0].alive = false;
  CHECK(Schedule(nodes, {Job("d", 1, 1)}).placements.empty());
}

TEST_CASE("fractional GPUs share a device up to 1.0, whole GPUs take free devices") {
  NodeSnapshot n = Node("g", 16, 2);
  n.gpu_free = {1.0, 1.0};
  PendingJob half = Job("half", 4, 1);
  half.per_worker["GPU"] = 0.5;
  auto r = Schedule({n}, {half});
  REQUIRE(r.placements.size() == 1);
  CHECK(r.placements[0].rank_gpus == std::vector<std::vector<int>>{{0}, {0}, {1}, {1}});
  // 0.6 + 0.6 > 1: only one per device, so 3 workers cannot fit on 2 devices.
  PendingJob sixty = Job("sixty", 3, 1);
  sixty.per_worker["GPU"] = 0.6;
  CHECK(Schedule({n}, {sixty}).placements.empty());
  CHECK(!CheckFeasible({n}, sixty).ok());
  sixty.num_workers = 2;
  auto r2 = Schedule({n}, {sixty});
  REQUIRE(r2.placements.size() == 1);
  CHECK(r2.placements[0].rank_gpus == std::vector<std::vector<int>>{{0}, {1}});
  // A whole-GPU job after a fractional one: best fit keeps device 1 whole.
  PendingJob quarter = Job("q", 1, 1);
  quarter.per_worker["GPU"] = 0.25;
  PendingJob whole = Job("w", 1, 1);
  whole.per_worker["GPU"] = 1;
  auto r3 = Schedule({n}, {quarter, whole});
  REQUIRE(r3.placements.size() == 2);
  CHECK(r3.placements[0].rank_gpus == std::vector<std::vector<int>>{{0}});
  CHECK(r3.placements[1].rank_gpus == std::vector<std::vector<int>>{{1}});
  PendingJob two = Job("two", 1, 1);
  two.per_worker["GPU"] = 2;
  auto r4 = Schedule({n}, {two});
  REQUIRE(r4.placements.size() == 1);
  CHECK(r4.placements[0].rank_gpus == std::vector<std::vector<int>>{{0, 1}});
}

TEST_CASE("TakeGpus leaves the devices unchanged when it cannot") {
  std::vector<double> free = {0.5, 1.0};
  CHECK(!TakeGpus(free, 2).has_value());
  CHECK(free == std::vector<double>{0.5, 1.0});
  CHECK(*TakeGpus(free, 0.5) == std::vector<int>{0});
  CHECK(!TakeGpus(free, 2).has_value());
  CHECK(*TakeGpus(free, 1) == std::vector<int>{1});
  CHECK(!TakeGpus(free, 0.1).has_value());
}

TEST_CASE("a long queue of one shape: the waiting reason is shared, placements still retried") {
  // A shape that did not fit is not retried until a placement changes the nodes; other
  // shapes are still tried, and the remembered reason is redone after a placement.
  std::vector<PendingJob> queue = {Job("wide", 3, 1), Job("one-a", 1, 1), Job("one-b", 1, 1),
                                   Job("half", 1, 0.5), Job("wide2", 3, 1)};
  auto r = Schedule({Node("a", 2.5)}, queue);
  REQUIRE(r.placements.size() == 3);
  CHECK(r.placements[0].job_id == "one-a");
  CHECK(r.placements[1].job_id == "one-b");
  CHECK(r.placements[2].job_id == "half");
  REQUIRE(r.waiting.count("wide"));
  REQUIRE(r.waiting.count("wide2"));
  // wide2 was looked at again after the placements: its reason reflects the nodes now
  // (0 free), not the nodes when "wide" was looked at (2.5 free).
  CHECK(r.waiting["wide"].find("3 needed, 2.5 free") != std::string::npos);
  CHECK(r.waiting["wide2"].find("3 needed, 0 free") != std::string::npos);

  std::vector<PendingJob> many;
  for (int i = 0; i < 5000; ++i) many.push_back(Job("j" + std::to_string(i), 1, 1));
  r = Schedule({Node("a", 2), Node("b", 1)}, many);
  CHECK(r.placements.size() == 3);
  REQUIRE(r.waiting.size() == 4997);
  CHECK(r.waiting["j4999"] == r.waiting["j3"]);
  CHECK(r.waiting["j3"].find("CPU: 1 needed, 0 free") != std::string::npos);
}

TEST_CASE("an elastic job starts with the most workers that fit, at least its minimum") {
  PendingJob j = Job("e", 4, 1);
  j.min_workers = 2;
  auto r = Schedule({Node("a", 2), Node("b", 1)}, {j});
  REQUIRE(r.placements.size() == 1);
  CHECK(r.placements[0].rank_nodes == std::vector<std::string>{"a", "a", "b"});
  r = Schedule({Node("a", 5)}, {j});
  REQUIRE(r.placements.size() == 1);
  CHECK(r.placements[0].rank_nodes.size() == 4);  // never more than the maximum
  r = Schedule({Node("a", 1)}, {j});
  CHECK(r.placements.empty());
  REQUIRE(r.waiting.count("e"));
  CHECK(r.waiting["e"].find("CPU: 2 needed, 1 free") != std::string::npos);  // the minimum
  // Feasible as soon as its minimum could ever run.
  CHECK(CheckFeasible({Node("a", 2)}, j).ok());
  CHECK(!CheckFeasible({Node("a", 1)}, j).ok());
  // A fixed job of the same size is all or nothing.
  CHECK(Schedule({Node("a", 2), Node("b", 1)}, {Job("f", 4, 1)}).placements.empty());
}
