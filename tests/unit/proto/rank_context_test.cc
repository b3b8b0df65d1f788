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
  c.data_index_dir = "/var/lib/traintl/data_index";
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
  CHECK(back->data_index_dir == c.data_index_dir);
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
  CHECK_FALSE(back->hold_reports);
  j.erase("data_index_dir");  // an older agent's context: the trial's index
  CHECK(ParseRankContext(j.dump())->data_index_dir.empty());

  j["hold_reports"] = true;
  CHECK(ParseRankContext(j.dump())->hold_reports);
  j.erase("hold_reports");  // an older agent's context
  CHECK_FALSE(ParseRankContext(j.dump())->hold_reports);
  j["hold_reports"] = "yes";
  CHECK_THAT(ParseRankContext(j.dump()).status().message(), Catch::Contains("hold_reports"));
  j.erase("hold_reports");

  // Peer recovery: a replacement rank's context names the generation it joins.
  CHECK_FALSE(back->peer_recovery);
  CHECK(back->regroup_generation == 0);
  c.peer_recovery = true;
  c.regroup_generation = 3;
  back = ParseRankContext(RankContextToJson(c).dump());
  REQUIRE(back.ok());
  CHECK(back->peer_recovery);
  CHECK(back->regroup_generation == 3);
  CHECK(back->group_ranks.empty());
  c.group_ranks = {0, 2};
  CHECK(ParseRankContext(RankContextToJson(c).dump())->group_ranks == std::vector<int>{0, 2});
  j["peer_recovery"] = 1;
  CHECK_THAT(ParseRankContext(j.dump()).status().message(), Catch::Contains("peer_recovery"));
  j["peer_recovery"] = true;
  j["regroup_generation"] = -1;
  CHECK_THAT(ParseRankContext(j.dump()).status().message(), Catch::Contains("regroup_generation"));
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

TEST_CASE("python and command contexts round-trip, the library is then not required") {
  RankContext c;
  c.entry_kind = "command";
  c.command = {"python3", "train.py", "--epochs", "3"};
  c.working_dir = "/data/workdirs/ab";
  c.framework = "tensorflow";
  c.tf_config = {{"cluster", {{"worker", {"127.0.0.1:20000", "127.0.0.1:20001"}}}},
                 {"task", {{"type", "worker"}, {"index", 1}}}};
  c.world_rank = 1;
  c.world_size = 2;
  c.staging_dir = "/s";
  auto back = ParseRankContext(RankContextToJson(c).dump());
  REQUIRE(back.ok());
  CHECK(back->entry_kind == "command");
  CHECK(back->command == c.command);
  CHECK(back->working_dir == c.working_dir);
  CHECK(back->tf_config == c.tf_config);
  CHECK(back->library.empty());

  c.entry_kind = "python";
  c.python = "train:train_fn";
  back = ParseRankContext(RankContextToJson(c).dump());
  REQUIRE(back.ok());
  CHECK(back->python == "train:train_fn");

  json j = RankContextToJson(c);
  j["python"] = "";
  CHECK_THAT(ParseRankContext(j.dump()).status().message(), Catch::Contains("\"python\""));
  j["entry_kind"] = "command";
  j["command"] = json::array();
  CHECK_THAT(ParseRankContext(j.dump()).status().message(), Catch::Contains("no program"));
  j["entry_kind"] = "cobol";
  CHECK_THAT(ParseRankContext(j.dump()).status().message(), Catch::Contains("entry_kind"));
}

TEST_CASE("the launcher environment: torchrun's names and TF_CONFIG") {
  RankContext c;
  c.job_id = "ab12";
  c.attempt = 3;
  c.world_rank = 1;
  c.world_size = 4;
  c.local_rank = 1;
  c.local_world_size = 2;
  c.node_rank = 0;
  c.master_addr = "127.0.0.1";
  c.master_port = 4000;
  auto env = LauncherEnvironment(c);
  CHECK(env.at("MASTER_ADDR") == "127.0.0.1");
  CHECK(env.at("MASTER_PORT") == "4000");
  CHECK(env.at("RANK") == "1");
  CHECK(env.at("WORLD_SIZE") == "4");
  CHECK(env.at("LOCAL_RANK") == "1");
  CHECK(env.at("LOCAL_WORLD_SIZE") == "2");
  CHECK(env.at("GROUP_RANK") == "0");
  CHECK(env.at("TORCHELASTIC_RESTART_COUNT") == "2");
  CHECK(env.count("TF_CONFIG") == 0);
  CHECK(FrameworkEnvironment(c).empty());
  c.framework = "tensorflow";
  c.tf_config = {{"cluster", {{"worker", {"h:1"}}}}};
  CHECK(json::parse(FrameworkEnvironment(c).at("TF_CONFIG")) == c.tf_config);
  c.framework = "xgboost";
  c.collective_timeout_s = 30;
  auto xgb = FrameworkEnvironment(c);
  CHECK(xgb.at("DMLC_TRACKER_URI") == "127.0.0.1");
  CHECK(xgb.at("DMLC_TRACKER_PORT") == "4000");
  CHECK(xgb.at("DMLC_NUM_WORKER") == "4");
  CHECK(xgb.at("DMLC_TASK_ID") == "1");
  CHECK(xgb.at("rabit_timeout_sec") == "30");
}
