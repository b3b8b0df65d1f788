// NodeStatus: what a node says about itself in a heartbeat (POST /v1/internal/heartbeat,
// WIRE.md), plus what the head's registry (daemon/head/node_registry.h) derives from it.
// One struct and one codec shared by the agent's head link, which sends it, and the head,
// which reads it.
//
// Thread-safety: plain values and free functions.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace traintl {

struct NodeStatus {
  std::string node_id;
  std::string api_address;     // "host:port" of its daemon API
  std::string host;            // address its workers listen on (DDP master when rank 0 is here)
  std::string role = "agent";  // "voter" | "agent" ("head" is decided when viewed)
  uint64_t raft_id = 0;        // 0 for agents
  std::map<std::string, double> total;  // resources it offers (scheduler.h's ResourceMap)
  nlohmann::json gpus = nlohmann::json::array();
  int num_gpus = 0;  // 0..1024
  // Attempts with live workers on the node: (job id, attempt).
  std::vector<std::pair<std::string, int>> running;
  // Not on the wire: filled by the head's registry.
  int64_t last_heartbeat_ms = 0;  // wall clock, for display
  std::chrono::steady_clock::time_point last_seen{};
  bool alive = true;
};

// The heartbeat body.
nlohmann::json NodeStatusToJson(const NodeStatus& s);
// InvalidArgument "malformed heartbeat: <field>: ..." for a missing, mistyped or out of
// range field; fields a newer release added are ignored.
Result<NodeStatus> NodeStatusFromJson(const nlohmann::json& j);

}  // namespace traintl
