// RankContext (proto/rank_context.h): what the agent writes is what the worker reads, and
// both derive the same TRAINTL_* environment from it.
#include "proto/rank_context.h"

#include <catch2/catch.hpp>

using namespace traintl;
using nlohmann::json;

TEST_CASE("a rank context round-trips through the context file's JSON") {
  RankContext c;
  c.job_id = "ab12";
  c.job_name = "mnist";
  c.attempt = 3;
  c.world_rank = 2;
  c.world_size = 4;
  c.local_rank = 0;
  c.local_world_size = 2;
  c.node_rank = 1;
  c.library = "/blobs/ff.so";
  c.function = "train";
  c.config = {{"lr", 0.1}};
  c.checkpoint_dir = "/t/checkpoint_a002_s000004";
  c.trial_dir = "/t";
  c.staging_dir = "/t/.staging/attempt_3";
  c.master_addr = "10.0.0.2";
  c.master_port = 29500;
  c.collective_timeout_s = 300;
  c.use_gpu = true;
  c.datasets = {{"train", {{"uri", "file:///d.csv"}, {"format", "csv"}, {"split", true}}}};
  c.lease_fd = 4;
  c.lease_ms = 2000;
  c.cgroup_kill = "/sys/fs/cgroup/x/cgroup.kill";
  auto back = ParseRankContext(RankContextToJson(c).dump());
  REQUIRE(back.ok());
  CHECK(back->job_name == "mnist");
  CHECK(back->world_rank == 2);
  CHECK(back->node_rank == 1);
  CHECK(back->config == c.config);
  CHECK(back->datasets == c.datasets);
  CHECK(back->checkpoint_dir == c.checkpoint_dir);
  CHECK(back->master_port == 29500);
  CHECK(back->use_gpu);
  CHECK(back->lease_fd == 4);
  CHECK(back->cgroup_kill == c.cgroup_kill);
  CHECK(back->json == RankContextToJson(c));
  CHECK(RankEnvironment(*back) == RankEnvironment(c));

  // Without a lease or checkpoint: null fields, read back as none.
  c.lease_fd = -1;
  c.lease_ms = 0;
  c.checkpoint_dir.reset();
  json j = RankContextToJson(c);
  CHECK(j["lease"].is_null());
  CHECK(j["checkpoint_dir"].is_null());
  back = ParseRankContext(j.dump());
  REQUIRE(back.ok());
  CHECK(back->lease_fd == -1);
  CHECK(!back->checkpoint_dir);
}

TEST_CASE("the TRAINTL_* environment of a rank") {
  RankContext c;
  c.job_id = "ab12";
  c.attempt = 2;
  c.world_rank = 1;
  c.world_size = 3;
  c.master_addr = "127.0.0.1";
  c.master_port = 4000;
  auto env = RankEnvironment(c);
  CHECK(env.at("TRAINTL_WORLD_SIZE") == "3");
  CHECK(env.at("TRAINTL_WORLD_RANK") == "1");
  CHECK(env.at("TRAINTL_ATTEMPT") == "2");
  CHECK(env.at("TRAINTL_MASTER_PORT") == "4000");
  for (const auto& [name, value] : env) CHECK(name.rfind("TRAINTL_", 0) == 0);
}

TEST_CASE("a context with a malformed datasets object is refused") {
  json j = {{"library", "/l.so"},
            {"world_rank", 0},
            {"world_size", 1},
            {"staging_dir", "/s"},
            {"datasets", 5}};
  auto r = ParseRankContext(j.dump());
  REQUIRE(!r.ok());
  CHECK(r.status().message() == "context: \"datasets\" must be an object");
}
