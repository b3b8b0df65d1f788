// A job's definition: the validated JobSpec as the head stores it with the job (the
// `definition` column, schema 3) and as the submit_job command carries it. It is written
// once, at submit, from a spec that passed ParseJobSpec; from then on the head reads this
// typed, versioned record and never the user's spec text again (the spec is kept only for
// display).
//
// Why not re-validate the stored spec? Validation rules change between releases (a format
// an older release accepted may be refused now), and a job accepted once must run as it
// was accepted. Decoding a definition checks types and presence, names the field it
// cannot read, and applies no user-input rules.
//
// Layout (version 1; proto/WIRE.md "Job definition"):
//   {"version": 1, "name", "priority",
//    "entrypoint": {"library", "function"}, "train_loop_config": {...},
//    (version 2: "entrypoint": {"kind": "python" | "command", "python" | "command",
//     "working_dir", "excludes"}, and "framework" when set)
//    "scaling": {"num_workers", "use_gpu", "resources_per_worker": {name: amount},
//                "placement": "PACK" | "SPREAD" | "STRICT_PACK" | "STRICT_SPREAD"},
//    "failure": {"max_failures", "restart_backoff_s", "max_restart_backoff_s",
//                "peer_recovery" (optional, only when true)},
//    "retention": {"num_to_keep", "score_attribute", "score_order": "min" | "max"},
//    "storage_path", "resume_from_checkpoint",
//    "datasets": {name: {"uri", "format", "split"}}, "env": {name: value}}
// Fields are only ever added (a decoder ignores ones it does not know); a change of a
// field's meaning bumps the version, and a record of a newer version is refused.
//
// Thread-safety: free functions over values.
#pragma once

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "proto/job_spec.h"

namespace traintl {

// Version 2 adds python and command entry points ("entrypoint": {"kind", "python" |
// "command", "working_dir", "excludes"}) and "framework"; a library job is still written as
// version 1, so that an older release reads it.
inline constexpr int kJobDefinitionVersion = 2;

// The definition of a validated spec. Never fails.
nlohmann::json JobDefinitionToJson(const JobSpec& spec);

// Reads a stored definition. InvalidArgument "job definition: <field>: ..." when a field is
// missing or mistyped, or the version is unknown.
Result<JobSpec> JobDefinitionFromJson(const nlohmann::json& definition);

// The definition of a spec stored by a release that kept no definition (the one time such
// a spec is validated again: a database migration or an old log entry). The spec's
// validation error when this release refuses it.
Result<nlohmann::json> JobDefinitionFromSpec(const nlohmann::json& canonical_spec);

}  // namespace traintl
