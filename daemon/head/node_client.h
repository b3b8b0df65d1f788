// NodeClient: how the head starts and stops an attempt's ranks on one node, whether the
// node is its own (LocalNodeClient: the Agent in this process) or another
// (RemoteNodeClient: that node's agent over HTTP, through RemoteNodes). JobManager
// launches and stops through this one interface and never asks where a node is.
//
// Thread-safety: called on the head's io_context thread; `done` runs on that thread,
// possibly before Launch returns (the local agent starts its workers synchronously).
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "daemon/head/remote_nodes.h"
#include "daemon/node/agent.h"

namespace traintl {

class NodeClient {
 public:
  virtual ~NodeClient() = default;
  // Starts the node's part of an attempt. done(rendezvous port) once its workers started:
  // the plan's master_port, or the port this node chose (rank 0's node, master_port 0).
  // An error's message says which node could not start its ranks and why.
  virtual void Launch(NodeAttemptPlan plan, std::function<void(Result<int>)> done) = 0;
  // Best effort: stops every worker of the attempt on the node; `urgent`: SIGTERM at once
  // rather than after the stop grace (a failed attempt, AttemptTracker::StopWorkers).
  virtual void Stop(const std::string& job_id, int attempt, bool urgent = false) = 0;
  // Best effort: acks held reports (rank, seq) of the attempt to their workers
  // (JobManager::ReleaseReports).
  virtual void Ack(const std::string& job_id, int attempt,
                   const std::vector<std::pair<int, int>>& acks) = 0;
  // Best effort: the attempt's live workers on the node regroup as `generation` (peer
  // recovery: a rank is being replaced).
  virtual void Regroup(const std::string& job_id, int attempt, const events::Regroup& regroup) = 0;
};

class LocalNodeClient : public NodeClient {
 public:
  explicit LocalNodeClient(Agent* agent) : agent_(agent) {}
  void Launch(NodeAttemptPlan plan, std::function<void(Result<int>)> done) override;
  void Stop(const std::string& job_id, int attempt, bool urgent) override;
  void Ack(const std::string& job_id, int attempt,
           const std::vector<std::pair<int, int>>& acks) override;
  void Regroup(const std::string& job_id, int attempt, const events::Regroup& regroup) override;

 private:
  Agent* const agent_;
};

class RemoteNodeClient : public NodeClient {
 public:
  // `node_id` names the node in errors; `api_address` is where its agent listens.
  RemoteNodeClient(RemoteNodes* remote, std::string node_id, std::string api_address)
      : remote_(remote), node_id_(std::move(node_id)), api_address_(std::move(api_address)) {}
  void Launch(NodeAttemptPlan plan, std::function<void(Result<int>)> done) override;
  void Stop(const std::string& job_id, int attempt, bool urgent) override;
  void Ack(const std::string& job_id, int attempt,
           const std::vector<std::pair<int, int>>& acks) override;
  void Regroup(const std::string& job_id, int attempt, const events::Regroup& regroup) override;

 private:
  RemoteNodes* const remote_;
  const std::string node_id_;
  const std::string api_address_;
};

}  // namespace traintl
