#include "proto/job_definition.h"

#include <map>
#include <string>
#include <utility>

#include "proto/json_fields.h"

namespace traintl {
namespace {

using nlohmann::json;
using proto_internal::FieldError;
using proto_internal::Fields;

void Take(const Fields& f, JobSpec* s) {
  f.Req("name", &s->name);
  f.Req("priority", &s->priority);
  Fields ep = f.Object("entrypoint");
  std::string kind = "library";
  ep.Opt("kind", &kind);
  if (kind == "library") {
    ep.Req("library", &s->library);
    ep.Req("function", &s->function);
  } else if (kind == "python") {
    s->entry_kind = EntrypointKind::kPython;
    ep.Req("python", &s->python);
  } else if (kind == "command") {
    s->entry_kind = EntrypointKind::kCommand;
    ep.Req("command", &s->command);
    if (s->command.empty()) throw FieldError(ep.Name("command") + "must not be empty");
  } else {
    throw FieldError(ep.Name("kind") + "unknown entry point kind \"" + kind + "\"");
  }
  ep.Opt("working_dir", &s->working_dir);
  ep.Opt("excludes", &s->excludes);
  f.Opt("framework", &s->framework);
  s->train_loop_config = f.At("train_loop_config");
  if (!s->train_loop_config.is_object())
    throw FieldError(f.Name("train_loop_config") + "must be an object");

  Fields sc = f.Object("scaling");
  sc.Req("num_workers", &s->num_workers);
  sc.Opt("min_workers", &s->min_workers);
  sc.Req("use_gpu", &s->use_gpu);
  sc.Req("resources_per_worker", &s->resources_per_worker);
  std::string placement;
  sc.Req("placement", &placement);
  auto strategy = PlacementStrategyFromName(placement);
  if (!strategy) throw FieldError(sc.Name("placement") + "unknown strategy \"" + placement + "\"");
  s->placement_strategy = *strategy;

  Fields fc = f.Object("failure");
  fc.Req("max_failures", &s->max_failures);
  fc.Req("restart_backoff_s", &s->restart_backoff_s);
  fc.Req("max_restart_backoff_s", &s->max_restart_backoff_s);
  fc.Opt("peer_recovery", &s->peer_recovery);

  Fields rc = f.Object("retention");
  rc.Req("num_to_keep", &s->num_to_keep);
  rc.Req("score_attribute", &s->checkpoint_score_attribute);
  std::string order;
  rc.Req("score_order", &order);
  if (order != "min" && order != "max")
    throw FieldError(rc.Name("score_order") + "must be \"min\" or \"max\"");
  s->checkpoint_score_max = order == "max";

  f.Req("storage_path", &s->storage_path);
  f.Opt("time_limit_s", &s->time_limit_s);
  f.Req("resume_from_checkpoint", &s->resume_from_checkpoint);
  f.Req("env", &s->env);
  const json& datasets = f.At("datasets");
  if (!datasets.is_object()) throw FieldError(f.Name("datasets") + "must be an object");
  for (const auto& [name, d] : datasets.items()) {
    Fields df(d, "datasets." + name + ".");
    DatasetSpec ds;
    if (d.contains("items")) {
      ds.items = df.At("items");
      if (!ds.items.is_array()) throw FieldError(df.Name("items") + "must be an array");
    } else {
      df.Req("uri", &ds.uri);
    }
    df.Req("format", &ds.format);
    df.Req("split", &ds.split);
    s->datasets.emplace(name, std::move(ds));
  }
}

}  // namespace

json JobDefinitionToJson(const JobSpec& s) {
  json datasets = json::object();
  for (const auto& [name, d] : s.datasets) {
    datasets[name] = {{"format", d.format}, {"split", d.split}};
    if (d.items.is_array()) {
      datasets[name]["items"] = d.items;
    } else {
      datasets[name]["uri"] = d.uri;
    }
  }
  json entrypoint;
  if (s.entry_kind == EntrypointKind::kLibrary) {
    entrypoint = {{"library", s.library}, {"function", s.function}};
  } else {
    entrypoint = {{"kind", EntrypointKindName(s.entry_kind)},
                  {"working_dir", s.working_dir},
                  {"excludes", s.excludes}};
    if (s.entry_kind == EntrypointKind::kPython) entrypoint["python"] = s.python;
    if (s.entry_kind == EntrypointKind::kCommand) entrypoint["command"] = s.command;
  }
  // Version 1 readers know only library entry points and URI datasets: they must refuse the
  // others rather than run them as a library named "" or a dataset without data.
  bool v1 = s.entry_kind == EntrypointKind::kLibrary;
  for (const auto& [name, d] : s.datasets) v1 = v1 && !d.items.is_array();
  json out{{"version", v1 ? 1 : 2},
           {"name", s.name},
           {"priority", s.priority},
           {"entrypoint", std::move(entrypoint)},
           {"train_loop_config", s.train_loop_config},
           {"scaling",
            {{"num_workers", s.num_workers},
             {"use_gpu", s.use_gpu},
             {"resources_per_worker", s.resources_per_worker},
             {"placement", PlacementStrategyName(s.placement_strategy)}}},
           {"failure",
            {{"max_failures", s.max_failures},
             {"restart_backoff_s", s.restart_backoff_s},
             {"max_restart_backoff_s", s.max_restart_backoff_s}}},
           {"retention",
            {{"num_to_keep", s.num_to_keep},
             {"score_attribute", s.checkpoint_score_attribute},
             {"score_order", s.checkpoint_score_max ? "max" : "min"}}},
           {"storage_path", s.storage_path},
           {"resume_from_checkpoint", s.resume_from_checkpoint},
           {"datasets", std::move(datasets)},
           {"env", s.env}};
  if (!s.framework.empty()) out["framework"] = s.framework;
  // Only when set: a definition without one reads as it did before limits existed.
  if (s.time_limit_s > 0) out["time_limit_s"] = s.time_limit_s;
  if (s.peer_recovery) out["failure"]["peer_recovery"] = true;
  if (s.elastic()) out["scaling"]["min_workers"] = s.min_workers;
  return out;
}

Result<JobSpec> JobDefinitionFromJson(const json& definition) {
  try {
    Fields f(definition, "");
    int version = 0;
    f.Req("version", &version);
    if (version < 1 || version > kJobDefinitionVersion) {
      return Status::InvalidArgument("job definition: version " + std::to_string(version) +
                                     " is not one this release reads (1 to " +
                                     std::to_string(kJobDefinitionVersion) + ")");
    }
    JobSpec spec;
    Take(f, &spec);
    return spec;
  } catch (const FieldError& e) {
    return Status::InvalidArgument(std::string("job definition: ") + e.what());
  }
}

Result<json> JobDefinitionFromSpec(const json& canonical_spec) {
  auto spec = ParseJobSpec(canonical_spec);
  if (!spec.ok()) return spec.status();
  return JobDefinitionToJson(*spec);
}

}  // namespace traintl
