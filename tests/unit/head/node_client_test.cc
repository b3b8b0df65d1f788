// NodeClient (daemon/head/node_client.h): the head's one launcher interface over its own
// agent and over another node's.
#include "daemon/head/node_client.h"

#include <boost/asio.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <vector>

#include "daemon/node/worker_pool.h"

using namespace traintl;
using nlohmann::json;

namespace {

// Records what the head asks of other nodes and answers as a test says.
struct RecordingRemote : RemoteNodes {
  void Launch(const std::string& api_address, json plan,
              std::function<void(Result<int>)> done) override {
    launched.emplace_back(api_address, plan);
    done(answer);
  }
  void Stop(const std::string& api_address, const std::string& job_id, int attempt,
            bool urgent) override {
    stopped.push_back(api_address + " " + job_id + " " + std::to_string(attempt) +
                      (urgent ? " urgent" : ""));
  }
  void Ack(const std::string& api_address, const std::string& job_id, int attempt,
           const std::vector<std::pair<int, int>>& acks) override {
    for (const auto& [rank, seq] : acks)
      acked.push_back(api_address + " " + job_id + " " + std::to_string(attempt) + " " +
                      std::to_string(rank) + ":" + std::to_string(seq));
  }
  void Regroup(const std::string& api_address, const std::string& job_id, int attempt,
               const events::Regroup& regroup) override {
    regrouped.push_back(api_address + " " + job_id + " " + std::to_string(attempt) + " " +
                        std::to_string(regroup.generation) + " " +
                        std::to_string(regroup.ranks.size()));
  }
  Result<int> answer = 0;
  std::vector<std::string> regrouped;
  std::vector<std::pair<std::string, json>> launched;
  std::vector<std::string> stopped;
  std::vector<std::string> acked;
};

NodeAttemptPlan Plan(std::vector<int> ranks, int port) {
  NodeAttemptPlan p;
  p.job_id = "j1";
  p.attempt = 2;
  p.world_size = 4;
  p.world_ranks = std::move(ranks);
  p.master_addr = "10.0.0.2";
  p.master_port = port;
  return p;
}

}  // namespace

TEST_CASE("remote node: the plan travels as JSON, errors name the node") {
  RecordingRemote remote;
  RemoteNodeClient client(&remote, "node-b", "10.0.0.2:7450");
  remote.answer = 29500;
  Result<int> got = Status::Internal("not called");
  client.Launch(Plan({0, 1}, 0), [&](Result<int> r) { got = r; });
  REQUIRE(got.ok());
  CHECK(*got == 29500);
  REQUIRE(remote.launched.size() == 1);
  CHECK(remote.launched[0].first == "10.0.0.2:7450");
  CHECK(remote.launched[0].second["world_ranks"] == json::array({0, 1}));
  CHECK(remote.launched[0].second["job_id"] == "j1");

  remote.answer = Status::Unavailable("connection refused");
  client.Launch(Plan({2, 3}, 29500), [&](Result<int> r) { got = r; });
  REQUIRE(!got.ok());
  CHECK(got.status().code() == Status::Code::kUnavailable);
  CHECK(got.status().message() == "node node-b could not start its ranks: connection refused");

  client.Stop("j1", 2, false);
  client.Stop("j1", 2, true);
  CHECK(remote.stopped ==
        std::vector<std::string>{"10.0.0.2:7450 j1 2", "10.0.0.2:7450 j1 2 urgent"});
  client.Regroup("j1", 2, events::Regroup{3, {0, 2}, "10.0.0.1", 21000});
  CHECK(remote.regrouped == std::vector<std::string>{"10.0.0.2:7450 j1 2 3 2"});
}

TEST_CASE("local node: the agent's own answer, synchronously") {
  char tmpl[] = "/tmp/traintl-nc-XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  const std::string dir = tmpl;
  boost::asio::io_context io;
  WorkerPoolOptions wopts;
  wopts.worker_binary = "/nonexistent/traintl-worker";
  WorkerPool pool(io, wopts, nullptr);
  AgentOptions aopts;
  aopts.data_dir = dir;
  Agent agent(aopts, &pool);
  LocalNodeClient client(&agent);
  // A node without rank 0 cannot choose the rendezvous port: refused before anything runs.
  bool called = false;
  client.Launch(Plan({1}, 0), [&](Result<int> r) {
    called = true;
    CHECK(!r.ok());
    CHECK(r.status().message() == "no rendezvous port in a plan without rank 0");
  });
  CHECK(called);
  CHECK(agent.LiveWorkers("j1", 2) == 0);
  client.Stop("j1", 2, false);  // nothing to stop: harmless
  std::filesystem::remove_all(dir);
}
