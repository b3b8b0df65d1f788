#include "daemon/head/launch_plans.h"

#include <algorithm>

#include <map>

namespace traintl {

NodeAttemptPlan BasePlan(const JobRecord& job, const JobSpec& spec, const AttemptBasics& b) {
  NodeAttemptPlan base;
  base.job_id = job.id;
  base.job_name = job.name;
  base.attempt = b.attempt;
  base.world_size = b.world_size;
  base.library_path = b.library_path;
  base.library_sha256 = job.library_sha256;
  base.library_name = spec.library;
  base.function = spec.function;
  base.entry_kind = EntrypointKindName(spec.entry_kind);
  base.python = spec.python;
  base.command = spec.command;
  base.framework = spec.framework;
  if (spec.entry_kind != EntrypointKind::kLibrary) base.library_name = spec.working_dir;
  base.config = spec.train_loop_config;
  base.restored_from = b.restored_from;
  base.trial_dir = job.trial_dir;
  const std::string& storage = b.default_storage_path;
  base.trial_dir_as_worker =
      !storage.empty() && job.trial_dir.compare(0, storage.size() + 1, storage + "/") != 0;
  base.master_addr = b.master_addr;
  base.master_port = 0;
  base.collective_timeout_s = b.collective_timeout_s;
  if (spec.framework == "tensorflow") {
    base.rank_hosts = b.rank_hosts;
    base.worker_port_base = b.worker_port_base;
  }
  base.use_gpu = spec.use_gpu;
  // An elastic job goes on through the same regroups as peer recovery.
  base.peer_recovery =
      spec.peer_recovery || (spec.elastic() && spec.entry_kind != EntrypointKind::kCommand);
  nlohmann::json datasets = nlohmann::json::object();
  for (const auto& [name, d] : spec.datasets) {
    datasets[name] = {{"uri", d.uri}, {"format", d.format}, {"split", d.split}};
    // The worker reads inline items from memory (worker/data/dataset_service.h).
    if (d.items.is_array()) datasets[name]["items"] = d.items;
  }
  base.datasets = std::move(datasets);
  base.user_env = spec.env;
  auto cpu = spec.resources_per_worker.find("CPU");
  base.cpus_per_worker = cpu == spec.resources_per_worker.end() ? 1 : cpu->second;
  return base;
}

int NextWorkerPortBase(int previous_end, int world_size) {
  int base = previous_end < kWorkerPortLow ? kWorkerPortLow : previous_end;
  if (base + world_size > kWorkerPortHigh) base = kWorkerPortLow;
  return base;
}

std::vector<std::pair<std::string, NodeAttemptPlan>> NodePlans(
    const NodeAttemptPlan& base, const std::vector<std::string>& rank_nodes,
    const std::vector<std::vector<int>>& rank_gpus) {
  std::vector<std::pair<std::string, NodeAttemptPlan>> plans;
  std::map<std::string, size_t> index;  // node -> its place in `plans`
  for (size_t r = 0; r < rank_nodes.size(); ++r) {
    const std::string& node = rank_nodes[r];
    auto [it, added] = index.emplace(node, plans.size());
    if (added) {
      plans.emplace_back(node, base);
      plans.back().second.node_rank = static_cast<int>(plans.size()) - 1;
    }
    NodeAttemptPlan& plan = plans[it->second].second;
    plan.world_ranks.push_back(static_cast<int>(r));
    plan.rank_gpus.push_back(r < rank_gpus.size() ? rank_gpus[r] : std::vector<int>{});
  }
  return plans;
}

NodeAttemptPlan ReplacementPlan(const NodeAttemptPlan& node_plan, int rank, int master_port,
                                int generation) {
  NodeAttemptPlan plan = node_plan;
  const auto& ranks = node_plan.world_ranks;
  const auto at = std::find(ranks.begin(), ranks.end(), rank);
  plan.world_ranks = {rank};
  plan.local_ranks = {static_cast<int>(at - ranks.begin())};
  plan.local_world_size = static_cast<int>(ranks.size());
  plan.master_port = master_port;
  plan.regroup_generation = generation;
  return plan;
}

}  // namespace traintl
