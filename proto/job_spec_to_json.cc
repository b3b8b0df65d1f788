// JobSpecToJson (job_spec.h): the canonical JSON of a validated spec.
#include "proto/job_spec.h"

#include <cmath>
#include <cstdint>
#include <string>

namespace traintl {

using json = nlohmann::json;

nlohmann::json JobSpecToJson(const JobSpec& spec) {
  // The backoff keys only when set: a spec stored by this version stays readable by one
  // that does not know them.
  json failure_config = {{"max_failures", spec.max_failures}};
  if (spec.restart_backoff_s != kDefaultRestartBackoffS)
    failure_config["restart_backoff_s"] = spec.restart_backoff_s;
  if (spec.max_restart_backoff_s != kDefaultMaxRestartBackoffS)
    failure_config["max_restart_backoff_s"] = spec.max_restart_backoff_s;
  if (spec.peer_recovery) failure_config["peer_recovery"] = true;
  auto or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  auto amount = [](double x) {
    if (x == std::floor(x) && x >= 0 && x < 9.0e18) return json(static_cast<std::uint64_t>(x));
    return json(x);
  };
  json resources = json::object();
  for (const auto& [name, value] : spec.resources_per_worker) resources[name] = amount(value);
  json datasets = json::object();
  for (const auto& [name, d] : spec.datasets) {
    if (d.items.is_array()) {
      datasets[name] = {{"items", d.items}, {"format", d.format}, {"split", d.split}};
    } else {
      datasets[name] = {{"uri", d.uri}, {"format", or_null(d.format)}, {"split", d.split}};
    }
  }
  json env = json::object();
  for (const auto& [k, v] : spec.env) env[k] = v;
  json entrypoint;
  switch (spec.entry_kind) {
    case EntrypointKind::kLibrary:
      entrypoint = {{"library", spec.library}, {"function", or_null(spec.function)}};
      break;
    case EntrypointKind::kPython:
      entrypoint = {{"python", spec.python}};
      break;
    case EntrypointKind::kCommand:
      entrypoint = {{"command", spec.command}};
      break;
  }
  if (spec.entry_kind != EntrypointKind::kLibrary) {
    entrypoint["working_dir"] = or_null(spec.working_dir);
    if (!spec.excludes.empty()) entrypoint["excludes"] = spec.excludes;
  }
  json out{
      {"name", spec.name},
      {"entrypoint", std::move(entrypoint)},
      {"train_loop_config", spec.train_loop_config},
      {"scaling_config",
       {{"num_workers", spec.elastic() ? json{{"min", spec.min_workers}, {"max", spec.num_workers}}
                                       : json(spec.num_workers)},
        {"use_gpu", spec.use_gpu},
        {"resources_per_worker", resources},
        {"placement_strategy", PlacementStrategyName(spec.placement_strategy)}}},
      {"run_config",
       {{"storage_path", or_null(spec.storage_path)},
        {"checkpoint_config",
         {{"num_to_keep", spec.num_to_keep > 0 ? json(spec.num_to_keep) : json(nullptr)},
          {"checkpoint_score_attribute", or_null(spec.checkpoint_score_attribute)},
          {"checkpoint_score_order", spec.checkpoint_score_max ? "max" : "min"}}},
        {"failure_config", failure_config}}},
      {"datasets", datasets},
      {"env", env},
      {"priority", spec.priority},
      {"resume_from_checkpoint", or_null(spec.resume_from_checkpoint)},
  };
  // Only when set, so that the canonical form of a spec without it is what it always was.
  if (!spec.framework.empty()) out["framework"] = spec.framework;
  if (spec.time_limit_s > 0) out["run_config"]["time_limit_s"] = spec.time_limit_s;
  return out;
}

}  // namespace traintl
