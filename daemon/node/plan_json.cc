#include "daemon/node/plan_json.h"

namespace traintl {

using nlohmann::json;

json NodeAttemptPlanToJson(const NodeAttemptPlan& p) {
  return {{"job_id", p.job_id},
          {"job_name", p.job_name},
          {"attempt", p.attempt},
          {"world_size", p.world_size},
          {"node_rank", p.node_rank},
          {"world_ranks", p.world_ranks},
          {"rank_gpus", p.rank_gpus},
          {"library_path", p.library_path},
          {"library_sha256", p.library_sha256},
          {"function", p.function},
          {"config", p.config},
          {"checkpoint_dir", p.checkpoint_dir},
          {"trial_dir", p.trial_dir},
          {"master_addr", p.master_addr},
          {"master_port", p.master_port},
          {"collective_timeout_s", p.collective_timeout_s},
          {"use_gpu", p.use_gpu},
          {"datasets", p.datasets},
          {"user_env", p.user_env},
          {"cpus_per_worker", p.cpus_per_worker}};
}

Result<NodeAttemptPlan> NodeAttemptPlanFromJson(const json& j) {
  NodeAttemptPlan p;
  try {
    p.job_id = j.at("job_id").get<std::string>();
    p.job_name = j.at("job_name").get<std::string>();
    p.attempt = j.at("attempt").get<int>();
    p.world_size = j.at("world_size").get<int>();
    p.node_rank = j.at("node_rank").get<int>();
    p.world_ranks = j.at("world_ranks").get<std::vector<int>>();
    p.rank_gpus = j.at("rank_gpus").get<std::vector<std::vector<int>>>();
    p.library_path = j.at("library_path").get<std::string>();
    p.library_sha256 = j.value("library_sha256", std::string());
    p.function = j.at("function").get<std::string>();
    p.config = j.at("config");
    p.checkpoint_dir = j.at("checkpoint_dir").get<std::string>();
    p.trial_dir = j.at("trial_dir").get<std::string>();
    p.master_addr = j.at("master_addr").get<std::string>();
    p.master_port = j.at("master_port").get<int>();
    p.collective_timeout_s = j.at("collective_timeout_s").get<int>();
    p.use_gpu = j.at("use_gpu").get<bool>();
    p.datasets = j.at("datasets");
    p.user_env = j.at("user_env").get<std::map<std::string, std::string>>();
    p.cpus_per_worker = j.at("cpus_per_worker").get<double>();
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("launch plan: ") + e.what());
  }
  if (p.job_id.empty() || p.attempt < 1 || p.world_size < 1 || p.world_ranks.empty() ||
      p.trial_dir.empty() || p.trial_dir[0] != '/')
    return Status::InvalidArgument("launch plan: missing job, attempt, ranks or trial dir");
  for (int r : p.world_ranks)
    if (r < 0 || r >= p.world_size) return Status::InvalidArgument("launch plan: bad rank");
  return p;
}

}  // namespace traintl
