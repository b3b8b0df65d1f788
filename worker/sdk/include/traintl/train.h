// The traintl training SDK: a header-only C++ API over the C ABI in traintl/abi.h.
//
// A training library includes this header, defines `void fn(const nlohmann::json& config)`
// and exports it with TRAINTL_ENTRYPOINT(fn). traintl-worker loads the library, calls the
// entry point with train_loop_config, and serves every function below. They may be called
// only while an entry point runs (from any of its threads); elsewhere they throw
// std::logic_error. The datasets API (get_dataset_shard, DatasetShard, Batch, ...) is in
// traintl/dataset.h, which this header includes.
//
// Thread-safety: every function may be called from any thread. report() calls are
// serialized by the worker: concurrent callers each wait for their own acceptance (or, for
// asynchronous checkpoints, their snapshot).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "traintl/abi.h"

#if defined(__GLIBCXX__)
#include <cxxabi.h>
#endif

#include "traintl/dataset.h"
#include "traintl/host.h"

namespace traintl {

// What this rank is: its place in the job and the runtime details the worker was given.
// A snapshot taken by get_context(); cheap to copy.
class Context {
 public:
  // `context` is the worker's context object (docs/WORKER_PROTOCOL.md).
  explicit Context(nlohmann::json context) : context_(std::move(context)) {}

  // Global rank in [0, world_size).
  int world_rank() const { return Int("world_rank", 0); }
  // Number of ranks in the job.
  int world_size() const { return Int("world_size", 1); }
  // Rank among the ranks on this node, in [0, local_world_size).
  int local_rank() const { return Int("local_rank", 0); }
  int local_world_size() const { return Int("local_world_size", 1); }
  // Index of this node among the job's nodes.
  int node_rank() const { return Int("node_rank", 0); }
  // The attempt number: 1 for the first start, +1 for every restart.
  int attempt() const { return Int("attempt", 1); }
  std::string job_id() const { return Str("job_id"); }
  std::string job_name() const { return Str("job_name"); }
  // The job's results directory in storage (<storage_path>/<name>-<job_id>).
  std::string trial_dir() const { return Str("trial_dir"); }

  // Runtime details used by traintl::torch for rendezvous:
  // The address of rank 0's TCP store (rank 0 serves it; the others connect).
  std::string master_addr() const { return Str("master_addr"); }
  // The port of rank 0's TCP store; chosen free for this attempt by the head.
  int master_port() const { return Int("master_port", 0); }
  // Timeout in seconds for rendezvous and collectives (0 = the backend's default).
  int collective_timeout_s() const { return Int("collective_timeout_s", 0); }
  // scaling_config.use_gpu: train on the GPU (CUDA_VISIBLE_DEVICES is set by the agent).
  bool use_gpu() const {
    auto it = context_.find("use_gpu");
    return it != context_.end() && it->is_boolean() && it->get<bool>();
  }
  // The spec's "datasets" object (an empty object when there are none).
  nlohmann::json datasets() const {
    auto it = context_.find("datasets");
    if (it == context_.end() || !it->is_object()) return nlohmann::json::object();
    return *it;
  }

  // The whole context object.
  const nlohmann::json& json() const { return context_; }

 private:
  int Int(const char* key, int fallback) const {
    auto it = context_.find(key);
    return it != context_.end() && it->is_number_integer() ? it->get<int>() : fallback;
  }
  std::string Str(const char* key) const {
    auto it = context_.find(key);
    return it != context_.end() && it->is_string() ? it->get<std::string>() : std::string();
  }

  nlohmann::json context_;
};

inline Context get_context() {
  const traintl_host_api& api = internal::HostApi();
  const char* text = api.get_context_json(api.host);
  return Context(nlohmann::json::parse(text != nullptr ? text : "{}"));
}

// A checkpoint: a directory of files. Reporting one makes the worker copy its files into
// storage; restoring one gives a local directory to read from.
class Checkpoint {
 public:
  // `path` is not checked here; report() fails when it is not a readable directory.
  static Checkpoint from_directory(std::string path) { return Checkpoint(std::move(path)); }
  const std::string& path() const { return path_; }

 private:
  explicit Checkpoint(std::string path) : path_(std::move(path)) {}

  std::string path_;
};

// The checkpoint to resume from: on a restarted attempt the latest committed checkpoint,
// on the first attempt the spec's resume_from_checkpoint, otherwise none. Treat the
// directory as read-only.
inline std::optional<Checkpoint> get_checkpoint() {
  const traintl_host_api& api = internal::HostApi();
  const char* dir = api.get_checkpoint(api.host);
  if (dir == nullptr) return std::nullopt;
  return Checkpoint::from_directory(dir);
}

namespace internal {

inline void Report(const nlohmann::json& metrics, const char* checkpoint_dir) {
  if (!metrics.is_object()) {
    throw std::invalid_argument("traintl::report: metrics must be a JSON object, got " +
                                std::string(metrics.type_name()));
  }
  const traintl_host_api& api = HostApi();
  // Invalid UTF-8 in a metric name or value must not fail a training run.
  const std::string text = metrics.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  char err[4096] = {0};
  if (api.report(api.host, text.c_str(), checkpoint_dir, err, sizeof err) != 0) {
    throw std::runtime_error(std::string("traintl::report failed: ") + err);
  }
}

}  // namespace internal

// Reports one round of metrics (a JSON object). Every rank calls report() the same number
// of times; rank 0's metrics become the job's. Returns once the report was accepted.
// Throws std::invalid_argument (not an object) or std::runtime_error (rejected).
inline void report(const nlohmann::json& metrics) { internal::Report(metrics, nullptr); }

// Same, with a checkpoint: its files are copied durably before this returns, so the caller
// may delete the directory afterwards. The ranks' files are merged into one checkpoint.
inline void report(const nlohmann::json& metrics, const Checkpoint& checkpoint) {
  internal::Report(metrics, checkpoint.path().c_str());
}

// How report() hands a checkpoint over.
struct ReportOptions {
  // false (default): report() returns once the checkpoint's files are copied into the
  // job's staging area and the report was accepted.
  // true: report() returns once the files are snapshotted - a copy-on-write clone where the
  // file system can, else a copy into memory (/dev/shm) - and the worker persists them and
  // sends the report in the background; the checkpoint is committed once every rank's files
  // are durable, as always. The directory may be changed or deleted as soon as report()
  // returns. Later reports keep their order behind it: one of metrics alone still returns
  // at once; one with a checkpoint first waits for this upload (at most one is in flight
  // per rank). A failed upload throws std::runtime_error from the next report() (or
  // wait_for_reports()), and fails the rank at the end of the training function if nothing
  // reported since; the end of the training function waits for the upload (except after
  // a stop: then at most 2 s, and an unfinished upload is dropped, uncommitted). When
  // /dev/shm lacks room, or the worker is older than this header, the copy is synchronous.
  bool async_upload = false;
};

// report(metrics, checkpoint) with options (see ReportOptions).
inline void report(const nlohmann::json& metrics, const Checkpoint& checkpoint,
                   const ReportOptions& options) {
  const traintl_host_api& api = internal::HostApi();
  if (!options.async_upload || !TRAINTL_HOST_API_HAS(&api, report_async) ||
      api.report_async == nullptr) {
    internal::Report(metrics, checkpoint.path().c_str());
    return;
  }
  if (!metrics.is_object()) {
    throw std::invalid_argument("traintl::report: metrics must be a JSON object, got " +
                                std::string(metrics.type_name()));
  }
  const std::string text = metrics.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  char err[4096] = {0};
  if (api.report_async(api.host, text.c_str(), checkpoint.path().c_str(), nullptr, err,
                       sizeof err) != 0) {
    throw std::runtime_error(std::string("traintl::report failed: ") + err);
  }
}

// A report whose checkpoint files are written after report_deferred() returned - by a
// background thread that serializes state the loop staged in memory, say - into dir().
// The report keeps the place in this rank's sequence that report_deferred() gave it; it
// is sent once done() is called. Reports issued meanwhile queue behind it as behind an
// asynchronous upload (ReportOptions::async_upload), and the training function's end
// waits for done(). Destroying it without done() or fail() fails it.
//
// Thread-safety: done() and fail() may be called from any thread, once.
class DeferredCheckpoint {
 public:
  DeferredCheckpoint(DeferredCheckpoint&& other) noexcept
      : api_(other.api_), ticket_(other.ticket_), dir_(std::move(other.dir_)), open_(other.open_) {
    other.open_ = false;
  }
  DeferredCheckpoint& operator=(DeferredCheckpoint&&) = delete;
  DeferredCheckpoint(const DeferredCheckpoint&) = delete;
  ~DeferredCheckpoint() {
    if (open_) Finish("the DeferredCheckpoint was destroyed before done()", /*nothrow=*/true);
  }

  // The (empty) directory to write this rank's checkpoint files into.
  const std::string& dir() const { return dir_; }
  // Every file is written: the report goes out (after the reports before it).
  void done() { Finish(nullptr, false); }
  // The files could not be written: the upload fails with `reason` (see ReportOptions).
  void fail(const std::string& reason) { Finish(reason.c_str(), false); }

 private:
  friend DeferredCheckpoint report_deferred(const nlohmann::json& metrics);
  DeferredCheckpoint(const traintl_host_api* api, int64_t ticket, std::string dir)
      : api_(api), ticket_(ticket), dir_(std::move(dir)) {}
  void Finish(const char* error, bool nothrow) {
    if (!open_) {
      if (nothrow) return;
      throw std::logic_error("traintl::DeferredCheckpoint: done() or fail() already called");
    }
    open_ = false;
    char err[1024] = {0};
    if (api_->report_deferred_done(api_->host, ticket_, error, err, sizeof err) != 0 && !nothrow)
      throw std::runtime_error(std::string("traintl::DeferredCheckpoint: ") + err);
  }

  // The host that reserved the report (it lives until the process exits).
  const traintl_host_api* api_;
  int64_t ticket_;
  std::string dir_;
  bool open_ = true;
};

// Reserves this rank's next report (its metrics now, its checkpoint files later) and
// returns where the files go. Waits first for a previous upload, as report() with
// async_upload does. Throws std::runtime_error when the worker is older than this header
// (it has no deferred reports) or the report was refused.
inline DeferredCheckpoint report_deferred(const nlohmann::json& metrics) {
  if (!metrics.is_object()) {
    throw std::invalid_argument("traintl::report_deferred: metrics must be a JSON object, got " +
                                std::string(metrics.type_name()));
  }
  const traintl_host_api& api = internal::HostApi();
  if (!TRAINTL_HOST_API_HAS(&api, report_deferred) || api.report_deferred == nullptr) {
    throw std::runtime_error(
        "traintl::report_deferred: this worker has no deferred reports (it is older than this "
        "library)");
  }
  const std::string text = metrics.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  char err[4096] = {0};
  char dir[4096] = {0};
  int64_t ticket = 0;
  if (api.report_deferred(api.host, text.c_str(), nullptr, &ticket, dir, sizeof dir, err,
                          sizeof err) != 0) {
    throw std::runtime_error(std::string("traintl::report_deferred failed: ") + err);
  }
  return DeferredCheckpoint(&api, ticket, dir);
}

// Waits until every report so far was sent (asynchronous checkpoints persisted). Throws
// std::runtime_error with the error of a failed upload. Returns at once on a worker
// older than this header (its reports are all synchronous).
inline void wait_for_reports() {
  const traintl_host_api& api = internal::HostApi();
  if (!TRAINTL_HOST_API_HAS(&api, wait_reports) || api.wait_reports == nullptr) return;
  char err[4096] = {0};
  if (api.wait_reports(api.host, err, sizeof err) != 0)
    throw std::runtime_error(std::string("traintl::wait_for_reports: ") + err);
}

// True once the job was asked to stop (traintl stop, or another rank failed): return soon.
inline bool should_stop() {
  const traintl_host_api& api = internal::HostApi();
  return api.should_stop(api.host) != 0;
}

// Writes a line to this rank's log; `level` is one of TRAINTL_LOG_DEBUG .. TRAINTL_LOG_ERROR.
inline void log_message(int level, const std::string& message) {
  const traintl_host_api& api = internal::HostApi();
  api.log(api.host, level, message.c_str());
}

namespace internal {

// The body of every generated entry point: validates the host, runs `fn` with
// train_loop_config, and turns every exception into a return code and a message.
template <typename Fn>
int RunEntry(const traintl_host_api* api, char* err, size_t err_len, Fn&& fn) {
  if (api == nullptr || api->abi_version != TRAINTL_ABI_VERSION ||
      !TRAINTL_HOST_API_HAS(api, log)) {
    CopyMessage("traintl: the worker's host API is incompatible with this library", err, err_len);
    return TRAINTL_ENTRY_INCOMPATIBLE;
  }
  try {
    current_host_api = api;
    nlohmann::json context = nlohmann::json::parse(api->get_context_json(api->host));
    auto it = context.find("config");
    const nlohmann::json config =
        it != context.end() && !it->is_null() ? *it : nlohmann::json::object();
    fn(config);
    return TRAINTL_ENTRY_OK;
#if defined(__GLIBCXX__)
  } catch (abi::__forced_unwind&) {
    throw;  // thread cancellation must finish unwinding
#endif
  } catch (const std::exception& e) {
    CopyMessage(e.what(), err, err_len);
  } catch (...) {
    CopyMessage("unknown exception", err, err_len);
  }
  return TRAINTL_ENTRY_FAILED;
}

}  // namespace internal
}  // namespace traintl

// Every library that includes this header exports the ABI version it was built for. Inline
// (one copy per library) and `used` (emitted even though nothing in the library calls it).
extern "C" __attribute__((visibility("default"), used)) inline uint32_t traintl_abi_version(void) {
  return TRAINTL_ABI_VERSION;
}

// Exports `callable` (void(const nlohmann::json& config)) as the entry point `name`: the job
// spec's entrypoint.function. `name` must be a plain identifier.
#define TRAINTL_ENTRYPOINT_AS(name, callable)                                 \
  extern "C" __attribute__((visibility("default"))) int traintl_entry_##name( \
      const traintl_host_api* api, char* err, size_t err_len) {               \
    return ::traintl::internal::RunEntry(api, err, err_len, callable);        \
  }

// Exports the function `fn` (void fn(const nlohmann::json& config)) under its own name.
// Use it once per function; a library may export several (in one or several files).
#define TRAINTL_ENTRYPOINT(fn) TRAINTL_ENTRYPOINT_AS(fn, fn)
