// JobSpec: the validated form of a job.json (DESIGN §3), and its parser.
//
// ParseJobSpec refuses unknown fields and wrong types, naming the JSON path of the
// offending field ("scaling_config.resources_per_worker.GPU") and what was expected.
// Paths join keys with '.'; a key that is not [A-Za-z0-9_-]+ is written ["key"]
// (datasets["my.data"].uri). The parser is meant for untrusted input: it bounds nesting
// depth, document size and collection sizes before doing anything recursive.
//
// Optional fields whose Ray Train default is None (entrypoint.function, storage_path,
// num_to_keep, checkpoint_score_attribute, dataset format, resume_from_checkpoint) also
// accept null, meaning "not given"; JobSpecToJson writes null for them when unset.
//
// Rules beyond the field comments below: resource amounts are finite and >= 0; GPU is
// fractional only in (0, 1]; as in Ray Train, GPU > 0 needs use_gpu and use_gpu needs
// GPU > 0; a shorthand (num_cpus_per_worker) and its long form must agree; custom resource
// names are [A-Za-z0-9_.-] ("gpu" is refused as a likely typo of "GPU"); num_to_keep >= 1
// when given; storage_path and resume_from_checkpoint directories are absolute; dataset
// names follow the job-name rule and URIs are file:///abs, http:// or https://; env keys
// are [A-Za-z_][A-Za-z0-9_]* and not TRAINTL_*; "." and ".." are not job names.
//
// Thread-safety: plain values; the parser has no shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace traintl {

// Documents nested deeper than this (the top-level object is level 1) are refused, so that
// recursive JSON operations downstream (copy, dump, compare) cannot exhaust the stack.
// A caller that wraps a spec in another object ({"spec": ...}) should allow one more.
inline constexpr int kMaxSpecDepth = 100;
// ParseJobSpecText refuses longer input.
inline constexpr std::size_t kMaxSpecTextBytes = 16u << 20;

// failure_config defaults (JobSpec::restart_backoff_s, max_restart_backoff_s).
inline constexpr double kDefaultRestartBackoffS = 1.0;
inline constexpr double kDefaultMaxRestartBackoffS = 60.0;
// The delay before restarting after `consecutive_failures` quick failures (see JobSpec).
double RestartBackoffSeconds(double backoff_s, double max_s, int consecutive_failures);

enum class PlacementStrategy { kPack, kSpread, kStrictPack, kStrictSpread };
// "PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD".
const char* PlacementStrategyName(PlacementStrategy s);
// The inverse of PlacementStrategyName (exact, upper-case names); nullopt when unknown.
std::optional<PlacementStrategy> PlacementStrategyFromName(const std::string& name);

struct DatasetSpec {
  std::string uri;     // file://..., http(s)://...; "" for inline items
  std::string format;  // "" = inferred from the extension; else csv | jsonl | npy | parquet
  bool split = false;  // default: true for the dataset named "train", false otherwise
  // Inline items ("items", as ray.data.from_items): a JSON array of objects, read as JSONL
  // records (an item that is not an object stands for {"item": it}); null for a URI.
  // At most kMaxInlineItems items and kMaxInlineItemsBytes as JSON.
  nlohmann::json items;
};
inline constexpr size_t kMaxInlineItems = 10000;
inline constexpr size_t kMaxInlineItemsBytes = 256 * 1024;
bool operator==(const DatasetSpec& a, const DatasetSpec& b);
inline bool operator!=(const DatasetSpec& a, const DatasetSpec& b) { return !(a == b); }

// The format a dataset file is read as: `format` when set, else from the extension of the
// URI's path (.csv, .jsonl/.ndjson, .npy, .parquet/.pq);
// "" when it cannot be told.
std::string InferDatasetFormat(const DatasetSpec& dataset);

// What `entrypoint` runs (DESIGN §8): exactly one of a C++ library, a Python function or a
// command.
enum class EntrypointKind { kLibrary, kPython, kCommand };
// "library", "python", "command".
const char* EntrypointKindName(EntrypointKind kind);

// Limits of entrypoint.command.
inline constexpr std::size_t kMaxCommandArgs = 1024;
inline constexpr std::size_t kMaxCommandBytes = 128 * 1024;  // all arguments together

struct JobSpec {
  std::string name;  // required, 1..128 chars of [A-Za-z0-9._-]
  EntrypointKind entry_kind = EntrypointKind::kLibrary;
  std::string library;   // entrypoint.library: required for kLibrary, non-empty
  std::string function;  // entrypoint.function (kLibrary only), "" = the only exported one
  // entrypoint.python (kPython): "module:function", a dotted module path and an identifier.
  std::string python;
  // entrypoint.command (kCommand): the program (looked up in PATH and the working_dir) and
  // its arguments; 1..kMaxCommandArgs non-empty strings.
  std::vector<std::string> command;
  // entrypoint.working_dir (kPython, kCommand; optional): the directory as the submitter
  // named it. The CLI packs it (common/code_archive.h) and the job runs in its unpacked copy.
  std::string working_dir;
  // entrypoint.excludes: .gitignore-style patterns left out of the packed working_dir.
  std::vector<std::string> excludes;
  // Top-level "framework": "" (none) | "torch" | "tensorflow" | "xgboost": adds that
  // framework's environment to every rank (TF_CONFIG for tensorflow; the DMLC_* of the
  // attempt's rabit tracker, which the daemon runs, for xgboost).
  std::string framework;
  nlohmann::json train_loop_config = nlohmann::json::object();  // any object; default {}

  // scaling_config
  int num_workers = 1;  // 1..4096; with min_workers < num_workers, the most (see below)
  // scaling_config.num_workers {"min": m, "max": n} (an elastic job): the job starts with
  // as many ranks in [m, n] as fit, goes on with fewer (>= m) when a node is lost, and
  // grows back to n when capacity returns (docs/WORKER_PROTOCOL.md, "Elastic sizes").
  // num_workers is then n. 0 for a fixed size (then every rank is needed). Default 0.
  int min_workers = 0;
  bool elastic() const { return min_workers > 0 && min_workers < num_workers; }
  bool use_gpu = false;
  // Resource name -> amount per worker. Always has "CPU" (default 1) and "GPU" (default
  // 1 when use_gpu else 0); "memory" in bytes when given (strings like "2GiB" accepted).
  std::map<std::string, double> resources_per_worker;
  PlacementStrategy placement_strategy = PlacementStrategy::kPack;

  // run_config
  std::string storage_path;                // "" = under the head's data directory
  int num_to_keep = 0;                     // checkpoint_config.num_to_keep; 0 = keep all
  std::string checkpoint_score_attribute;  // "" = retention by recency
  bool checkpoint_score_max = false;       // checkpoint_score_order: "min" (default) | "max"
  int max_failures = 0;                    // failure_config.max_failures: 0, N, or -1 (unlimited)
  // failure_config.restart_backoff_s / max_restart_backoff_s: the first restart is
  // immediate; the one after the n-th consecutive quick failure (n >= 2) waits
  // min(max, restart_backoff_s * 2^(n-2)). An attempt that ran for at least the maximum
  // counts as progress and restarts the sequence. restart_backoff_s 0 disables it.
  double restart_backoff_s = kDefaultRestartBackoffS;
  double max_restart_backoff_s = kDefaultMaxRestartBackoffS;
  // failure_config.peer_recovery: when a rank dies, the others keep running and a
  // replacement rank takes a survivor's in-memory state (traintl::torch::run_steps), instead
  // of a restart of every rank from the checkpoint. Each replacement counts against
  // max_failures. Needs a library or python entry point, max_failures != 0 and no use_gpu.
  // Default false.
  bool peer_recovery = false;
  // run_config.time_limit_s: the job is stopped (STOPPED, with that reason) once this long
  // has passed since its first attempt started, restarts included. 0 = no limit.
  double time_limit_s = 0;

  std::map<std::string, DatasetSpec> datasets;
  std::map<std::string, std::string> env;
  int priority = 0;
  std::string resume_from_checkpoint;  // "" | a directory | "job:<id>"
};
// Field-by-field equality (train_loop_config compared as JSON values).
bool operator==(const JobSpec& a, const JobSpec& b);
inline bool operator!=(const JobSpec& a, const JobSpec& b) { return !(a == b); }

// The error of a spec that does not validate; `field` is the JSON path ("" = whole doc).
struct SpecError {
  std::string field;
  std::string message;  // says what was expected, e.g. "must be an integer >= 1"
  std::string ToString() const { return field.empty() ? message : field + ": " + message; }
};

// Parses and validates. On failure returns InvalidArgument whose message is
// SpecError::ToString() and fills *error (when non-null).
Result<JobSpec> ParseJobSpec(const nlohmann::json& doc, SpecError* error = nullptr);
// Parses JSON text first (syntax errors name the byte offset).
Result<JobSpec> ParseJobSpecText(const std::string& text, SpecError* error = nullptr);
// Canonical JSON of a validated spec (every default filled in); parses back to an
// equal JobSpec.
nlohmann::json JobSpecToJson(const JobSpec& spec);
// Parses "2GiB", "512MB", "1.5G", "1024" (bytes) and plain numbers; InvalidArgument else.
// Units are case-insensitive: B; K, M, G, T, P (and KB, MB, ...) are powers of 1000
// (SI, as in Kubernetes); Ki, Mi, Gi, Ti, Pi (and KiB, MiB, ...) are powers of 1024.
// The result is a whole number of bytes (fractions are rounded down), at most 2^62.
// The error message says what was expected, without a field path.
Result<double> ParseMemoryAmount(const nlohmann::json& value);

// Parses JSON text strictly, for untrusted input: refuses text over max_bytes, nesting
// deeper than max_depth, and duplicate object keys (which nlohmann would silently
// collapse). Errors fill *error (when non-null): syntax errors have field "" and name the
// byte offset, counted as nlohmann does (the number of bytes read when the error was
// found, so 1-based): "invalid JSON at byte 17 (line 1, column 17): ..."; duplicate keys
// name their path ("a[1].b"); too-deep nesting names the top-level member it is in.
Result<nlohmann::json> ParseJsonStrict(const std::string& text, int max_depth = kMaxSpecDepth,
                                       std::size_t max_bytes = kMaxSpecTextBytes,
                                       SpecError* error = nullptr);

}  // namespace traintl
