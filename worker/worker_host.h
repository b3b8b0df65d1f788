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
// Thread-safety: the callbacks may be called from any thread; report() calls are
// serialized (the seq order is the order in which reports reach the agent).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "common/result.h"
#include "common/thread_annotations.h"
#include "proto/rank_context.h"
#include "traintl/abi.h"
#include "worker/agent_channel.h"
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

  // Reports of metrics alone that may wait for their ack at once.
  static constexpr size_t kMaxUnackedReports = 16;
  // Longest wait for a held report's ack: past it the rank goes on (the head that held it
  // may have failed over).
  static constexpr std::chrono::milliseconds kMaxHold{30000};
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

 private:
  static const char* GetContextJson(void* host);
  static int ReportThunk(void* host, const char* metrics_json, const char* checkpoint_dir,
                         char* err, size_t err_len);
  static const char* GetCheckpoint(void* host);
  static int ShouldStop(void* host);
  static void Log(void* host, int level, const char* msg);
  static void ProgressThunk(void* host, const traintl_progress* progress);
  // Sends the latest progress when it changed, every kProgressInterval, until destroyed.
  void ProgressLoop();

  const RankContext context_;
  const std::string context_json_;
  AgentChannel* const channel_;
  data::DatasetService datasets_;
  traintl_host_api api_;
  std::mutex report_mu_;
  int64_t next_seq_ TRAINTL_GUARDED_BY(report_mu_) = 0;  // K of the next report of this attempt
  std::deque<int64_t> unacked_ TRAINTL_GUARDED_BY(report_mu_);  // sent, oldest first

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
