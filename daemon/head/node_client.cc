#include "daemon/head/node_client.h"

#include <utility>

#include "proto/launch_plan.h"

namespace traintl {

void LocalNodeClient::Launch(NodeAttemptPlan plan, std::function<void(Result<int>)> done) {
  done(agent_->Launch(plan));
}

void LocalNodeClient::Stop(const std::string& job_id, int attempt, bool urgent) {
  agent_->Stop(job_id, attempt, urgent);
}

void LocalNodeClient::Ack(const std::string& job_id, int attempt,
                          const std::vector<std::pair<int, int>>& acks) {
  for (const auto& [rank, seq] : acks) agent_->Ack(job_id, attempt, rank, seq);
}

void LocalNodeClient::Regroup(const std::string& job_id, int attempt,
                              const events::Regroup& regroup) {
  agent_->Regroup(job_id, attempt, regroup);
}

void RemoteNodeClient::Launch(NodeAttemptPlan plan, std::function<void(Result<int>)> done) {
  remote_->Launch(
      api_address_, NodeAttemptPlanToJson(plan),
      [node = node_id_, done = std::move(done)](Result<int> port) {
        if (port.ok()) return done(port);
        done(Status(port.status().code(),
                    "node " + node + " could not start its ranks: " + port.status().message()));
      });
}

void RemoteNodeClient::Stop(const std::string& job_id, int attempt, bool urgent) {
  remote_->Stop(api_address_, job_id, attempt, urgent);
}

void RemoteNodeClient::Ack(const std::string& job_id, int attempt,
                           const std::vector<std::pair<int, int>>& acks) {
  remote_->Ack(api_address_, job_id, attempt, acks);
}

void RemoteNodeClient::Regroup(const std::string& job_id, int attempt,
                               const events::Regroup& regroup) {
  remote_->Regroup(api_address_, job_id, attempt, regroup);
}

}  // namespace traintl
