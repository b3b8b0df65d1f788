#include "daemon/head/node_registry.h"

#include <algorithm>

namespace traintl {

using nlohmann::json;

bool NodeRegistry::Heartbeat(NodeStatus status, Clock::time_point now, int64_t wall_ms) {
  auto it = nodes_.find(status.node_id);
  const bool fresh = it == nodes_.end() || !it->second.alive;
  status.last_seen = now;
  status.last_heartbeat_ms = wall_ms;
  status.alive = true;
  if (status.role == "voter" || status.raft_id != 0) {
    voters_[status.node_id] = status.api_address;
  } else {
    voters_.erase(status.node_id);
  }
  nodes_[status.node_id] = std::move(status);
  return fresh;
}

std::vector<std::string> NodeRegistry::ExpireLost(Clock::time_point now) {
  std::vector<std::string> lost;
  for (auto& [id, n] : nodes_) {
    if (n.alive && now - n.last_seen > loss_timeout_) {
      n.alive = false;
      n.running.clear();
      lost.push_back(id);
    }
  }
  return lost;
}

const NodeStatus* NodeRegistry::Get(const std::string& node_id) const {
  auto it = nodes_.find(node_id);
  return it == nodes_.end() ? nullptr : &it->second;
}

bool NodeRegistry::IsAlive(const std::string& node_id) const {
  const NodeStatus* n = Get(node_id);
  return n != nullptr && n->alive;
}

bool NodeRegistry::HasLiveWorkersOf(const std::string& job_id) const {
  for (const auto& [id, n] : nodes_) {
    if (!n.alive) continue;
    for (const auto& [job, attempt] : n.running)
      if (job == job_id) return true;
  }
  return false;
}

std::vector<std::string> NodeRegistry::VoterAddresses() const {
  std::vector<std::string> out;
  out.reserve(voters_.size());
  for (const auto& [id, address] : voters_) out.push_back(address);
  return out;
}

}  // namespace traintl
