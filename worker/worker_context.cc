#include "worker/worker_context.h"

#include "common/json_depth.h"

#include <utility>

namespace traintl {
namespace worker {
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

Result<WorkerContext> ParseWorkerContext(const std::string& text) {
  json j = ParseJsonBounded(text);
  if (j.is_discarded()) return Status::InvalidArgument("context: not valid JSON");
  if (!j.is_object()) return Status::InvalidArgument("context: not a JSON object");

  WorkerContext c;
  TRAINTL_RETURN_IF_ERROR(GetString(j, "job_id", false, &c.job_id));
  TRAINTL_RETURN_IF_ERROR(GetString(j, "job_name", false, &c.job_name));
  TRAINTL_RETURN_IF_ERROR(GetInt(j, "attempt", false, 1, &c.attempt));
  TRAINTL_RETURN_IF_ERROR(GetInt(j, "world_rank", true, 0, &c.world_rank));
  TRAINTL_RETURN_IF_ERROR(GetInt(j, "world_size", true, 1, &c.world_size));
  TRAINTL_RETURN_IF_ERROR(GetInt(j, "local_rank", false, 0, &c.local_rank));
  TRAINTL_RETURN_IF_ERROR(GetInt(j, "local_world_size", false, 1, &c.local_world_size));
  TRAINTL_RETURN_IF_ERROR(GetInt(j, "node_rank", false, 0, &c.node_rank));
  TRAINTL_RETURN_IF_ERROR(GetString(j, "library", true, &c.library));
  TRAINTL_RETURN_IF_ERROR(GetString(j, "function", false, &c.function));
  std::string checkpoint;
  TRAINTL_RETURN_IF_ERROR(GetString(j, "checkpoint_dir", false, &checkpoint));
  if (!checkpoint.empty()) c.checkpoint_dir = checkpoint;
  TRAINTL_RETURN_IF_ERROR(GetString(j, "trial_dir", false, &c.trial_dir));
  TRAINTL_RETURN_IF_ERROR(GetString(j, "staging_dir", true, &c.staging_dir));
  TRAINTL_RETURN_IF_ERROR(GetString(j, "master_addr", false, &c.master_addr));
  TRAINTL_RETURN_IF_ERROR(GetInt(j, "master_port", false, 0, &c.master_port));
  TRAINTL_RETURN_IF_ERROR(GetInt(j, "collective_timeout_s", false, 0, &c.collective_timeout_s));
  TRAINTL_RETURN_IF_ERROR(GetInt(j, "library_load_timeout_s", false, 1, &c.library_load_timeout_s));
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
  if (c.library.empty()) return Status::InvalidArgument("context: \"library\" is empty");
  if (c.staging_dir.empty()) return Status::InvalidArgument("context: \"staging_dir\" is empty");
  auto config = j.find("config");
  if (config != j.end() && !config->is_null() && !config->is_object()) {
    return Status::InvalidArgument("context: \"config\" must be an object");
  }
  c.json = std::move(j);
  return c;
}

}  // namespace worker
}  // namespace traintl
