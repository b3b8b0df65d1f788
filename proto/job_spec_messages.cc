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

std::size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
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

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The closest candidate within a distance that still looks like a typo, or "".
std::string Closest(const std::string& key, const std::vector<std::string>& candidates) {
  if (key.size() > 64) return "";
  std::string lk = Lower(key);
  std::string best;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  for (const auto& c : candidates) {
    std::size_t d = EditDistance(lk, Lower(c));
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  std::size_t limit = key.size() <= 4 ? 1 : key.size() <= 8 ? 2 : 3;
  return best_d <= limit ? best : "";
}

// Where each field of the structural objects lives, to point at a misplaced one
// ({"num_workers": 2} at the top level).
const std::map<std::string, std::string>& FieldHomes() {
  static const auto* homes = new std::map<std::string, std::string>{
      {"name", "name"},
      {"entrypoint", "entrypoint"},
      {"library", "entrypoint.library"},
      {"function", "entrypoint.function"},
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
      {"num_to_keep", "run_config.checkpoint_config.num_to_keep"},
      {"checkpoint_score_attribute", "run_config.checkpoint_config.checkpoint_score_attribute"},
      {"checkpoint_score_order", "run_config.checkpoint_config.checkpoint_score_order"},
      {"max_failures", "run_config.failure_config.max_failures"},
      {"restart_backoff_s", "run_config.failure_config.restart_backoff_s"},
      {"max_restart_backoff_s", "run_config.failure_config.max_restart_backoff_s"},
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
