// RemoteNodes: how the head reaches the agents of other nodes (launch and stop the ranks
// placed there). The daemon implements it over HTTP (http_remote_nodes.h); the head's
// own node is driven through its local Agent instead.
//
// Thread-safety: called on the head's io_context thread; `done` runs on that thread too.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "common/status.h"
#include "proto/worker_events.h"

namespace traintl {

class RemoteNodes {
 public:
  virtual ~RemoteNodes() = default;
  // Sends the node's part of an attempt (NodeAttemptPlanToJson) to the agent at
  // `api_address`; done(rendezvous port) once its workers were started: the plan's
  // master_port, or the one that node chose for its rank 0 (Agent::Launch).
  virtual void Launch(const std::string& api_address, nlohmann::json plan,
                      std::function<void(Result<int>)> done) = 0;
  // Best effort: asks the agent to stop every worker of the attempt.
  virtual void Stop(const std::string& api_address, const std::string& job_id, int attempt,
                    bool urgent) = 0;
  // Best effort: asks the agent to ack these held reports (rank, seq) of the attempt.
  virtual void Ack(const std::string& api_address, const std::string& job_id, int attempt,
                   const std::vector<std::pair<int, int>>& acks) = 0;
  // Best effort: tells the attempt's live workers on the node to regroup as `generation`
  // (peer recovery; Agent::Regroup).
  virtual void Regroup(const std::string& api_address, const std::string& job_id, int attempt,
                       const events::Regroup& regroup) = 0;
};

}  // namespace traintl
