// WorkerContext: the per-rank context file the agent writes for traintl-worker
// (docs/WORKER_PROTOCOL.md, "Context file"), parsed and checked.
//
// Thread-safety: a value type; no internal synchronization.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace traintl {
namespace worker {

struct WorkerContext {
  std::string job_id;
  std::string job_name;
  int attempt = 1;
  int world_rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  // Absolute path of the training library.
  std::string library;
  // The entry point's name; empty = the only one the library exports.
  std::string function;
  // The checkpoint get_checkpoint() returns; none on a fresh start.
  std::optional<std::string> checkpoint_dir;
  std::string trial_dir;
  // Where report() copies checkpoint files: <staging_dir>/seq_<K>/rank_<R>/.
  std::string staging_dir;
  std::string master_addr;
  int master_port = 0;
  int collective_timeout_s = 0;
  bool use_gpu = false;
  // How long loading the library may take before the attempt fails (a hung file system).
  // "library_load_timeout_s", optional. Default 60.
  int library_load_timeout_s = 60;
  // Fencing ("lease": {"fd", "ms", "cgroup_kill"}; common/lease_clock.h): the inherited
  // descriptor of the daemon's lease clock, the lease, and the cgroup.kill file of this
  // worker's cgroup ("" without cgroups). fd -1 / ms 0: no lease.
  int lease_fd = -1;
  int lease_ms = 0;
  std::string cgroup_kill;
  // The whole object, as get_context_json() hands it to the library.
  nlohmann::json json;
};

// Parses and validates the context file's text. Missing optional fields take the defaults
// above; "library", "world_rank", "world_size" and "staging_dir" are required.
Result<WorkerContext> ParseWorkerContext(const std::string& text);

}  // namespace worker
}  // namespace traintl
