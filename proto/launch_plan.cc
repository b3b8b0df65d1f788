#include "proto/launch_plan.h"

#include "proto/json_fields.h"

namespace traintl {

using nlohmann::json;
using proto_internal::FieldError;
using proto_internal::Fields;

json NodeAttemptPlanToJson(const NodeAttemptPlan& p) {
  json out{{"job_id", p.job_id},
           {"job_name", p.job_name},
           {"attempt", p.attempt},
           {"world_size", p.world_size},
           {"node_rank", p.node_rank},
           {"world_ranks", p.world_ranks},
           {"rank_gpus", p.rank_gpus},
           {"library_path", p.library_path},
           {"library_sha256", p.library_sha256},
           {"library_name", p.library_name},
           {"function", p.function},
           {"config", p.config},
           {"restored_from", p.restored_from},
           {"trial_dir", p.trial_dir},
           {"master_addr", p.master_addr},
           {"master_port", p.master_port},
           {"collective_timeout_s", p.collective_timeout_s},
           {"use_gpu", p.use_gpu},
           {"datasets", p.datasets},
           {"user_env", p.user_env},
           {"cpus_per_worker", p.cpus_per_worker}};
  if (p.hold_reports) out["hold_reports"] = true;
  if (p.trial_dir_as_worker) out["trial_dir_as_worker"] = true;
  if (p.peer_recovery) out["peer_recovery"] = true;
  if (p.regroup_generation > 0) out["regroup_generation"] = p.regroup_generation;
  if (!p.local_ranks.empty()) {
    out["local_ranks"] = p.local_ranks;
    out["local_world_size"] = p.local_world_size;
  }
  if (!p.group_ranks.empty()) out["group_ranks"] = p.group_ranks;
  // Only for the newer kinds, so that a library plan reads as it always did.
  if (p.entry_kind != "library") {
    out["entry_kind"] = p.entry_kind;
    out["python"] = p.python;
    out["command"] = p.command;
  }
  if (!p.framework.empty()) {
    out["framework"] = p.framework;
    out["rank_hosts"] = p.rank_hosts;
    out["worker_port_base"] = p.worker_port_base;
  }
  return out;
}

Result<NodeAttemptPlan> NodeAttemptPlanFromJson(const json& j) {
  NodeAttemptPlan p;
  try {
    Fields f(j, "");
    f.Req("job_id", &p.job_id);
    f.Req("job_name", &p.job_name);
    f.Req("attempt", &p.attempt);
    f.Req("world_size", &p.world_size);
    f.Req("node_rank", &p.node_rank);
    f.Req("world_ranks", &p.world_ranks);
    f.Req("rank_gpus", &p.rank_gpus);
    f.Req("library_path", &p.library_path);
    f.Opt("library_sha256", &p.library_sha256);
    f.Opt("library_name", &p.library_name);
    f.Req("function", &p.function);
    p.config = f.At("config");
    // "checkpoint_dir" in plans of releases before the name was unified.
    f.Opt("checkpoint_dir", &p.restored_from);
    f.Opt("restored_from", &p.restored_from);
    f.Req("trial_dir", &p.trial_dir);
    f.Req("master_addr", &p.master_addr);
    f.Req("master_port", &p.master_port);
    f.Req("collective_timeout_s", &p.collective_timeout_s);
    f.Req("use_gpu", &p.use_gpu);
    p.datasets = f.At("datasets");
    f.Req("user_env", &p.user_env);
    f.Req("cpus_per_worker", &p.cpus_per_worker);
    f.Opt("entry_kind", &p.entry_kind);
    f.Opt("python", &p.python);
    f.Opt("command", &p.command);
    f.Opt("framework", &p.framework);
    f.Opt("rank_hosts", &p.rank_hosts);
    f.Opt("worker_port_base", &p.worker_port_base);
    f.Opt("hold_reports", &p.hold_reports);
    f.Opt("trial_dir_as_worker", &p.trial_dir_as_worker);
    f.Opt("peer_recovery", &p.peer_recovery);
    f.Opt("regroup_generation", &p.regroup_generation);
    f.Opt("local_ranks", &p.local_ranks);
    f.Opt("local_world_size", &p.local_world_size);
    f.Opt("group_ranks", &p.group_ranks);
    for (int r : p.group_ranks)
      if (r < 0 || r >= p.world_size)
        throw FieldError(f.Name("group_ranks") + "rank " + std::to_string(r) +
                         " outside the world");
    if (p.regroup_generation < 0) throw FieldError(f.Name("regroup_generation") + "negative");
    if (!p.local_ranks.empty()) {
      if (p.local_ranks.size() != p.world_ranks.size())
        throw FieldError(f.Name("local_ranks") + "must give one local rank per world rank");
      for (int l : p.local_ranks)
        if (l < 0 || l >= p.local_world_size)
          throw FieldError(f.Name("local_ranks") + "local rank " + std::to_string(l) +
                           " outside local_world_size");
    }
    if (p.entry_kind != "library" && p.entry_kind != "python" && p.entry_kind != "command")
      throw FieldError(f.Name("entry_kind") + "unknown kind \"" + p.entry_kind + "\"");
    if (p.entry_kind == "command" && p.command.empty())
      throw FieldError(f.Name("command") + "empty");
    if (p.framework == "tensorflow") {
      if (static_cast<int>(p.rank_hosts.size()) != p.world_size)
        throw FieldError(f.Name("rank_hosts") + "must name every rank's host");
      if (p.worker_port_base < 1 || p.worker_port_base + p.world_size > 65536)
        throw FieldError(f.Name("worker_port_base") + "out of range");
    }
    if (p.job_id.empty()) throw FieldError(f.Name("job_id") + "empty");
    if (p.attempt < 1) throw FieldError(f.Name("attempt") + "must be >= 1");
    if (p.world_size < 1) throw FieldError(f.Name("world_size") + "must be >= 1");
    if (p.world_ranks.empty()) throw FieldError(f.Name("world_ranks") + "empty");
    for (int r : p.world_ranks)
      if (r < 0 || r >= p.world_size)
        throw FieldError(f.Name("world_ranks") + "rank " + std::to_string(r) +
                         " outside the world");
    if (p.trial_dir.empty() || p.trial_dir[0] != '/')
      throw FieldError(f.Name("trial_dir") + "must be an absolute path");
  } catch (const FieldError& e) {
    return Status::InvalidArgument(std::string("launch plan: ") + e.what());
  }
  return p;
}

}  // namespace traintl
