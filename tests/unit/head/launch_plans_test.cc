// Launch plans (daemon/head/launch_plans.h): what each node of an attempt is told to start.
#include "daemon/head/launch_plans.h"

#include <catch2/catch.hpp>

using namespace traintl;

TEST_CASE("the base plan carries the job's definition and the attempt's basics") {
  JobRecord job;
  job.id = "j1";
  job.name = "digits";
  job.library_sha256 = "ab";
  job.trial_dir = "/t/digits-j1";
  JobSpec spec;
  spec.library = "build/libdigits.so";
  spec.function = "train";
  spec.train_loop_config = {{"lr", 0.1}};
  spec.use_gpu = true;
  spec.resources_per_worker = {{"CPU", 3}, {"GPU", 1}};
  spec.datasets["train"] = DatasetSpec{"file:///d.csv", "csv", true, {}};
  spec.env["A"] = "1";
  AttemptBasics b;
  b.attempt = 2;
  b.world_size = 4;
  b.library_path = "/blobs/ab";
  b.restored_from = "/t/digits-j1/checkpoint_000003";
  b.master_addr = "10.0.0.2";
  b.collective_timeout_s = 60;

  NodeAttemptPlan p = BasePlan(job, spec, b);
  CHECK(p.job_id == "j1");
  CHECK(p.job_name == "digits");
  CHECK(p.attempt == 2);
  CHECK(p.world_size == 4);
  CHECK(p.library_path == "/blobs/ab");
  CHECK(p.library_sha256 == "ab");
  CHECK(p.library_name == "build/libdigits.so");  // as submitted, for messages
  CHECK(p.function == "train");
  CHECK(p.config == nlohmann::json{{"lr", 0.1}});
  CHECK(p.restored_from == b.restored_from);
  CHECK(p.trial_dir == "/t/digits-j1");
  CHECK(p.master_addr == "10.0.0.2");
  CHECK(p.master_port == 0);  // rank 0's node chooses it
  CHECK(p.collective_timeout_s == 60);
  CHECK(p.use_gpu);
  CHECK(p.datasets["train"]["uri"] == "file:///d.csv");
  CHECK(p.datasets["train"]["split"] == true);
  CHECK(p.user_env.at("A") == "1");
  CHECK(p.cpus_per_worker == 3);
  CHECK(p.world_ranks.empty());

  spec.resources_per_worker.erase("CPU");
  CHECK(BasePlan(job, spec, b).cpus_per_worker == 1);
}

TEST_CASE("one plan per node, in the order of first ranks, ranks contiguous with their GPUs") {
  NodeAttemptPlan base;
  base.job_id = "j";
  auto plans = NodePlans(base, {"b", "b", "a", "c", "c"}, {{0}, {1}, {}, {0}});
  REQUIRE(plans.size() == 3);
  CHECK(plans[0].first == "b");
  CHECK(plans[0].second.node_rank == 0);
  CHECK(plans[0].second.world_ranks == std::vector<int>{0, 1});
  CHECK(plans[0].second.rank_gpus == std::vector<std::vector<int>>{{0}, {1}});
  CHECK(plans[1].first == "a");
  CHECK(plans[1].second.node_rank == 1);
  CHECK(plans[1].second.world_ranks == std::vector<int>{2});
  CHECK(plans[2].first == "c");
  CHECK(plans[2].second.world_ranks == std::vector<int>{3, 4});
  // Rank 4 has no entry in rank_gpus: no devices.
  CHECK(plans[2].second.rank_gpus == std::vector<std::vector<int>>{{0}, {}});
  CHECK(plans[2].second.job_id == "j");
}

TEST_CASE("python, command and tensorflow plans, their wire form round-trips") {
  JobRecord job;
  job.id = "j2";
  job.name = "tf";
  job.library_sha256 = std::string(64, 'a');
  job.trial_dir = "/t/tf-j2";
  JobSpec spec;
  spec.entry_kind = EntrypointKind::kCommand;
  spec.command = {"python3", "probe.py"};
  spec.working_dir = "./src";
  spec.framework = "tensorflow";
  AttemptBasics b;
  b.attempt = 1;
  b.world_size = 2;
  b.library_path = "/blobs/aaa";
  b.master_addr = "127.0.0.1";
  b.rank_hosts = {"127.0.0.1", "127.0.0.2"};
  b.worker_port_base = NextWorkerPortBase(0, 2);
  NodeAttemptPlan p = BasePlan(job, spec, b);
  CHECK(p.entry_kind == "command");
  CHECK(p.command == spec.command);
  CHECK(p.library_name == "./src");  // what messages call the code blob
  CHECK(p.framework == "tensorflow");
  CHECK(p.rank_hosts == b.rank_hosts);
  CHECK(p.worker_port_base == kWorkerPortLow);
  p.world_ranks = {0, 1};
  p.rank_gpus = {{}, {}};
  auto back = NodeAttemptPlanFromJson(NodeAttemptPlanToJson(p));
  REQUIRE(back.ok());
  CHECK(back->command == p.command);
  CHECK(back->rank_hosts == p.rank_hosts);
  CHECK(back->worker_port_base == p.worker_port_base);
  CHECK_FALSE(back->hold_reports);
  CHECK_FALSE(NodeAttemptPlanToJson(p).contains("hold_reports"));  // as older heads wrote
  p.hold_reports = true;
  CHECK(NodeAttemptPlanFromJson(NodeAttemptPlanToJson(p))->hold_reports);
  p.hold_reports = false;

  auto j = NodeAttemptPlanToJson(p);
  j["rank_hosts"] = {"127.0.0.1"};
  CHECK_THAT(NodeAttemptPlanFromJson(j).status().message(), Catch::Contains("rank_hosts"));
  j = NodeAttemptPlanToJson(p);
  j["entry_kind"] = "cobol";
  CHECK_THAT(NodeAttemptPlanFromJson(j).status().message(), Catch::Contains("entry_kind"));

  spec.entry_kind = EntrypointKind::kPython;
  spec.python = "train:fn";
  spec.framework = "";
  p = BasePlan(job, spec, b);
  CHECK(p.entry_kind == "python");
  CHECK(p.python == "train:fn");
  CHECK(p.rank_hosts.empty());
  CHECK(!NodeAttemptPlanToJson(p).contains("rank_hosts"));
}

TEST_CASE("a trial dir outside the head's default storage path is made as the worker") {
  JobSpec spec;
  spec.function = "train_loop";
  AttemptBasics b;
  b.attempt = 1;
  b.world_size = 1;
  b.library_path = "/lib.so";
  b.master_addr = "127.0.0.1";
  JobRecord job;
  job.id = "j3";
  job.trial_dir = "/data/storage/x-j3";
  CHECK_FALSE(BasePlan(job, spec, b).trial_dir_as_worker);  // default path not known
  b.default_storage_path = "/data/storage";
  CHECK_FALSE(BasePlan(job, spec, b).trial_dir_as_worker);
  for (const char* chosen : {"/data/storage-2/x-j3", "/etc/x-j3", "/data/x-j3"}) {
    job.trial_dir = chosen;
    NodeAttemptPlan p = BasePlan(job, spec, b);
    INFO(chosen);
    CHECK(p.trial_dir_as_worker);
    p.world_ranks = {0};
    p.rank_gpus = {{}};
    auto back = NodeAttemptPlanFromJson(NodeAttemptPlanToJson(p));
    INFO((back.ok() ? "" : back.status().ToString()));
    REQUIRE(back.ok());
    CHECK(back->trial_dir_as_worker);
  }
  NodeAttemptPlan p = BasePlan(job, spec, b);
  p.world_ranks = {0};
  p.rank_gpus = {{}};
  auto j = NodeAttemptPlanToJson(p);
  j.erase("trial_dir_as_worker");  // an older head's plan
  CHECK_FALSE(NodeAttemptPlanFromJson(j)->trial_dir_as_worker);
}

TEST_CASE("TF_CONFIG port blocks rotate below the ephemeral range") {
  CHECK(NextWorkerPortBase(0, 4) == kWorkerPortLow);
  CHECK(NextWorkerPortBase(kWorkerPortLow + 4, 4) == kWorkerPortLow + 4);
  CHECK(NextWorkerPortBase(kWorkerPortHigh - 2, 4) == kWorkerPortLow);
  CHECK(NextWorkerPortBase(kWorkerPortHigh - 4, 4) == kWorkerPortHigh - 4);
}

TEST_CASE("a replacement plan starts one rank in its old place, joining a generation") {
  NodeAttemptPlan base;
  base.job_id = "j";
  base.attempt = 1;
  base.world_size = 5;
  base.peer_recovery = true;
  base.trial_dir = "/t";
  auto plans = NodePlans(base, {"b", "b", "a", "c", "c"}, {{0}, {1}, {}, {0}, {1}});
  const NodeAttemptPlan& c = plans[2].second;  // ranks 3 and 4, GPUs 0 and 1
  NodeAttemptPlan r = ReplacementPlan(c, 4, 29517, 2);
  CHECK(r.world_ranks == std::vector<int>{4});
  CHECK(r.local_ranks == std::vector<int>{1});
  CHECK(r.local_world_size == 2);
  CHECK(r.rank_gpus == c.rank_gpus);  // indexed by local rank
  CHECK(r.master_port == 29517);
  CHECK(r.regroup_generation == 2);
  CHECK(r.node_rank == c.node_rank);
  CHECK(r.peer_recovery);
  // It travels to another node's agent unchanged.
  auto back = NodeAttemptPlanFromJson(NodeAttemptPlanToJson(r));
  REQUIRE(back.ok());
  CHECK(back->world_ranks == r.world_ranks);
  CHECK(back->local_ranks == r.local_ranks);
  CHECK(back->local_world_size == 2);
  CHECK(back->regroup_generation == 2);
  CHECK(back->peer_recovery);
  r.group_ranks = {1, 4};
  back = NodeAttemptPlanFromJson(NodeAttemptPlanToJson(r));
  REQUIRE(back.ok());
  CHECK(back->group_ranks == std::vector<int>{1, 4});
  // A local rank outside the node's count is refused.
  nlohmann::json bad = NodeAttemptPlanToJson(r);
  bad["local_ranks"] = {2};
  CHECK(!NodeAttemptPlanFromJson(bad).ok());
}
