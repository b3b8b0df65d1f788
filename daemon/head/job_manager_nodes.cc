// JobManager's side of the nodes (job_manager.h): the registry fed by heartbeats (this
// node's own included), the scheduler's snapshots of them, node loss, and the launcher of
// each node. Kept apart from the job lifecycle in job_manager.cc; same class, same
// thread (the io_context's).
#include <algorithm>

#include "common/logging.h"
#include "daemon/head/job_manager.h"

namespace traintl {

using nlohmann::json;

void JobManager::RefreshSelf() {
  NodeStatus self;
  self.node_id = options_.node_id;
  self.api_address = options_.api_address;
  self.host = options_.host;
  self.role = options_.role;
  self.raft_id = options_.raft_id;
  self.total = options_.node_resources;
  self.num_gpus = options_.num_gpus;
  self.gpus = options_.gpus;
  self.running = agent_->LiveAttempts();
  const NodeStatus* before = registry_.Get(self.node_id);
  if (before != nullptr && before->running != self.running) full_pass_due_ = true;
  registry_.Heartbeat(std::move(self), clock_->Now(), commands::NowMs());
}

void JobManager::RecordVoterAddress(uint64_t raft_id, const std::string& api_address) {
  if (raft_id == 0 || api_address.empty()) return;
  const std::string key = "voter_api:" + std::to_string(raft_id);
  if (store_->GetMeta(key) == api_address) return;
  if (!voter_address_proposed_.insert(key + "=" + api_address).second) return;
  log_->Propose(commands::SetVoterAddress(raft_id, api_address), [](Result<json>) {});
}

void JobManager::StopStaleLocal() {
  // Workers of attempts this head does not run (started by a previous head) must stop:
  // their job restarts from its checkpoint, and two attempts never run at once.
  for (const auto& [job, attempt] : agent_->LiveAttempts()) {
    if (Find(job, attempt) != nullptr) continue;
    if (!stale_stopped_.insert({job, attempt}).second) continue;
    LOG_WARN << "stopping workers of job " << job << " attempt " << attempt
             << ": not an attempt of this head";
    agent_->Stop(job, attempt);
  }
}

std::unique_ptr<NodeClient> JobManager::ClientFor(const std::string& node_id) const {
  if (node_id == options_.node_id) return std::make_unique<LocalNodeClient>(agent_);
  const NodeStatus* n = registry_.Get(node_id);
  if (remote_ == nullptr || n == nullptr || !n->alive) return nullptr;
  return std::make_unique<RemoteNodeClient>(remote_, node_id, n->api_address);
}

void JobManager::StopWorkers(const ActiveAttempt& a, bool urgent) {
  // This node's agent always hears it: ranks it started before a launch failed, or that
  // an earlier placement put here, stop too.
  std::set<std::string> nodes(a.rank_nodes().begin(), a.rank_nodes().end());
  nodes.insert(options_.node_id);
  for (const auto& node : nodes) {
    if (node == options_.node_id) {
      LocalNodeClient(agent_).Stop(a.job_id(), a.attempt(), urgent);
      continue;
    }
    // A LOST node is still told (best effort): it may only be slow.
    const NodeStatus* n = registry_.Get(node);
    if (remote_ != nullptr && n != nullptr)
      RemoteNodeClient(remote_, node, n->api_address).Stop(a.job_id(), a.attempt(), urgent);
  }
}

void JobManager::UsedOn(const std::string& node_id, ResourceMap* used,
                        std::vector<double>* gpu_free) const {
  for (const auto& [id, a] : active_) {
    const double per_gpu = a.per_worker.count("GPU") ? a.per_worker.at("GPU") : 0;
    for (size_t r = 0; r < a.rank_nodes().size(); ++r) {
      // Ranks an elastic attempt went on without hold nothing.
      if (a.rank_nodes()[r] != node_id || !a.tracker.active().count(static_cast<int>(r))) continue;
      for (const auto& [k, v] : a.per_worker) (*used)[k] += v;
      if (gpu_free == nullptr || r >= a.rank_gpus.size()) continue;
      for (int d : a.rank_gpus[r])
        if (d >= 0 && d < static_cast<int>(gpu_free->size()))
          (*gpu_free)[static_cast<size_t>(d)] -= per_gpu < 1 ? per_gpu : 1.0;
    }
  }
}

std::vector<NodeSnapshot> JobManager::Snapshots(SnapshotView view) const {
  std::vector<NodeSnapshot> out;
  for (const auto& [id, n] : registry_.nodes()) {
    if (view == SnapshotView::kAvailableNow && !n.alive) continue;
    NodeSnapshot s;
    s.node_id = id;
    s.host = n.host;
    s.total = n.total;
    s.available = n.total;
    s.gpu_free.assign(static_cast<size_t>(n.num_gpus), 1.0);
    if (view == SnapshotView::kAvailableNow) {
      ResourceMap used;
      UsedOn(id, &used, &s.gpu_free);
      for (const auto& [k, v] : used) s.available[k] -= v;
    }
    out.push_back(std::move(s));
  }
  if (out.empty() && view == SnapshotView::kEverything) {
    // Before the first tick registered this node (a submission right after start).
    NodeSnapshot self;
    self.node_id = options_.node_id;
    self.host = options_.host;
    self.total = options_.node_resources;
    self.available = self.total;
    self.gpu_free.assign(static_cast<size_t>(options_.num_gpus), 1.0);
    out.push_back(std::move(self));
  }
  return out;
}

nlohmann::json JobManager::NodesView() const {
  json nodes = json::array();
  for (const auto& [id, n] : registry_.nodes()) {
    ResourceMap used;
    UsedOn(id, &used, nullptr);
    nodes.push_back({{"node_id", id},
                     {"address", n.api_address},
                     {"role", id == options_.node_id ? "head" : n.role},
                     {"state", n.alive ? "ALIVE" : "LOST"},
                     {"resources_total", n.total},
                     {"resources_used", used},
                     {"gpus", n.gpus},
                     {"last_heartbeat", n.last_heartbeat_ms}});
  }
  return nodes;
}

json JobManager::OnHeartbeat(NodeStatus status) {
  json stop = json::array();
  for (const auto& [job, attempt] : status.running) {
    const ActiveAttempt* a = Find(job, attempt);
    bool placed_here = false;
    if (a != nullptr)
      for (const auto& n : a->rank_nodes()) placed_here = placed_here || n == status.node_id;
    // final: the head does not run the attempt at all (a launch of it that raced this stop
    // is refused); not when it runs elsewhere only, and a rank may still move back here.
    if (!placed_here)
      stop.push_back({{"job_id", job}, {"attempt", attempt}, {"final", a == nullptr}});
  }
  const std::string id = status.node_id;
  RecordVoterAddress(status.raft_id, status.api_address);
  // Workers gone from a node may unblock a restart (HasLiveWorkersOf), other totals may
  // fit other jobs: either asks for a full pass; a steady heartbeat asks for nothing.
  const NodeStatus* before = registry_.Get(id);
  const bool changed =
      before != nullptr && (before->running != status.running || before->total != status.total ||
                            before->num_gpus != status.num_gpus);
  if (registry_.Heartbeat(std::move(status), clock_->Now(), commands::NowMs())) {
    LOG_INFO << "node " << id << " joined (" << registry_.Get(id)->api_address << ")";
    ScheduleTick();
  } else if (changed) {
    full_pass_due_ = true;  // the next periodic tick runs it
  }
  return {{"head", options_.node_id}, {"stop", stop}, {"voters", registry_.VoterAddresses()}};
}

void JobManager::OnNodeLost(const std::string& node_id) {
  LOG_WARN << "node " << node_id << " lost: no heartbeat for " << registry_.loss_timeout().count()
           << " ms";
  std::vector<std::string> ids;
  for (const auto& [job_id, a] : active_) ids.push_back(job_id);
  for (const auto& job_id : ids) {
    auto it = active_.find(job_id);
    if (it != active_.end()) Run(it->second, it->second.tracker.OnNodeLost(node_id));
  }
  ScheduleTick();
}

bool JobManager::IsRankOn(const std::string& job_id, int attempt, int rank,
                          const std::string& node) {
  ActiveAttempt* a = Find(job_id, attempt);
  if (a == nullptr || node.empty()) return true;
  const std::vector<std::string>& nodes = a->tracker.placement().rank_nodes;
  return rank < 0 || static_cast<size_t>(rank) >= nodes.size() ||
         nodes[static_cast<size_t>(rank)] == node;
}

void JobManager::OnRemoteWorkerExit(const WorkerExit& e, const std::string& log_tail) {
  ActiveAttempt* a = Find(e.job_id, e.attempt);
  if (a == nullptr || !a->tracker.IsRemote(e.rank)) return;
  a->remote_tails[e.rank] = log_tail;
  OnWorkerExit(e);
}

}  // namespace traintl
