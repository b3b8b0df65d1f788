// RankContext: everything one rank is told about itself - the per-rank context file the
// agent writes and traintl-worker reads (docs/WORKER_PROTOCOL.md, "Context file"), and the
// TRAINTL_* environment derived from it. One struct and one codec for both sides, so the
// agent and the worker cannot disagree on a field or a variable.
//
// Thread-safety: a value type and free functions.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace traintl {

struct RankContext {
  std::string job_id;
  std::string job_name;
  int attempt = 1;
  int world_rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  // What the rank runs ("entry_kind", optional): "library" (the default), "python" or
  // "command" (DESIGN §8).
  std::string entry_kind = "library";
  // Absolute path of the training library; required for "library", unused otherwise.
  std::string library;
  // The library as the user submitted it (entrypoint.library), for messages: `library`
  // may be a content-addressed copy. "library_name", optional; "" = `library`.
  std::string library_name;
  // The entry point's name; empty = the only one the library exports.
  std::string function;
  // "python": "module:function"; "command": the program and its arguments.
  std::string python;
  std::vector<std::string> command;
  // The job's unpacked working_dir (absolute; "" = none): on sys.path and the process's
  // current directory for "python" and "command".
  std::string working_dir;
  // The job's framework ("" | "torch" | "tensorflow") and, for "tensorflow", the TF_CONFIG
  // object ({"cluster": {"worker": ["host:port", ...]}, "task": {...}}); null otherwise.
  std::string framework;
  nlohmann::json tf_config;
  // The checkpoint get_checkpoint() returns; none on a fresh start.
  std::optional<std::string> checkpoint_dir;
  std::string trial_dir;
  // Where the dataset reader keeps the row index that the ranks and jobs of the node share
  // ("data_index_dir", optional; "" = <trial_dir>/.data_index; index_cache.h).
  std::string data_index_dir;
  // Where report() copies checkpoint files: <staging_dir>/seq_<K>/rank_<R>/.
  std::string staging_dir;
  std::string master_addr;
  int master_port = 0;
  int collective_timeout_s = 0;
  bool use_gpu = false;
  // Every report() waits until the head acknowledges it, which for a tuning trial is
  // after the scheduler's decision on that result ("hold_reports", optional; see
  // NodeAttemptPlan::hold_reports). Default false.
  bool hold_reports = false;
  // The job recovers from a rank's death without a restart (failure_config.peer_recovery,
  // "peer_recovery", optional): survivors keep their processes and state, and a replacement
  // rank takes the state of a survivor (traintl/torch.h, run_steps). Default false.
  bool peer_recovery = false;
  // Non-zero for a replacement rank: it joins the survivors' collective group of this
  // generation instead of the attempt's first one ("regroup_generation", optional).
  // Default 0.
  int regroup_generation = 0;
  // The job's ranks in that group, in group order, for an elastic job's rank that joins a
  // group of another size ("group_ranks", optional). Empty: every rank. Default empty.
  std::vector<int> group_ranks;
  // How long loading the library may take before the attempt fails (a hung file system).
  // "library_load_timeout_s", optional. Default 60.
  int library_load_timeout_s = 60;
  // Fencing ("lease": {"fd", "ms", "cgroup_kill"}; common/lease_clock.h): the inherited
  // descriptor of the daemon's lease clock, the lease, and the cgroup.kill file of this
  // worker's cgroup ("" without cgroups). fd -1 / ms 0: no lease.
  int lease_fd = -1;
  int lease_ms = 0;
  std::string cgroup_kill;
  // The entry point's train_loop_config and the job's datasets ({name: {uri, format,
  // split}}), as the library reads them.
  nlohmann::json config = nlohmann::json::object();
  nlohmann::json datasets = nlohmann::json::object();
  // The whole object as parsed, as get_context_json() hands it to the library (fields a
  // newer agent added included).
  nlohmann::json json;
};

// The context file's JSON object (what the agent writes).
nlohmann::json RankContextToJson(const RankContext& c);

// Parses and validates the context file's text. Missing optional fields take the defaults
// above; "world_rank", "world_size" and "staging_dir" are required, and "library",
// "python" or "command" as the entry kind needs.
Result<RankContext> ParseRankContext(const std::string& text);

// The TRAINTL_* variables a rank runs with (TRAINTL_JOB_ID, TRAINTL_WORLD_RANK,
// TRAINTL_WORLD_SIZE, ...): the agent puts them into the worker's environment, and the
// worker sets them again in case it was started otherwise.
std::map<std::string, std::string> RankEnvironment(const RankContext& c);

// The launcher conventions python and command ranks get on top (library ranks do not: a
// C++ library reads its context, and nothing the user set is overridden for it): torchrun's
// MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
// ROLE_RANK, ROLE_WORLD_SIZE, TORCHELASTIC_RESTART_COUNT (attempt - 1), TORCHELASTIC_RUN_ID
// (the job id).
std::map<std::string, std::string> LauncherEnvironment(const RankContext& c);

// The framework's environment every rank of such a job gets, whatever its entry kind:
// "tensorflow": TF_CONFIG; "xgboost": what XGBoost's rabit collective reads to join the
// attempt's tracker (DMLC_TRACKER_URI and DMLC_TRACKER_PORT: the tracker runs beside rank
// 0 on master_addr:master_port; DMLC_NUM_WORKER; DMLC_TASK_ID, the world rank, which
// traintl's tracker makes the XGBoost rank; rabit_timeout / rabit_timeout_sec from
// collective_timeout_s, so that a dead peer fails a collective instead of hanging it).
// Empty for other frameworks.
std::map<std::string, std::string> FrameworkEnvironment(const RankContext& c);

}  // namespace traintl
