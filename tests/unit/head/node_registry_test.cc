#include "daemon/head/node_registry.h"

#include <catch2/catch.hpp>

#include "daemon/daemon_config.h"
#include "proto/launch_plan.h"

namespace traintl {
namespace {

using namespace std::chrono_literals;

NodeStatus Node(const std::string& id, const std::string& role = "agent") {
  NodeStatus s;
  s.node_id = id;
  s.api_address = "127.0.0.1:" + std::to_string(7000 + id.size());
  s.host = "127.0.0.1";
  s.role = role;
  s.raft_id = role == "voter" ? 7 : 0;
  s.total = {{"CPU", 2}};
  return s;
}

TEST_CASE("a silent node is lost after the timeout, and comes back with a heartbeat") {
  NodeRegistry reg(1000ms);
  const auto t0 = NodeRegistry::Clock::time_point{} + 10s;
  CHECK(reg.Heartbeat(Node("a"), t0, 1));
  CHECK_FALSE(reg.Heartbeat(Node("a"), t0 + 500ms, 2));
  CHECK(reg.ExpireLost(t0 + 1400ms).empty());
  auto lost = reg.ExpireLost(t0 + 1600ms);
  REQUIRE(lost == std::vector<std::string>{"a"});
  CHECK_FALSE(reg.IsAlive("a"));
  CHECK(reg.ExpireLost(t0 + 5s).empty());  // reported once
  CHECK(reg.Heartbeat(Node("a"), t0 + 6s, 3));
  CHECK(reg.IsAlive("a"));
  CHECK(reg.Get("a")->last_heartbeat_ms == 3);
}

TEST_CASE("live workers are tracked per job and forgotten with a lost node") {
  NodeRegistry reg(1000ms);
  const auto t0 = NodeRegistry::Clock::time_point{} + 10s;
  NodeStatus a = Node("a");
  a.running = {{"job1", 2}};
  reg.Heartbeat(a, t0, 1);
  reg.Heartbeat(Node("b", "voter"), t0 + 900ms, 1);
  CHECK(reg.HasLiveWorkersOf("job1"));
  CHECK_FALSE(reg.HasLiveWorkersOf("job2"));
  reg.ExpireLost(t0 + 1500ms);
  CHECK_FALSE(reg.HasLiveWorkersOf("job1"));
  CHECK(reg.VoterAddresses() == std::vector<std::string>{reg.Get("b")->api_address});
}

TEST_CASE("voter addresses follow role and address changes, by node id") {
  NodeRegistry reg(1000ms);
  const auto t0 = NodeRegistry::Clock::time_point{} + 10s;
  NodeStatus c = Node("cc", "voter");
  reg.Heartbeat(c, t0, 1);
  reg.Heartbeat(Node("a", "voter"), t0, 1);
  reg.Heartbeat(Node("bbbb"), t0, 1);
  CHECK(reg.VoterAddresses() == std::vector<std::string>{"127.0.0.1:7001", "127.0.0.1:7002"});
  c.api_address = "127.0.0.1:9999";  // restarted on another port
  reg.Heartbeat(c, t0 + 1ms, 2);
  CHECK(reg.VoterAddresses() == std::vector<std::string>{"127.0.0.1:7001", "127.0.0.1:9999"});
  reg.Heartbeat(Node("a"), t0 + 2ms, 3);  // no longer a voter
  CHECK(reg.VoterAddresses() == std::vector<std::string>{"127.0.0.1:9999"});
  reg.ExpireLost(t0 + 5s);  // a lost voter stays a place to look for the head
  CHECK(reg.VoterAddresses() == std::vector<std::string>{"127.0.0.1:9999"});
  reg.Clear();
  CHECK(reg.VoterAddresses().empty());
}

TEST_CASE("heartbeat JSON round-trips and rejects malformed bodies") {
  NodeStatus s = Node("node-1", "voter");
  s.num_gpus = 2;
  s.running = {{"j", 1}};
  auto back = NodeStatusFromJson(NodeStatusToJson(s));
  REQUIRE(back.ok());
  CHECK(back->node_id == s.node_id);
  CHECK(back->raft_id == 7);
  CHECK(back->num_gpus == 2);
  CHECK(back->total.at("CPU") == 2);
  CHECK(back->running == s.running);
  auto missing = NodeStatusFromJson(nlohmann::json{{"node_id", "x"}});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message() == "malformed heartbeat: api_address: missing");
  CHECK_FALSE(NodeStatusFromJson(nlohmann::json::array()).ok());
  nlohmann::json j = NodeStatusToJson(s);
  j["num_gpus"] = 5000;
  CHECK(NodeStatusFromJson(j).status().message() == "malformed heartbeat: num_gpus: out of range");
  j = NodeStatusToJson(s);
  j["running"] = {{{"job_id", "j"}}};
  CHECK(NodeStatusFromJson(j).status().message() ==
        "malformed heartbeat: running[].attempt: missing");
}

TEST_CASE("launch plans round-trip and bad ones are refused") {
  NodeAttemptPlan p;
  p.job_id = "j";
  p.job_name = "n";
  p.attempt = 2;
  p.world_size = 4;
  p.node_rank = 1;
  p.world_ranks = {2, 3};
  p.rank_gpus = {{0}, {1}};
  p.library_path = "/x.so";
  p.library_sha256 = std::string(64, 'a');
  p.trial_dir = "/tmp/t";
  p.master_addr = "127.0.0.1";
  p.master_port = 1234;
  p.user_env = {{"A", "B"}};
  auto back = NodeAttemptPlanFromJson(NodeAttemptPlanToJson(p));
  REQUIRE(back.ok());
  CHECK(back->world_ranks == p.world_ranks);
  CHECK(back->rank_gpus == p.rank_gpus);
  CHECK(back->library_sha256 == p.library_sha256);
  CHECK(back->user_env == p.user_env);
  CHECK(back->node_rank == 1);
  // The name before it was unified still reads.
  auto old = NodeAttemptPlanToJson(p);
  old.erase("restored_from");
  old["checkpoint_dir"] = "/t/checkpoint_1";
  CHECK(NodeAttemptPlanFromJson(old)->restored_from == "/t/checkpoint_1");
  auto j = NodeAttemptPlanToJson(p);
  j["world_ranks"] = {4};
  CHECK(NodeAttemptPlanFromJson(j).status().message() ==
        "launch plan: world_ranks: rank 4 outside the world");
  j = NodeAttemptPlanToJson(p);
  j["trial_dir"] = "relative";
  CHECK(NodeAttemptPlanFromJson(j).status().message() ==
        "launch plan: trial_dir: must be an absolute path");
  j.erase("job_id");
  CHECK(NodeAttemptPlanFromJson(j).status().message() == "launch plan: job_id: missing");
  j = NodeAttemptPlanToJson(p);
  j["master_port"] = "80";
  CHECK(NodeAttemptPlanFromJson(j).status().message() ==
        "launch plan: master_port: wrong type (string)");
}

TEST_CASE("joining voters get stable raft ids other than the bootstrap voter's") {
  CHECK(RaftIdForNode("node-12345678") == RaftIdForNode("node-12345678"));
  CHECK(RaftIdForNode("node-12345678") != RaftIdForNode("node-12345679"));
  CHECK(RaftIdForNode("node-00000000") > 1);
}

}  // namespace
}  // namespace traintl
