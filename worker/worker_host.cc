#include "worker/worker_host.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "common/file_util.h"
#include "common/json_depth.h"
#include "common/logging.h"

namespace traintl {
namespace worker {

WorkerHost::WorkerHost(RankContext context, AgentChannel* channel)
    : context_(std::move(context)),
      context_json_(context_.json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)),
      channel_(channel),
      datasets_(context_.json) {
  std::memset(&api_, 0, sizeof api_);
  api_.struct_size = sizeof(traintl_host_api);
  api_.abi_version = TRAINTL_ABI_VERSION;
  api_.host = this;
  api_.get_context_json = &WorkerHost::GetContextJson;
  api_.report = &WorkerHost::ReportThunk;
  api_.get_checkpoint = &WorkerHost::GetCheckpoint;
  api_.should_stop = &WorkerHost::ShouldStop;
  api_.log = &WorkerHost::Log;
  api_.datasets = datasets_.api();
  // NO_TRAINTL_PROGRESS=1 in a job's env turns progress off (bench/progress measures its
  // cost; TRAINTL_* names are the runtime's).
  const char* off = std::getenv("NO_TRAINTL_PROGRESS");
  if (off == nullptr || std::string(off) != "1") api_.progress = &WorkerHost::ProgressThunk;
}

WorkerHost::~WorkerHost() {
  {
    std::lock_guard<std::mutex> l(progress_mu_);
    progress_stop_ = true;
  }
  progress_cv_.notify_all();
  if (progress_thread_.joinable()) progress_thread_.join();
}

void WorkerHost::ProgressThunk(void* host, const traintl_progress* progress) {
  if (host == nullptr || progress == nullptr) return;
  auto* self = static_cast<WorkerHost*>(host);
  std::lock_guard<std::mutex> l(self->progress_mu_);
  if (progress->in_collective && !self->progress_.in_collective)
    self->waiting_since_ = std::chrono::steady_clock::now();
  self->progress_ = *progress;
  self->progress_changed_ = true;
  if (!self->progress_thread_.joinable() && !self->progress_stop_)
    self->progress_thread_ = std::thread([self] { self->ProgressLoop(); });
}

void WorkerHost::ProgressLoop() {
  std::unique_lock<std::mutex> l(progress_mu_);
  auto last_sent = std::chrono::steady_clock::now();
  while (!progress_stop_) {
    progress_cv_.wait_for(l, kProgressInterval, [this] { return progress_stop_; });
    if (progress_stop_) continue;
    const auto now = std::chrono::steady_clock::now();
    const bool resend = progress_.in_collective && now - last_sent >= kWaitingResend;
    if (!progress_changed_ && !resend) continue;
    progress_changed_ = false;
    last_sent = now;
    events::Progress p;
    p.steps = static_cast<int64_t>(progress_.steps);
    p.step_s = progress_.step_s;
    p.busy_s = progress_.busy_s;
    p.collective_seq = static_cast<int64_t>(progress_.collective_seq);
    p.in_collective = progress_.in_collective != 0;
    if (p.in_collective)
      p.waiting_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - waiting_since_).count();
    l.unlock();
    // Best effort: a closed channel means the agent is gone, and the exit follows.
    (void)channel_->Send(p);
    l.lock();
  }
}

Result<std::string> WorkerHost::StageCheckpoint(const std::string& src,
                                                const std::string& staging_dir, int64_t seq,
                                                int rank) {
  if (!IsDirectory(src)) {
    return Status::InvalidArgument("checkpoint directory " + src +
                                   " does not exist or is not a directory");
  }
  const std::string seq_dir = JoinPath(staging_dir, "seq_" + std::to_string(seq));
  const std::string dst = JoinPath(seq_dir, "rank_" + std::to_string(rank));
  TRAINTL_RETURN_IF_ERROR(MakeDirs(seq_dir));
  // Only a leftover of a crashed copy can be there; never merge with it.
  TRAINTL_RETURN_IF_ERROR(RemoveAll(dst));
  // No fsync here, on the training loop's path: the head's merge fsyncs every file it
  // moves out of the staging dir before the checkpoint can be committed
  // (daemon/head/checkpoint_merge.h), and what a crash loses before that was never
  // recorded.
  TRAINTL_RETURN_IF_ERROR(CopyTree(src, dst));
  return dst;
}

Status WorkerHost::Report(const char* metrics_json, const char* checkpoint_dir) {
  nlohmann::json metrics = ParseJsonBounded(metrics_json != nullptr ? metrics_json : "");
  if (metrics.is_discarded() || !metrics.is_object()) {
    return Status::InvalidArgument("metrics must be a JSON object nested at most " +
                                   std::to_string(kMaxJsonDepth) + " levels deep");
  }
  std::lock_guard<std::mutex> lock(report_mu_);
  const int64_t seq = next_seq_;
  std::string checkpoint;  // "" = none
  if (checkpoint_dir != nullptr) {
    auto staged = StageCheckpoint(AbsolutePath(checkpoint_dir), context_.staging_dir, seq,
                                  context_.world_rank);
    if (!staged.ok()) {
      return Status(staged.status().code(),
                    "staging the checkpoint failed: " + staged.status().message());
    }
    checkpoint = *staged;
  }
  // A failed report does not use up its seq: every rank must send the same sequence.
  ++next_seq_;
  const bool held = context_.hold_reports;
  const size_t may_stay_unacked = checkpoint.empty() && !held ? kMaxUnackedReports : 0;
  TRAINTL_RETURN_IF_ERROR(channel_->Send(
      events::Report{static_cast<int>(seq), std::move(metrics), std::move(checkpoint), held}));
  if (held) {
    channel_->WaitForHeldAck(seq, kMaxHold);
    return Status::Ok();
  }
  unacked_.push_back(seq);
  while (unacked_.size() > may_stay_unacked) {
    channel_->WaitForAck(unacked_.front());
    unacked_.pop_front();
  }
  return Status::Ok();
}

const char* WorkerHost::GetContextJson(void* host) {
  return static_cast<WorkerHost*>(host)->context_json_.c_str();
}

int WorkerHost::ReportThunk(void* host, const char* metrics_json, const char* checkpoint_dir,
                            char* err, size_t err_len) {
  Status st = static_cast<WorkerHost*>(host)->Report(metrics_json, checkpoint_dir);
  if (st.ok()) return 0;
  if (err != nullptr && err_len > 0) {
    size_t n = std::min(st.message().size(), err_len - 1);
    std::memcpy(err, st.message().data(), n);
    err[n] = '\0';
  }
  return 1;
}

const char* WorkerHost::GetCheckpoint(void* host) {
  const auto& dir = static_cast<WorkerHost*>(host)->context_.checkpoint_dir;
  return dir ? dir->c_str() : nullptr;
}

int WorkerHost::ShouldStop(void* host) {
  return static_cast<WorkerHost*>(host)->channel_->stop_requested() ? 1 : 0;
}

void WorkerHost::Log(void* host, int level, const char* msg) {
  if (level < TRAINTL_LOG_DEBUG) level = TRAINTL_LOG_DEBUG;
  if (level > TRAINTL_LOG_ERROR) level = TRAINTL_LOG_ERROR;
  const auto log_level = static_cast<LogLevel>(level);
  if (log_level < GetLogLevel()) return;
  LogMessage(log_level).stream() << (msg != nullptr ? msg : "");
}

}  // namespace worker
}  // namespace traintl
