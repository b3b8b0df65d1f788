// Error-message helpers of the job spec parser: JSON paths, value descriptions and
// did-you-mean hints (job_spec_internal.h).
#include "proto/job_spec_internal.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace traintl {
namespace spec_internal {
namespace {

// Keys from the document are echoed into messages; cap them so that a megabyte-long key
// does not become a megabyte-long error.
std::string Clip(const std::string& s, std::size_t max = 64) {
  if (s.size() <= max) return s;
  std::size_t cut = max;
  // Do not cut a UTF-8 sequence in half.
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + "...";
}

std::string DumpSafe(const json& v) {
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

bool IsPlainKey(const std::string& key) {
  if (key.empty()) return false;
  for (unsigned char c : key) {
    if (!std::isalnum(c) && c != '_' && c != '-') return false;
  }
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Paths and value descriptions for error messages.

// Messages end up inside JSON responses, whose encoder throws on invalid UTF-8.
std::string ValidUtf8(const std::string& s) {
  return json::parse(DumpSafe(json(s))).get<std::string>();
}

std::string Child(const std::string& parent, const std::string& key) {
  std::string seg =
      IsPlainKey(key) && key.size() <= 64 ? key : "[" + DumpSafe(json(Clip(key))) + "]";
  if (parent.empty()) return seg;
  return seg[0] == '[' ? parent + seg : parent + "." + seg;
}

std::string Describe(const json& v) {
  switch (v.type()) {
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return DumpSafe(json(Clip(v.get_ref<const std::string&>())));
    case json::value_t::binary:
      return "binary data";
    case json::value_t::discarded:
      return "nothing";
    default:
      return DumpSafe(v);  // null, bool, numbers: short
  }
}

std::string FormatNumber(double x) {
  json j;
  if (x == std::floor(x) && std::fabs(x) < 9.0e15) {
    j = static_cast<std::int64_t>(x);
  } else {
    j = x;
  }
  return j.dump();
}

// ---------------------------------------------------------------------------------------
// Did-you-mean hints.

// Where each field of the structural objects lives, to point at a misplaced one
// ({"num_workers": 2} at the top level).
const std::map<std::string, std::string>& FieldHomes() {
  static const auto* homes = new std::map<std::string, std::string>{
      {"name", "name"},
      {"entrypoint", "entrypoint"},
      {"library", "entrypoint.library"},
      {"function", "entrypoint.function"},
      {"python", "entrypoint.python"},
      {"command", "entrypoint.command"},
      {"working_dir", "entrypoint.working_dir"},
      {"excludes", "entrypoint.excludes"},
      {"framework", "framework"},
      {"train_loop_config", "train_loop_config"},
      {"scaling_config", "scaling_config"},
      {"num_workers", "scaling_config.num_workers"},
      {"use_gpu", "scaling_config.use_gpu"},
      {"resources_per_worker", "scaling_config.resources_per_worker"},
      {"num_cpus_per_worker", "scaling_config.num_cpus_per_worker"},
      {"num_gpus_per_worker", "scaling_config.num_gpus_per_worker"},
      {"placement_strategy", "scaling_config.placement_strategy"},
      {"run_config", "run_config"},
      {"storage_path", "run_config.storage_path"},
      {"checkpoint_config", "run_config.checkpoint_config"},
      {"failure_config", "run_config.failure_config"},
      {"time_limit_s", "run_config.time_limit_s"},
      {"num_to_keep", "run_config.checkpoint_config.num_to_keep"},
      {"checkpoint_score_attribute", "run_config.checkpoint_config.checkpoint_score_attribute"},
      {"checkpoint_score_order", "run_config.checkpoint_config.checkpoint_score_order"},
      {"max_failures", "run_config.failure_config.max_failures"},
      {"restart_backoff_s", "run_config.failure_config.restart_backoff_s"},
      {"max_restart_backoff_s", "run_config.failure_config.max_restart_backoff_s"},
      {"peer_recovery", "run_config.failure_config.peer_recovery"},
      {"datasets", "datasets"},
      {"env", "env"},
      {"priority", "priority"},
      {"resume_from_checkpoint", "resume_from_checkpoint"},
  };
  return *homes;
}

// Ray Train options a Ray user may carry over that traintl does not implement.
const std::set<std::string>& UnsupportedRayFields() {
  static const auto* fields = new std::set<std::string>{
      "trainer_resources",
      "accelerator_type",
      "callbacks",
      "stop",
      "verbose",
      "sync_config",
      "storage_filesystem",
      "log_to_file",
      "progress_reporter",
      "checkpoint_frequency",
      "checkpoint_at_end",
      "fail_fast",
      "runtime_env",
      "metadata",
      "dataset_config",
      "scaling_policy",
  };
  return *fields;
}

}  // namespace spec_internal
}  // namespace traintl
