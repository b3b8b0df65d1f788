// NodeRegistry: the head's in-memory view of the cluster's nodes, fed by heartbeats.
// Heartbeats themselves never go through Raft; a node that has not heartbeated for
// `loss_timeout` is LOST (its workers count as failed). A new head starts empty and learns
// the nodes from their next heartbeats.
//
// Thread-safety: not thread-safe; the head uses it on its io_context thread. Time is
// passed in, so tests drive it with any clock.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/scheduler/scheduler.h"
#include "proto/node_status.h"

namespace traintl {

class NodeRegistry {
 public:
  using Clock = std::chrono::steady_clock;
  explicit NodeRegistry(std::chrono::milliseconds loss_timeout) : loss_timeout_(loss_timeout) {}

  // Records a heartbeat. Returns true when the node is new or was LOST.
  bool Heartbeat(NodeStatus status, Clock::time_point now, int64_t wall_ms);
  // Marks nodes silent for longer than the loss timeout as LOST; returns those ids.
  std::vector<std::string> ExpireLost(Clock::time_point now);
  const NodeStatus* Get(const std::string& node_id) const;
  bool IsAlive(const std::string& node_id) const;
  const std::map<std::string, NodeStatus>& nodes() const { return nodes_; }
  // True when an alive node reports live workers of `job_id`.
  bool HasLiveWorkersOf(const std::string& job_id) const;
  // API addresses of the voters (for agents that must find the next head), by node id.
  // Kept up to date by Heartbeat: every heartbeat's answer carries them, and a walk over
  // a thousand nodes per heartbeat would be most of the head's heartbeat cost.
  std::vector<std::string> VoterAddresses() const;
  void Clear() {
    nodes_.clear();
    voters_.clear();
  }
  std::chrono::milliseconds loss_timeout() const { return loss_timeout_; }

 private:
  const std::chrono::milliseconds loss_timeout_;
  std::map<std::string, NodeStatus> nodes_;
  std::map<std::string, std::string> voters_;  // node id -> API address, of voter nodes
};

}  // namespace traintl
