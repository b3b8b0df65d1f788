#include "proto/rank_context.h"

#include <cstdint>

#include "common/json_depth.h"

#include <utility>

namespace traintl {
namespace {

using nlohmann::json;

// Reads an optional field of the expected kind into `out`; a wrong kind is an error.
Status GetString(const json& j, const char* key, bool required, std::string* out) {
  auto it = j.find(key);
  if (it == j.end() || (it->is_null() && !required)) {
    if (required) return Status::InvalidArgument(std::string("context: missing \"") + key + "\"");
    return Status::Ok();
  }
  if (!it->is_string()) {
    return Status::InvalidArgument(std::string("context: \"") + key + "\" must be a string");
  }
  *out = it->get<std::string>();
  return Status::Ok();
}

Status GetInt(const json& j, const char* key, bool required, int min_value, int* out) {
  auto it = j.find(key);
  if (it == j.end() || (it->is_null() && !required)) {
    if (required) return Status::InvalidArgument(std::string("context: missing \"") + key + "\"");
    return Status::Ok();
  }
  if (!it->is_number_integer() || it->get<long long>() < min_value ||
      it->get<long long>() > 0x7fffffff) {
    return Status::InvalidArgument(std::string("context: \"") + key +
                                   "\" must be an integer >= " + std::to_string(min_value));
  }
  *out = it->get<int>();
  return Status::Ok();
}

}  // namespace

Result<RankContext> ParseRankContext(const std::string& text) {
  json j = ParseJsonBounded(text);
  if (j.is_discarded()) return Status::InvalidArgument("context: not valid JSON");
  if (!j.is_object()) return Status::InvalidArgument("context: not a JSON object");

  RankContext c;
  TRAINTL_RETURN_IF_ERROR(GetString(j, "job_id", false, &c.job_id));
  TRAINTL_RETURN_IF_ERROR(GetString(j, "job_name", false, &c.job_name));
  TRAINTL_RETURN_IF_ERROR(GetInt(j, "attempt", false, 1, &c.attempt));
  TRAINTL_RETURN_IF_ERROR(GetInt(j, "world_rank", true, 0, &c.world_rank));
  TRAINTL_RETURN_IF_ERROR(GetInt(j, "world_size", true, 1, &c.world_size));
  TRAINTL_RETURN_IF_ERROR(GetInt(j, "local_rank", false, 0, &c.local_rank));
  TRAINTL_RETURN_IF_ERROR(GetInt(j, "local_world_size", false, 1, &c.local_world_size));
  TRAINTL_RETURN_IF_ERROR(GetInt(j, "node_rank", false, 0, &c.node_rank));
  TRAINTL_RETURN_IF_ERROR(GetString(j, "entry_kind", false, &c.entry_kind));
  if (c.entry_kind != "library" && c.entry_kind != "python" && c.entry_kind != "command") {
    return Status::InvalidArgument("context: unknown \"entry_kind\" \"" + c.entry_kind + "\"");
  }
  TRAINTL_RETURN_IF_ERROR(GetString(j, "library", c.entry_kind == "library", &c.library));
  TRAINTL_RETURN_IF_ERROR(GetString(j, "python", c.entry_kind == "python", &c.python));
  if (auto cmd = j.find("command"); cmd != j.end() && !cmd->is_null()) {
    if (!cmd->is_array()) return Status::InvalidArgument("context: \"command\" must be an array");
    for (const auto& arg : *cmd) {
      if (!arg.is_string())
        return Status::InvalidArgument("context: \"command\" must hold strings");
      c.command.push_back(arg.get<std::string>());
    }
  }
  if (c.entry_kind == "command" && (c.command.empty() || c.command[0].empty())) {
    return Status::InvalidArgument("context: \"command\" names no program");
  }
  TRAINTL_RETURN_IF_ERROR(GetString(j, "working_dir", false, &c.working_dir));
  TRAINTL_RETURN_IF_ERROR(GetString(j, "framework", false, &c.framework));
  if (auto tf = j.find("tf_config"); tf != j.end() && !tf->is_null()) {
    if (!tf->is_object())
      return Status::InvalidArgument("context: \"tf_config\" must be an object");
    c.tf_config = *tf;
  }
  TRAINTL_RETURN_IF_ERROR(GetString(j, "library_name", false, &c.library_name));
  TRAINTL_RETURN_IF_ERROR(GetString(j, "function", false, &c.function));
  std::string checkpoint;
  TRAINTL_RETURN_IF_ERROR(GetString(j, "checkpoint_dir", false, &checkpoint));
  if (!checkpoint.empty()) c.checkpoint_dir = checkpoint;
  TRAINTL_RETURN_IF_ERROR(GetString(j, "trial_dir", false, &c.trial_dir));
  TRAINTL_RETURN_IF_ERROR(GetString(j, "data_index_dir", false, &c.data_index_dir));
  TRAINTL_RETURN_IF_ERROR(GetString(j, "staging_dir", true, &c.staging_dir));
  TRAINTL_RETURN_IF_ERROR(GetString(j, "master_addr", false, &c.master_addr));
  TRAINTL_RETURN_IF_ERROR(GetInt(j, "master_port", false, 0, &c.master_port));
  TRAINTL_RETURN_IF_ERROR(GetInt(j, "collective_timeout_s", false, 0, &c.collective_timeout_s));
  TRAINTL_RETURN_IF_ERROR(GetInt(j, "library_load_timeout_s", false, 1, &c.library_load_timeout_s));
  if (auto hold = j.find("hold_reports"); hold != j.end() && !hold->is_null()) {
    if (!hold->is_boolean())
      return Status::InvalidArgument("context: \"hold_reports\" must be a boolean");
    c.hold_reports = hold->get<bool>();
  }
  if (auto peer = j.find("peer_recovery"); peer != j.end() && !peer->is_null()) {
    if (!peer->is_boolean())
      return Status::InvalidArgument("context: \"peer_recovery\" must be a boolean");
    c.peer_recovery = peer->get<bool>();
  }
  TRAINTL_RETURN_IF_ERROR(GetInt(j, "regroup_generation", false, 0, &c.regroup_generation));
  if (auto g = j.find("group_ranks"); g != j.end() && !g->is_null()) {
    if (!g->is_array())
      return Status::InvalidArgument("context: \"group_ranks\" must be an array of ranks");
    for (const auto& r : *g) {
      if (!r.is_number_integer() || r.get<int64_t>() < 0 || r.get<int64_t>() > INT32_MAX)
        return Status::InvalidArgument("context: \"group_ranks\" must be an array of ranks");
      c.group_ranks.push_back(r.get<int>());
    }
  }
  auto gpu = j.find("use_gpu");
  if (gpu != j.end() && !gpu->is_null()) {
    if (!gpu->is_boolean())
      return Status::InvalidArgument("context: \"use_gpu\" must be a boolean");
    c.use_gpu = gpu->get<bool>();
  }

  auto lease = j.find("lease");
  if (lease != j.end() && !lease->is_null()) {
    if (!lease->is_object()) return Status::InvalidArgument("context: \"lease\" must be an object");
    TRAINTL_RETURN_IF_ERROR(GetInt(*lease, "fd", true, -1, &c.lease_fd));
    TRAINTL_RETURN_IF_ERROR(GetInt(*lease, "ms", true, 0, &c.lease_ms));
    TRAINTL_RETURN_IF_ERROR(GetString(*lease, "cgroup_kill", false, &c.cgroup_kill));
    if (c.lease_fd < 0 || c.lease_ms <= 0) {
      return Status::InvalidArgument("context: \"lease\" needs an fd >= 0 and ms > 0");
    }
  }

  if (c.world_rank >= c.world_size) {
    return Status::InvalidArgument("context: world_rank " + std::to_string(c.world_rank) +
                                   " is not below world_size " + std::to_string(c.world_size));
  }
  if (c.entry_kind == "library" && c.library.empty())
    return Status::InvalidArgument("context: \"library\" is empty");
  if (c.entry_kind == "python" && c.python.empty())
    return Status::InvalidArgument("context: \"python\" is empty");
  if (c.staging_dir.empty()) return Status::InvalidArgument("context: \"staging_dir\" is empty");
  auto config = j.find("config");
  if (config != j.end() && !config->is_null() && !config->is_object()) {
    return Status::InvalidArgument("context: \"config\" must be an object");
  }
  if (config != j.end() && config->is_object()) c.config = *config;
  auto datasets = j.find("datasets");
  if (datasets != j.end() && !datasets->is_null() && !datasets->is_object()) {
    return Status::InvalidArgument("context: \"datasets\" must be an object");
  }
  if (datasets != j.end() && datasets->is_object()) c.datasets = *datasets;
  c.json = std::move(j);
  return c;
}

nlohmann::json RankContextToJson(const RankContext& c) {
  json lease = nullptr;
  if (c.lease_fd >= 0 && c.lease_ms > 0) {
    lease = {{"fd", c.lease_fd},
             {"ms", c.lease_ms},
             {"cgroup_kill", c.cgroup_kill.empty() ? json(nullptr) : json(c.cgroup_kill)}};
  }
  return {{"job_id", c.job_id},
          {"job_name", c.job_name},
          {"attempt", c.attempt},
          {"world_rank", c.world_rank},
          {"world_size", c.world_size},
          {"local_rank", c.local_rank},
          {"local_world_size", c.local_world_size},
          {"node_rank", c.node_rank},
          {"entry_kind", c.entry_kind},
          {"library", c.library},
          {"library_name", c.library_name},
          {"function", c.function},
          {"python", c.python},
          {"command", c.command},
          {"working_dir", c.working_dir},
          {"framework", c.framework},
          {"tf_config", c.tf_config},
          {"config", c.config},
          {"checkpoint_dir", c.checkpoint_dir ? json(*c.checkpoint_dir) : json(nullptr)},
          {"trial_dir", c.trial_dir},
          {"data_index_dir", c.data_index_dir},
          {"staging_dir", c.staging_dir},
          {"master_addr", c.master_addr},
          {"master_port", c.master_port},
          {"collective_timeout_s", c.collective_timeout_s},
          {"library_load_timeout_s", c.library_load_timeout_s},
          {"use_gpu", c.use_gpu},
          {"hold_reports", c.hold_reports},
          {"peer_recovery", c.peer_recovery},
          {"regroup_generation", c.regroup_generation},
          {"group_ranks", c.group_ranks},
          {"datasets", c.datasets},
          {"lease", lease}};
}

std::map<std::string, std::string> RankEnvironment(const RankContext& c) {
  return {{"TRAINTL_JOB_ID", c.job_id},
          {"TRAINTL_JOB_NAME", c.job_name},
          {"TRAINTL_ATTEMPT", std::to_string(c.attempt)},
          {"TRAINTL_WORLD_RANK", std::to_string(c.world_rank)},
          {"TRAINTL_WORLD_SIZE", std::to_string(c.world_size)},
          {"TRAINTL_LOCAL_RANK", std::to_string(c.local_rank)},
          {"TRAINTL_LOCAL_WORLD_SIZE", std::to_string(c.local_world_size)},
          {"TRAINTL_NODE_RANK", std::to_string(c.node_rank)},
          {"TRAINTL_TRIAL_DIR", c.trial_dir},
          {"TRAINTL_MASTER_ADDR", c.master_addr},
          {"TRAINTL_MASTER_PORT", std::to_string(c.master_port)}};
}

std::map<std::string, std::string> LauncherEnvironment(const RankContext& c) {
  std::map<std::string, std::string> env = {
      {"MASTER_ADDR", c.master_addr},
      {"MASTER_PORT", std::to_string(c.master_port)},
      {"RANK", std::to_string(c.world_rank)},
      {"WORLD_SIZE", std::to_string(c.world_size)},
      {"LOCAL_RANK", std::to_string(c.local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(c.local_world_size)},
      {"GROUP_RANK", std::to_string(c.node_rank)},
      {"ROLE_RANK", std::to_string(c.world_rank)},
      {"ROLE_WORLD_SIZE", std::to_string(c.world_size)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(c.attempt - 1)},
      {"TORCHELASTIC_RUN_ID", c.job_id}};
  return env;
}

std::map<std::string, std::string> FrameworkEnvironment(const RankContext& c) {
  std::map<std::string, std::string> env;
  if (c.framework == "tensorflow" && c.tf_config.is_object()) {
    env["TF_CONFIG"] = c.tf_config.dump();
  } else if (c.framework == "xgboost") {
    env["DMLC_TRACKER_URI"] = c.master_addr;
    env["DMLC_TRACKER_PORT"] = std::to_string(c.master_port);
    env["DMLC_NUM_WORKER"] = std::to_string(c.world_size);
    env["DMLC_TASK_ID"] = std::to_string(c.world_rank);
    if (c.collective_timeout_s > 0) {
      env["rabit_timeout"] = "1";
      env["rabit_timeout_sec"] = std::to_string(c.collective_timeout_s);
    }
  }
  return env;
}

}  // namespace traintl
