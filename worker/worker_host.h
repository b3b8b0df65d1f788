// WorkerHost: the host side of the C ABI (traintl/abi.h). It serves the library's SDK
// calls from the worker context and the agent channel: report() stages checkpoint files
// and sends the report; should_stop() reflects the agent's stop message.
//
// Acks: a report with a checkpoint returns once the head has acknowledged it and every
// report before it. Metrics alone do not wait (a per-step report would otherwise cost the
// loop a round trip through the daemon each step), up to kMaxUnackedReports in flight:
// beyond that report() waits for the oldest, so a loop cannot outrun the head without
// bound. A tuning trial's ranks (hold_reports in the context) wait for every report's ack:
// the head gives it after the tuner decided on that result, so a trial the scheduler stops
// trains no further epoch (a stop ends the wait instead; kMaxHold bounds it).
//
// Asynchronous checkpoints (report_async, report_deferred; traintl/abi.h): the report's
// seq is reserved at call time and the report goes into a queue that upload_thread_
// empties in order: it persists the front report's checkpoint files into the staging dir
// (CheckpointSnapshot::Persist, or waits for a deferred report's files), then sends it and
// every metrics-only report queued behind it. While the queue is not empty every report
// goes through it, so the agent sees each rank's seqs in order. At most one checkpoint is
// queued: a report with a checkpoint first waits until the queue is empty. A report never
// goes out before its files are complete in the staging dir, so the head cannot merge, and
// so never commits, a half-written checkpoint, whenever the worker or the daemon dies.
// A failed upload is sticky: what is queued is dropped, and every later report call and
// FinishReports return its error.
//
// Thread-safety: the callbacks may be called from any thread; report calls are
// serialized by report_mu_ (the seq order is the order of the calls).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "common/thread_annotations.h"
#include "proto/rank_context.h"
#include "traintl/abi.h"
#include "worker/agent_channel.h"
#include "worker/checkpoint_snapshot.h"
#include "worker/data/dataset_service.h"

namespace traintl {
namespace worker {

class WorkerHost {
 public:
  // `channel` must outlive this object.
  WorkerHost(RankContext context, AgentChannel* channel);
  WorkerHost(const WorkerHost&) = delete;
  WorkerHost& operator=(const WorkerHost&) = delete;

  // The struct handed to the entry point; points back at this object.
  const traintl_host_api* api() const { return &api_; }

  // Non-empty once a dataset call failed because of the data (a missing file, a malformed
  // row, ...): a failure of the attempt is then not worth retrying.
  std::string bad_data_error() const { return datasets_.bad_data_error(); }

  // report(): see traintl_host_api.report.
  Status Report(const char* metrics_json, const char* checkpoint_dir);
  // report_async(): see traintl_host_api.report_async.
  Status ReportAsync(const char* metrics_json, const char* checkpoint_dir,
                     const char* options_json);
  // report_deferred(): reserves a seq; returns its ticket (the seq) and the directory the
  // caller writes the files into.
  Result<std::pair<int64_t, std::string>> ReportDeferred(const char* metrics_json,
                                                         const char* options_json);
  // report_deferred_done(): `error` nullptr when the files are complete.
  Status ReportDeferredDone(int64_t ticket, const char* error);
  // wait_reports(): until the queue is empty (or an upload failed).
  Status WaitReports();
  // next_report_seq() and skip_report_seq(): see traintl_host_api (peer recovery).
  int64_t NextReportSeq();
  Status SkipReportSeq(int64_t seq);
  // The end of a successful entry point: WaitReports, but once a stop was requested it
  // waits at most kStopDrain more and then abandons what is left (logged; the job is
  // being stopped, and the agent kills the rank after its grace period anyway). The
  // upload's error, if one failed.
  Status FinishReports();

  // Reports of metrics alone that may wait for their ack at once.
  static constexpr size_t kMaxUnackedReports = 16;
  // Longest wait for a held report's ack: past it the rank goes on (the head that held it
  // may have failed over).
  static constexpr std::chrono::milliseconds kMaxHold{30000};
  // How long FinishReports still waits for uploads once a stop was requested: below the
  // agent's default stop grace (3 s, WorkerPoolOptions::stop_grace), so a rank that was
  // asked to stop ends by itself.
  static constexpr std::chrono::milliseconds kStopDrain{2000};
  // How often progress (traintl_host_api.progress) is sent, when it changed.
  static constexpr std::chrono::milliseconds kProgressInterval{250};
  // While the rank waits in a collective it is sent again this often, unchanged but for
  // waiting_s: a rank that stops sending (SIGSTOP, a hung process) then stands out from
  // the ones that wait for it.
  static constexpr std::chrono::milliseconds kWaitingResend{1000};

  ~WorkerHost();

  // Copies `src` (no fsync: the head's merge makes what it commits durable) into
  // <staging_dir>/seq_<seq>/rank_<rank>/ and returns that path.
  static Result<std::string> StageCheckpoint(const std::string& src, const std::string& staging_dir,
                                             int64_t seq, int rank);
  // <staging_dir>/seq_<seq>/rank_<rank>.
  static std::string StagedPath(const std::string& staging_dir, int64_t seq, int rank);

  // How asynchronous reports snapshot files. Set before the first report (tests).
  void set_snapshot_options(SnapshotOptions options) { snapshot_options_ = std::move(options); }

 private:
  // A report waiting in the upload queue.
  struct Pending {
    int64_t seq = 0;
    nlohmann::json metrics;
    enum class Kind { kMetrics, kSnapshot, kDeferred } kind = Kind::kMetrics;
    std::unique_ptr<CheckpointSnapshot> snapshot;  // kSnapshot
    std::string staged;                            // kSnapshot, kDeferred: the staged dir
    bool files_done = false;                       // kDeferred: report_deferred_done called
    std::string files_error;                       // ... with this error
  };

  // Report with report_mu_ held.
  Status ReportLocked(nlohmann::json metrics, const char* checkpoint_dir)
      TRAINTL_REQUIRES(report_mu_);
  // Parses and checks a metrics object.
  static Result<nlohmann::json> ParseMetrics(const char* metrics_json);
  // Refuses options_json keys (there are none yet).
  static Status CheckOptions(const char* options_json);
  // With report_mu_ held: sends one report now and keeps its seq among the unacked.
  Status SendNow(int64_t seq, nlohmann::json metrics, std::string checkpoint)
      TRAINTL_REQUIRES(report_mu_);
  // With report_mu_ held: waits until at most `limit` reports are queued or unacked.
  Status WaitInFlight(size_t limit) TRAINTL_REQUIRES(report_mu_);
  // With report_mu_ held: waits until the queue is empty (the previous upload done).
  Status WaitQueueEmpty() TRAINTL_REQUIRES(report_mu_);
  // Queues a report and starts upload_thread_ when needed.
  void Enqueue(Pending pending) TRAINTL_REQUIRES(report_mu_);
  // upload_thread_'s loop.
  void UploadLoop();
  // The sticky error of a failed upload, as report calls return it.
  Status UploadFailed() const TRAINTL_REQUIRES(queue_mu_);

  static const char* GetContextJson(void* host);
  static int ReportThunk(void* host, const char* metrics_json, const char* checkpoint_dir,
                         char* err, size_t err_len);
  static int ReportAsyncThunk(void* host, const char* metrics_json, const char* checkpoint_dir,
                              const char* options_json, char* err, size_t err_len);
  static int ReportDeferredThunk(void* host, const char* metrics_json, const char* options_json,
                                 int64_t* ticket, char* dir, size_t dir_len, char* err,
                                 size_t err_len);
  static int ReportDeferredDoneThunk(void* host, int64_t ticket, const char* error, char* err,
                                     size_t err_len);
  static int WaitReportsThunk(void* host, char* err, size_t err_len);
  static int64_t RegroupWaitThunk(void* host, int64_t min_generation, int64_t timeout_ms);
  static int64_t NextReportSeqThunk(void* host);
  static int SkipReportSeqThunk(void* host, int64_t seq, char* err, size_t err_len);
  static const char* RegroupInfoThunk(void* host);
  static const char* GetCheckpoint(void* host);
  static int ShouldStop(void* host);
  static void Log(void* host, int level, const char* msg);
  static void ProgressThunk(void* host, const traintl_progress* progress);
  // Sends the latest progress when it changed, every kProgressInterval, until destroyed.
  void ProgressLoop();

  // regroup_info()'s answers: each stays valid until the process exits (traintl/abi.h).
  std::mutex regroup_mu_;
  std::deque<std::string> regroup_infos_ TRAINTL_GUARDED_BY(regroup_mu_);

  const RankContext context_;
  const std::string context_json_;
  AgentChannel* const channel_;
  data::DatasetService datasets_;
  traintl_host_api api_;
  SnapshotOptions snapshot_options_;  // constant once reports start
  // Serializes the report calls (seq order = call order); held while a call waits.
  std::mutex report_mu_;
  int64_t next_seq_ TRAINTL_GUARDED_BY(report_mu_) = 0;  // K of the next report of this attempt

  // The upload queue, shared by the report calls and upload_thread_. Never held while
  // copying files or waiting for an ack.
  mutable std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<Pending> queue_ TRAINTL_GUARDED_BY(queue_mu_);    // oldest first
  std::deque<int64_t> unacked_ TRAINTL_GUARDED_BY(queue_mu_);  // sent, oldest first
  Status upload_error_ TRAINTL_GUARDED_BY(queue_mu_);          // sticky
  bool abandon_ TRAINTL_GUARDED_BY(queue_mu_) = false;         // FinishReports gave up
  bool upload_stop_ TRAINTL_GUARDED_BY(queue_mu_) = false;     // the destructor runs
  std::thread upload_thread_;  // started by the first queued report, under report_mu_

  // Progress: written by the training loop's threads, sent by progress_thread_ (started by
  // the first progress call: a library that never calls it costs no thread).
  std::mutex progress_mu_;
  std::condition_variable progress_cv_;
  traintl_progress progress_ TRAINTL_GUARDED_BY(progress_mu_){};
  std::chrono::steady_clock::time_point waiting_since_ TRAINTL_GUARDED_BY(progress_mu_){};
  bool progress_changed_ TRAINTL_GUARDED_BY(progress_mu_) = false;
  bool progress_stop_ TRAINTL_GUARDED_BY(progress_mu_) = false;
  std::thread progress_thread_;  // joinable once started; started under progress_mu_
};

}  // namespace worker
}  // namespace traintl
