// traintl._native: the Python bindings over the C ABI between traintl-worker and training
// code (traintl/abi.h). The pure-Python SDK (traintl.train) is written over this module;
// users do not import it.
//
// The host API comes from one of two places:
//  - attached: the entry shim (libtraintl_python.so), loaded into traintl-worker for a
//    {"python": "module:function"} entry point, passes the worker's traintl_host_api to
//    _attach() before it imports the user's module;
//  - standalone: a program started by a {"command": [...]} entry point imports traintl
//    itself. On first use this module reads the rank's context file (TRAINTL_CONTEXT_FILE)
//    and the agent channel (TRAINTL_CHANNEL_FD) and builds its own host over them. The
//    parent traintl-worker says hello and done; this host only reports.
//
// Batches are zero-copy: a numeric column becomes a numpy array over the batch's memory,
// whose base is a capsule that releases the batch when the last array of it dies.
//
// Thread-safety: every function may be called from any Python thread. Calls that block
// (report, opening a shard, waiting for a batch) release the GIL. A batch iterator is used
// by one thread at a time; concurrent next() calls are serialized.
#include <fcntl.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "common/file_util.h"
#include "common/logging.h"
#include "proto/rank_context.h"
#include "python/src/progress_hooks.h"
#include "traintl/abi.h"
#include "traintl/progress_recorder.h"
#include "worker/agent_channel.h"
#include "worker/worker_host.h"

namespace py = pybind11;

namespace traintl {
namespace python {
namespace {

constexpr char kCapsuleName[] = "traintl_host_api";
constexpr size_t kErrorSize = 4096;

std::mutex g_mu;
// The host API of this process; set by _attach or built from the environment. Never
// freed: the worker (or this process) ends with it.
const traintl_host_api* g_api = nullptr;
// True when g_api is traintl-worker's (attached by the entry shim): the worker then waits
// for background uploads when the entry point returns; a standalone host must itself.
bool g_attached_to_worker = false;

[[noreturn]] void ThrowRuntime(const std::string& message) { throw std::runtime_error(message); }

// TRAINTL_CHANNEL_FD's value as a descriptor number; -1 when it is not one.
int ParseFd(const char* text) {
  char* end = nullptr;
  const long fd = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || fd < 0 || fd > 1 << 20) return -1;
  return static_cast<int>(fd);
}

// Programs this one starts (exec) must not inherit the agent's channel, even before the
// first SDK call builds the host.
void CloseChannelOnExec() {
  const char* text = std::getenv("TRAINTL_CHANNEL_FD");
  const int fd = text != nullptr ? ParseFd(text) : -1;
  const int flags = fd >= 0 ? ::fcntl(fd, F_GETFD) : -1;
  if (flags >= 0) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

// Builds the standalone host (see the file comment). Nothing is created unless every check
// passed, so a failed call may be retried.
const traintl_host_api* StartStandaloneHost() {
  const char* context_file = std::getenv("TRAINTL_CONTEXT_FILE");
  if (context_file == nullptr || *context_file == '\0') {
    ThrowRuntime("traintl.train is only available inside a traintl job (no TRAINTL_CONTEXT_FILE)");
  }
  const char* fd_text = std::getenv("TRAINTL_CHANNEL_FD");
  if (fd_text == nullptr || *fd_text == '\0') {
    ThrowRuntime(
        "traintl.train is only available inside a traintl job (TRAINTL_CONTEXT_FILE is set "
        "but TRAINTL_CHANNEL_FD is not)");
  }
  const int fd = ParseFd(fd_text);
  if (fd < 0) {
    ThrowRuntime(std::string("TRAINTL_CHANNEL_FD is not a file descriptor: '") + fd_text + "'");
  }
  const int flags = ::fcntl(fd, F_GETFD);
  if (flags < 0) {
    ThrowRuntime("TRAINTL_CHANNEL_FD " + std::to_string(fd) +
                 " (the channel to the traintl agent) is not open in this process");
  }
  auto text = ReadFile(context_file);
  if (!text.ok()) {
    ThrowRuntime(std::string("cannot read TRAINTL_CONTEXT_FILE ") + context_file + ": " +
                 text.status().message());
  }
  auto context = ParseRankContext(*text);
  if (!context.ok()) ThrowRuntime(std::string(context_file) + ": " + context.status().message());

  // Programs this one starts must not keep the agent's channel open.
  ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  SetLogTag("rank " + std::to_string(context->world_rank));
  // Both live until the process exits: the channel's reader thread is detached.
  auto* channel = new worker::AgentChannel(fd);
  channel->Start();
  auto* host = new worker::WorkerHost(std::move(context).value(), channel);
  return host->api();
}

const traintl_host_api& Api() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_api == nullptr) g_api = StartStandaloneHost();
  return *g_api;
}

const traintl_dataset_api& DatasetApi() {
  const traintl_host_api& api = Api();
  if (!TRAINTL_HOST_API_HAS(&api, datasets) || api.datasets == nullptr) {
    ThrowRuntime("traintl: this worker serves no datasets (it is older than this package)");
  }
  return *api.datasets;
}

// Maps a TRAINTL_DATA_* error to the Python exception users expect for it.
[[noreturn]] void ThrowDataError(int code, const char* err) {
  const std::string message = err != nullptr && *err ? err : "dataset call failed";
  if (code == TRAINTL_DATA_BAD) throw py::value_error(message);
  if (code == TRAINTL_DATA_UNAVAILABLE) {
    PyErr_SetString(PyExc_OSError, message.c_str());
    throw py::error_already_set();
  }
  ThrowRuntime(message + " (code " + std::to_string(code) + ")");
}

void Attach(py::capsule capsule) {
  if (std::string(capsule.name() != nullptr ? capsule.name() : "") != kCapsuleName) {
    throw py::type_error(std::string("_attach expects a capsule named '") + kCapsuleName + "'");
  }
  const auto* api = capsule.get_pointer<const traintl_host_api>();
  if (api == nullptr || api->abi_version != TRAINTL_ABI_VERSION ||
      !TRAINTL_HOST_API_HAS(api, log)) {
    ThrowRuntime("traintl: the worker's host API is incompatible with this package");
  }
  std::lock_guard<std::mutex> lock(g_mu);
  g_api = api;
  g_attached_to_worker = true;
}

bool IsAttached() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_api != nullptr;
}

std::string ContextJson() {
  const traintl_host_api& api = Api();
  const char* text = api.get_context_json(api.host);
  return text != nullptr ? text : "{}";
}

void Report(const std::string& metrics_json, const std::optional<std::string>& checkpoint_dir) {
  const traintl_host_api& api = Api();
  char err[kErrorSize] = {0};
  int rc;
  {
    // Blocks until the agent accepts; other Python threads (and data loaders) keep going.
    py::gil_scoped_release release;
    rc = api.report(api.host, metrics_json.c_str(),
                    checkpoint_dir ? checkpoint_dir->c_str() : nullptr, err, sizeof err);
  }
  if (rc != 0) ThrowRuntime(err[0] != '\0' ? err : "report failed");
}

void ReportAsync(const std::string& metrics_json, const std::string& checkpoint_dir) {
  const traintl_host_api& api = Api();
  char err[kErrorSize] = {0};
  int rc;
  {
    py::gil_scoped_release release;
    // A worker older than this package: the synchronous report is the safe fallback.
    if (!TRAINTL_HOST_API_HAS(&api, report_async) || api.report_async == nullptr) {
      rc = api.report(api.host, metrics_json.c_str(), checkpoint_dir.c_str(), err, sizeof err);
    } else {
      rc = api.report_async(api.host, metrics_json.c_str(), checkpoint_dir.c_str(), nullptr, err,
                            sizeof err);
    }
  }
  if (rc != 0) ThrowRuntime(err[0] != '\0' ? err : "report failed");
}

void WaitReports() {
  const traintl_host_api& api = Api();
  if (!TRAINTL_HOST_API_HAS(&api, wait_reports) || api.wait_reports == nullptr) return;
  char err[kErrorSize] = {0};
  int rc;
  {
    py::gil_scoped_release release;
    rc = api.wait_reports(api.host, err, sizeof err);
  }
  if (rc != 0) ThrowRuntime(err[0] != '\0' ? err : "a background checkpoint upload failed");
}

// Peer recovery (traintl_host_api.regroup_wait, next_report_seq, skip_report_seq); a host
// without them never announces a regroup.
bool HasRecovery(const traintl_host_api& api) {
  return TRAINTL_HOST_API_HAS(&api, skip_report_seq) && api.regroup_wait != nullptr &&
         api.next_report_seq != nullptr && api.skip_report_seq != nullptr;
}

int64_t RegroupWait(int64_t min_generation, int64_t timeout_ms) {
  const traintl_host_api& api = Api();
  if (!HasRecovery(api)) return 0;
  py::gil_scoped_release release;
  return api.regroup_wait(api.host, min_generation, timeout_ms);
}

int64_t NextReportSeq() {
  const traintl_host_api& api = Api();
  if (!HasRecovery(api)) ThrowRuntime("traintl: this worker has no peer recovery");
  return api.next_report_seq(api.host);
}

py::object RegroupInfo() {
  const traintl_host_api& api = Api();
  if (!TRAINTL_HOST_API_HAS(&api, regroup_info) || api.regroup_info == nullptr) return py::none();
  const char* text = api.regroup_info(api.host);
  if (text == nullptr) return py::none();
  return py::str(text);
}

void SkipReportSeq(int64_t seq) {
  const traintl_host_api& api = Api();
  if (!HasRecovery(api)) ThrowRuntime("traintl: this worker has no peer recovery");
  char err[kErrorSize] = {0};
  int rc;
  {
    py::gil_scoped_release release;
    rc = api.skip_report_seq(api.host, seq, err, sizeof err);
  }
  if (rc != 0) ThrowRuntime(err[0] != '\0' ? err : "skip_report_seq failed");
}

py::object GetCheckpoint() {
  const traintl_host_api& api = Api();
  const char* dir = api.get_checkpoint(api.host);
  if (dir == nullptr) return py::none();
  return py::str(dir);
}

bool ShouldStop() {
  const traintl_host_api& api = Api();
  return api.should_stop(api.host) != 0;
}

// prepare_model's progress (python/traintl/train/torch.py), sent as the LibTorch
// integration sends it. Nothing without a host that takes progress.
ProgressRecorder& Progress() {
  // g_api is set once, before any training code runs.
  static ProgressRecorder* recorder =
      new ProgressRecorder([](const traintl_progress& p) { SendProgress(g_api, p); });
  return *recorder;
}

void Log(int level, const std::string& message) {
  const traintl_host_api& api = Api();
  api.log(api.host, level, message.c_str());
}

// ---- Datasets

// Owns one host shard; closes it with the last reference (a Shard's iterators do not need
// it).
struct ShardRef {
  const traintl_dataset_api* api;
  traintl_dataset_shard* shard;
  ~ShardRef() { api->shard_close(api->ctx, shard); }
};

// One host batch, released when the capsule holding it is destroyed (with the last numpy
// array whose base it is).
struct BatchRef {
  const traintl_dataset_api* api;
  const traintl_batch* batch;
};

py::dtype NumpyDtype(int32_t dtype) {
  switch (dtype) {
    case TRAINTL_DTYPE_FLOAT64:
      return py::dtype::of<double>();
    case TRAINTL_DTYPE_FLOAT32:
      return py::dtype::of<float>();
    case TRAINTL_DTYPE_INT64:
      return py::dtype::of<int64_t>();
    case TRAINTL_DTYPE_INT32:
      return py::dtype::of<int32_t>();
  }
  ThrowRuntime("traintl: a batch column has an unknown dtype " + std::to_string(dtype));
}

// A batch as {name: numpy array}; takes ownership of `batch`.
py::dict BatchToDict(const traintl_dataset_api* api, const traintl_batch* batch) {
  // Owns the batch from here on, even when building the dict fails half-way.
  py::capsule keep(new BatchRef{api, batch}, [](void* p) {
    auto* ref = static_cast<BatchRef*>(p);
    ref->api->batch_release(ref->api->ctx, ref->batch);
    delete ref;
  });
  py::dict out;
  const int64_t rows = batch->num_rows;
  const auto* base = reinterpret_cast<const char*>(batch->columns);
  for (int64_t i = 0; i < batch->num_columns; ++i) {
    const auto* c = reinterpret_cast<const traintl_column*>(base + i * batch->column_struct_size);
    std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(rows)};
    int64_t per_row = 1;
    for (int32_t d = 0; d < c->ndim; ++d) {
      shape.push_back(static_cast<py::ssize_t>(c->shape[d]));
      per_row *= c->shape[d];
    }
    if (c->dtype == TRAINTL_DTYPE_STRING) {
      // Python strings cannot view the batch; they are decoded copies.
      py::array column(py::dtype("O"), shape);
      auto** items = static_cast<PyObject**>(column.mutable_data());
      const auto* bytes = static_cast<const char*>(c->data);
      const int64_t n = rows * per_row;
      for (int64_t k = 0; k < n; ++k) {
        PyObject* s = PyUnicode_DecodeUTF8(
            bytes + c->offsets[k], static_cast<Py_ssize_t>(c->offsets[k + 1] - c->offsets[k]),
            "replace");
        if (s == nullptr) throw py::error_already_set();
        Py_XDECREF(items[k]);
        items[k] = s;
      }
      out[py::str(c->name)] = std::move(column);
      continue;
    }
    py::dtype dtype = NumpyDtype(c->dtype);
    std::vector<py::ssize_t> strides(shape.size());
    py::ssize_t stride = dtype.itemsize();
    for (size_t d = shape.size(); d-- > 0;) {
      strides[d] = stride;
      stride *= shape[d];
    }
    // Writable, like Ray's numpy batches: the batch is this rank's alone, and
    // torch.from_numpy warns about read-only arrays.
    out[py::str(c->name)] = py::array(dtype, shape, strides, c->data, keep);
  }
  return out;
}

// One epoch of a shard (_native.BatchIterator). next() may be called from any thread;
// calls are serialized, and the GIL is released while one waits for its batch.
class BatchIter {
 public:
  BatchIter(const traintl_dataset_api* api, traintl_batch_iter* iter) : api_(api), iter_(iter) {}
  BatchIter(const BatchIter&) = delete;
  BatchIter& operator=(const BatchIter&) = delete;
  // With the GIL held: the iterator's threads never take it.
  ~BatchIter() {
    std::lock_guard<std::mutex> lock(mu_);
    CloseLocked();
  }

  // The next batch as a dict of numpy arrays, or None at the end of the epoch.
  py::object Next() {
    const traintl_batch* batch = nullptr;
    char err[kErrorSize] = {0};
    int rc = TRAINTL_DATA_END;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu_);
      if (iter_ != nullptr) {
        rc = api_->iter_next(api_->ctx, iter_, &batch, err, sizeof err);
        // The epoch's threads are done; do not keep them until garbage collection.
        if (rc == TRAINTL_DATA_END) CloseLocked();
      }
    }
    if (rc == TRAINTL_DATA_END) return py::none();
    if (rc != TRAINTL_DATA_OK) ThrowDataError(rc, err);
    return BatchToDict(api_, batch);
  }

  py::object PyNext() {
    py::object batch = Next();
    if (batch.is_none()) throw py::stop_iteration();
    return batch;
  }

  // Stops the epoch's background threads.
  void Close() {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mu_);
    CloseLocked();
  }

 private:
  void CloseLocked() {
    if (iter_ != nullptr) api_->iter_close(api_->ctx, iter_);
    iter_ = nullptr;
  }

  const traintl_dataset_api* const api_;
  std::mutex mu_;
  traintl_batch_iter* iter_;  // guarded by mu_; null once closed
};

// This rank's shard of a dataset (_native.Shard). Thread-safe.
class Shard {
 public:
  Shard(std::string name, std::shared_ptr<ShardRef> ref)
      : name_(std::move(name)), ref_(std::move(ref)) {}

  const std::string& name() const { return name_; }

  std::string Info() {
    std::lock_guard<std::mutex> lock(info_mu_);  // shard_info's text lives until the next call
    const char* text = ref_->api->shard_info(ref_->api->ctx, ref_->shard);
    return text != nullptr ? text : "{}";
  }

  std::unique_ptr<BatchIter> Iter(const std::string& options_json) {
    traintl_batch_iter* iter = nullptr;
    char err[kErrorSize] = {0};
    int rc;
    {
      py::gil_scoped_release release;
      rc = ref_->api->iter_open(ref_->api->ctx, ref_->shard,
                                options_json.empty() ? nullptr : options_json.c_str(), &iter, err,
                                sizeof err);
    }
    if (rc != TRAINTL_DATA_OK) ThrowDataError(rc, err);
    return std::make_unique<BatchIter>(ref_->api, iter);
  }

 private:
  const std::string name_;
  const std::shared_ptr<ShardRef> ref_;
  std::mutex info_mu_;
};

std::unique_ptr<Shard> OpenShard(const std::string& name, const std::string& options_json) {
  const traintl_dataset_api& api = DatasetApi();
  traintl_dataset_shard* shard = nullptr;
  char err[kErrorSize] = {0};
  int rc;
  {
    // Reads the files' heads and may count every row: seconds on a large dataset.
    py::gil_scoped_release release;
    rc =
        api.shard_open(api.ctx, name.c_str(), options_json.empty() ? nullptr : options_json.c_str(),
                       &shard, err, sizeof err);
  }
  if (rc != TRAINTL_DATA_OK) ThrowDataError(rc, err);
  // Constructed in place: a temporary ShardRef would close the shard.
  return std::make_unique<Shard>(name, std::shared_ptr<ShardRef>(new ShardRef{&api, shard}));
}

}  // namespace
}  // namespace python
}  // namespace traintl

PYBIND11_MODULE(_native, m) {
  using namespace traintl::python;
  CloseChannelOnExec();
  m.doc() = "traintl's bindings over the worker's C ABI (traintl/abi.h); use traintl.train.";

  m.attr("ABI_VERSION") = TRAINTL_ABI_VERSION;
  m.attr("LOG_DEBUG") = TRAINTL_LOG_DEBUG;
  m.attr("LOG_INFO") = TRAINTL_LOG_INFO;
  m.attr("LOG_WARNING") = TRAINTL_LOG_WARNING;
  m.attr("LOG_ERROR") = TRAINTL_LOG_ERROR;

  m.def("_attach", &Attach, py::arg("capsule"),
        "Serves this module from traintl-worker's host API (called by the entry shim).");
  m.def("is_attached", &IsAttached,
        "True once a host is set up (attached by the shim or built from the environment).");
  m.def(
      "is_attached_to_worker",
      [] {
        std::lock_guard<std::mutex> lock(g_mu);
        return g_attached_to_worker;
      },
      "True when traintl-worker hosts this module (a python entry point), False for a "
      "command's program (or before the first call).");
  m.def("context_json", &ContextJson, "The rank's context (docs/WORKER_PROTOCOL.md) as JSON.");
  m.def("report", &Report, py::arg("metrics_json"), py::arg("checkpoint_dir") = py::none(),
        "Reports a JSON object of metrics, optionally with a checkpoint directory; returns once "
        "the agent accepted it. RuntimeError when the host refuses.");
  m.def("report_async", &ReportAsync, py::arg("metrics_json"), py::arg("checkpoint_dir"),
        "Reports metrics with a checkpoint directory; returns once its files are snapshotted "
        "(the upload runs in the background). RuntimeError when refused, or when an earlier "
        "upload failed.");
  m.def("wait_reports", &WaitReports,
        "Waits until every report so far was sent (background uploads done). RuntimeError "
        "with the error of a failed upload.");
  m.def("get_checkpoint", &GetCheckpoint, "The checkpoint directory to restore, or None.");
  m.def("regroup_wait", &RegroupWait, py::arg("min_generation"), py::arg("timeout_ms"),
        "Peer recovery: the latest regroup generation announced if >= min_generation, waiting "
        "up to timeout_ms; 0 when none came, -1 when the job is stopping.");
  m.def("next_report_seq", &NextReportSeq, "Peer recovery: the seq of the next report.");
  m.def("regroup_info", &RegroupInfo,
        "The latest regroup announced as JSON (generation; for an elastic job ranks, "
        "store_addr, store_port), or None.");
  m.def("skip_report_seq", &SkipReportSeq, py::arg("seq"),
        "Peer recovery: continues the report sequence at seq (never backwards).");
  m.def("should_stop", &ShouldStop, "True once the job was asked to stop.");
  m.def(
      "_progress_collective", [] { Progress().CollectiveEntered(); },
      "Progress: the rank launched its next collective.");
  m.def(
      "_progress_wait",
      [](bool begins) { begins ? Progress().WaitBegins() : Progress().WaitEnds(); },
      py::arg("begins"), "Progress: the rank begins (True) or ends waiting for its peers.");
  m.def(
      "_progress_step", [] { Progress().StepDone(); },
      "Progress: a training step's gradients are synchronized.");
  m.def(
      "_progress_hooks",
      [] {
        static const traintl_progress_hooks hooks = {
            [] { Progress().CollectiveEntered(); },
            [](int begins) { begins != 0 ? Progress().WaitBegins() : Progress().WaitEnds(); }};
        return py::capsule(&hooks, traintl::python::kProgressHooksCapsule);
      },
      "Progress: the calls above as C function pointers, for traintl._c10d.");
  m.def("log", &Log, py::arg("level"), py::arg("message"), "A line in the rank's log.");

  py::class_<BatchIter>(m, "BatchIterator")
      .def("next", &BatchIter::Next,
           "The next batch (dict of numpy arrays), or None at the end of the epoch.")
      .def("close", &BatchIter::Close, "Stops the epoch's background threads.")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &BatchIter::PyNext);

  py::class_<Shard>(m, "Shard")
      .def_property_readonly("name", &Shard::name)
      .def("info", &Shard::Info, "The shard as JSON: files, columns, num_rows, ...")
      .def("iter", &Shard::Iter, py::arg("options_json") = "",
           "Starts one epoch; options as traintl_dataset_api.iter_open takes them.");

  m.def("open_shard", &OpenShard, py::arg("name"), py::arg("options_json") = "",
        "This rank's shard of the job spec's dataset `name`. ValueError for bad data or "
        "options, OSError for I/O failures.");
}
