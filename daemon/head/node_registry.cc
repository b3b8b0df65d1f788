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

json NodeStatusToJson(const NodeStatus& s) {
  json running = json::array();
  for (const auto& [job, attempt] : s.running)
    running.push_back({{"job_id", job}, {"attempt", attempt}});
  return {{"node_id", s.node_id}, {"api_address", s.api_address}, {"host", s.host},
          {"role", s.role},       {"raft_id", s.raft_id},         {"resources_total", s.total},
          {"gpus", s.gpus},       {"num_gpus", s.num_gpus},       {"running", running}};
}

bool NodeStatusFromJson(const json& j, NodeStatus* out) {
  try {
    out->node_id = j.at("node_id").get<std::string>();
    out->api_address = j.at("api_address").get<std::string>();
    out->host = j.at("host").get<std::string>();
    out->role = j.at("role").get<std::string>();
    out->raft_id = j.value("raft_id", uint64_t{0});
    out->total = j.at("resources_total").get<ResourceMap>();
    out->gpus = j.value("gpus", json::array());
    out->num_gpus = j.value("num_gpus", 0);
    out->running.clear();
    for (const auto& r : j.value("running", json::array()))
      out->running.emplace_back(r.at("job_id").get<std::string>(), r.at("attempt").get<int>());
  } catch (const std::exception&) {
    return false;
  }
  return !out->node_id.empty() && !out->api_address.empty() && out->num_gpus >= 0 &&
         out->num_gpus <= 1024;
}

}  // namespace traintl
