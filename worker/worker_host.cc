#include "worker/worker_host.h"

#include <algorithm>
#include <cstdint>
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
      datasets_(context_.json, channel->stop_flag()) {
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
  api_.report_async = &WorkerHost::ReportAsyncThunk;
  api_.report_deferred = &WorkerHost::ReportDeferredThunk;
  api_.report_deferred_done = &WorkerHost::ReportDeferredDoneThunk;
  api_.wait_reports = &WorkerHost::WaitReportsThunk;
  api_.regroup_wait = &WorkerHost::RegroupWaitThunk;
  api_.next_report_seq = &WorkerHost::NextReportSeqThunk;
  api_.skip_report_seq = &WorkerHost::SkipReportSeqThunk;
  api_.regroup_info = &WorkerHost::RegroupInfoThunk;
  // Test only (tests/e2e/test_async_checkpoints.py): slows the background write so that a
  // kill lands in the middle of it. Not TRAINTL_*: those names are the runtime's, refused
  // in a job spec's env.
  if (const char* delay = std::getenv("TEST_TRAINTL_UPLOAD_DELAY_MS_PER_MIB"))
    snapshot_options_.persist_delay_ms_per_mib = std::atoi(delay);
  // NO_TRAINTL_PROGRESS=1 in a job's env turns progress off (bench/progress measures its
  // cost; TRAINTL_* names are the runtime's).
  const char* off = std::getenv("NO_TRAINTL_PROGRESS");
  if (off == nullptr || std::string(off) != "1") api_.progress = &WorkerHost::ProgressThunk;
}

WorkerHost::~WorkerHost() {
  {
    std::lock_guard<std::mutex> q(queue_mu_);
    upload_stop_ = true;
    abandon_ = true;
  }
  queue_cv_.notify_all();
  if (upload_thread_.joinable()) upload_thread_.join();
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

std::string WorkerHost::StagedPath(const std::string& staging_dir, int64_t seq, int rank) {
  return JoinPath(JoinPath(staging_dir, "seq_" + std::to_string(seq)),
                  "rank_" + std::to_string(rank));
}

Result<nlohmann::json> WorkerHost::ParseMetrics(const char* metrics_json) {
  const std::string_view text = metrics_json != nullptr ? metrics_json : "";
  if (JsonTooDeep(text)) {
    return Status::InvalidArgument("metrics must be a JSON object nested at most " +
                                   std::to_string(kMaxJsonDepth) + " levels deep");
  }
  nlohmann::json metrics;
  try {
    metrics = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    // The parser's reason: a number out of range (1e309), a lone surrogate, a syntax error.
    return Status::InvalidArgument(std::string("metrics are not valid JSON: ") + e.what());
  }
  if (!metrics.is_object()) {
    return Status::InvalidArgument(std::string("metrics must be a JSON object, not ") +
                                   metrics.type_name());
  }
  const size_t bytes = events::ReportMetricsBytes(metrics);
  if (bytes > events::kMaxReportMetricsBytes) {
    return Status::InvalidArgument(
        "metrics take " + std::to_string(bytes) + " bytes as JSON, over the " +
        std::to_string(events::kMaxReportMetricsBytes / 1024) +
        " KiB a report may carry (save large values as files of the checkpoint)");
  }
  return metrics;
}

Status WorkerHost::CheckOptions(const char* options_json) {
  if (options_json == nullptr) return Status::Ok();
  nlohmann::json options = ParseJsonBounded(options_json);
  if (options.is_discarded() || !options.is_object())
    return Status::InvalidArgument("report options must be a JSON object");
  if (!options.empty())
    return Status::InvalidArgument("unknown report option '" + options.begin().key() +
                                   "' (this worker knows none)");
  return Status::Ok();
}

Status WorkerHost::UploadFailed() const { return upload_error_; }

Status WorkerHost::Report(const char* metrics_json, const char* checkpoint_dir) {
  TRAINTL_ASSIGN_OR_RETURN(nlohmann::json metrics, ParseMetrics(metrics_json));
  std::lock_guard<std::mutex> lock(report_mu_);
  return ReportLocked(std::move(metrics), checkpoint_dir);
}

Status WorkerHost::ReportLocked(nlohmann::json metrics, const char* checkpoint_dir) {
  const bool held = context_.hold_reports;
  {
    std::unique_lock<std::mutex> q(queue_mu_);
    if (!upload_error_.ok()) return UploadFailed();
    if (!queue_.empty() && checkpoint_dir == nullptr && !held) {
      // Behind an upload: queued, and back to the loop at once (within the bound).
      q.unlock();
      Pending pending;
      pending.seq = next_seq_++;
      pending.metrics = std::move(metrics);
      Enqueue(std::move(pending));
      return WaitInFlight(kMaxUnackedReports);
    }
  }
  // A checkpoint (or a held report) goes out from here, so whatever is queued first.
  TRAINTL_RETURN_IF_ERROR(WaitQueueEmpty());
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
  if (held) {
    TRAINTL_RETURN_IF_ERROR(channel_->Send(
        events::Report{static_cast<int>(seq), std::move(metrics), std::move(checkpoint), true}));
    channel_->WaitForHeldAck(seq, kMaxHold);
    return Status::Ok();
  }
  const bool has_checkpoint = !checkpoint.empty();
  TRAINTL_RETURN_IF_ERROR(SendNow(seq, std::move(metrics), std::move(checkpoint)));
  return WaitInFlight(has_checkpoint ? 0 : kMaxUnackedReports);
}

Status WorkerHost::SendNow(int64_t seq, nlohmann::json metrics, std::string checkpoint) {
  TRAINTL_RETURN_IF_ERROR(channel_->Send(
      events::Report{static_cast<int>(seq), std::move(metrics), std::move(checkpoint), false}));
  std::lock_guard<std::mutex> q(queue_mu_);
  unacked_.push_back(seq);
  return Status::Ok();
}

Status WorkerHost::WaitInFlight(size_t limit) {
  std::unique_lock<std::mutex> q(queue_mu_);
  for (;;) {
    if (!upload_error_.ok()) return UploadFailed();
    if (queue_.size() + unacked_.size() <= limit) return Status::Ok();
    if (unacked_.empty()) {
      // Everything beyond the limit is still queued: wait for the upload thread to send.
      queue_cv_.wait(q);
      continue;
    }
    const int64_t seq = unacked_.front();
    q.unlock();
    channel_->WaitForAck(seq);
    q.lock();
    // Only report calls (serialized by report_mu_) pop; the upload thread only appends.
    unacked_.pop_front();
  }
}

Status WorkerHost::WaitQueueEmpty() { return WaitReports(); }

void WorkerHost::Enqueue(Pending pending) {
  {
    std::lock_guard<std::mutex> q(queue_mu_);
    queue_.push_back(std::move(pending));
  }
  queue_cv_.notify_all();
  if (!upload_thread_.joinable()) upload_thread_ = std::thread([this] { UploadLoop(); });
}

Status WorkerHost::ReportAsync(const char* metrics_json, const char* checkpoint_dir,
                               const char* options_json) {
  TRAINTL_ASSIGN_OR_RETURN(nlohmann::json metrics, ParseMetrics(metrics_json));
  TRAINTL_RETURN_IF_ERROR(CheckOptions(options_json));
  std::lock_guard<std::mutex> lock(report_mu_);
  if (checkpoint_dir == nullptr) return ReportLocked(std::move(metrics), nullptr);
  if (context_.hold_reports) {
    // A tuning trial's report waits for the scheduler's decision anyway.
    LOG_DEBUG << "report " << next_seq_ << ": held reports upload synchronously";
    return ReportLocked(std::move(metrics), checkpoint_dir);
  }
  // At most one upload in flight: its memory snapshot is the bound on what a rank keeps.
  TRAINTL_RETURN_IF_ERROR(WaitQueueEmpty());
  const int64_t seq = next_seq_;
  const std::string staged = StagedPath(context_.staging_dir, seq, context_.world_rank);
  auto snapshot = CheckpointSnapshot::Take(AbsolutePath(checkpoint_dir), staged, snapshot_options_);
  if (!snapshot.ok()) {
    if (snapshot.status().code() != Status::Code::kResourceExhausted) {
      return Status(snapshot.status().code(),
                    "snapshotting the checkpoint failed: " + snapshot.status().message());
    }
    LOG_WARN << "report " << seq << ": no room to snapshot the checkpoint in memory ("
             << snapshot.status().message() << "); copying it synchronously";
    return ReportLocked(std::move(metrics), checkpoint_dir);
  }
  LOG_DEBUG << "report " << seq << ": snapshot of " << (*snapshot)->files() << " files, "
            << (*snapshot)->cloned_bytes() << " bytes cloned, " << (*snapshot)->memory_bytes()
            << " in memory";
  ++next_seq_;
  Pending pending;
  pending.seq = seq;
  pending.metrics = std::move(metrics);
  pending.kind = Pending::Kind::kSnapshot;
  pending.snapshot = std::move(*snapshot);
  pending.staged = staged;
  Enqueue(std::move(pending));
  return WaitInFlight(kMaxUnackedReports);
}

Result<std::pair<int64_t, std::string>> WorkerHost::ReportDeferred(const char* metrics_json,
                                                                   const char* options_json) {
  TRAINTL_ASSIGN_OR_RETURN(nlohmann::json metrics, ParseMetrics(metrics_json));
  TRAINTL_RETURN_IF_ERROR(CheckOptions(options_json));
  std::lock_guard<std::mutex> lock(report_mu_);
  TRAINTL_RETURN_IF_ERROR(WaitQueueEmpty());
  const int64_t seq = next_seq_;
  const std::string staged = StagedPath(context_.staging_dir, seq, context_.world_rank);
  // Only a leftover of a crashed attempt can be there; never merge with it.
  TRAINTL_RETURN_IF_ERROR(RemoveAll(staged));
  TRAINTL_RETURN_IF_ERROR(MakeDirs(staged));
  ++next_seq_;
  Pending pending;
  pending.seq = seq;
  pending.metrics = std::move(metrics);
  pending.kind = Pending::Kind::kDeferred;
  pending.staged = staged;
  Enqueue(std::move(pending));
  TRAINTL_RETURN_IF_ERROR(WaitInFlight(kMaxUnackedReports));
  return std::make_pair(seq, staged);
}

Status WorkerHost::ReportDeferredDone(int64_t ticket, const char* error) {
  std::lock_guard<std::mutex> q(queue_mu_);
  for (auto& p : queue_) {
    if (p.kind != Pending::Kind::kDeferred || p.seq != ticket || p.files_done) continue;
    p.files_done = true;
    p.files_error = error == nullptr ? "" : *error != '\0' ? error : "unknown error";
    queue_cv_.notify_all();
    return Status::Ok();
  }
  // Dropped with the queue after another upload failed (or was abandoned): that error is
  // what the next report call returns.
  if (!upload_error_.ok() || abandon_) return Status::Ok();
  return Status::InvalidArgument("no deferred report " + std::to_string(ticket) +
                                 " is waiting for its files");
}

void WorkerHost::UploadLoop() {
  std::unique_lock<std::mutex> q(queue_mu_);
  for (;;) {
    queue_cv_.wait(q, [this] {
      return upload_stop_ || (!queue_.empty() && (queue_.front().kind != Pending::Kind::kDeferred ||
                                                  queue_.front().files_done || abandon_));
    });
    if (upload_stop_) return;
    // A reference to the front stays valid while others push_back (std::deque).
    Pending& p = queue_.front();
    Status st;
    if (abandon_) {
      st = Status::Unavailable("abandoned: the rank was asked to stop");
    } else if (p.kind == Pending::Kind::kSnapshot) {
      q.unlock();
      st = p.snapshot->Persist([this] {
        std::lock_guard<std::mutex> l(queue_mu_);
        return abandon_ || upload_stop_;
      });
      q.lock();
      p.snapshot.reset();  // frees what it held in memory
    } else if (p.kind == Pending::Kind::kDeferred && !p.files_error.empty()) {
      st = Status::Internal("writing its files failed: " + p.files_error);
    }
    if (st.ok()) {
      events::Report report{static_cast<int>(p.seq), std::move(p.metrics), p.staged,
                            context_.hold_reports};
      // Still at the front while it is sent: later reports stay queued behind it.
      q.unlock();
      st = channel_->Send(report);
      q.lock();
    }
    if (!st.ok()) {
      upload_error_ =
          Status(st.code(), "the checkpoint of report " + std::to_string(p.seq) +
                                " (uploaded in the background) failed: " + st.message());
      if (!abandon_) LOG_ERROR << upload_error_.message();
      if (!p.staged.empty()) (void)RemoveAll(p.staged);
      // The attempt's report sequence ends here: nothing queued behind it may go out.
      queue_.clear();
      queue_cv_.notify_all();
      continue;
    }
    unacked_.push_back(p.seq);
    queue_.pop_front();
    queue_cv_.notify_all();
  }
}

Status WorkerHost::WaitReports() {
  std::unique_lock<std::mutex> q(queue_mu_);
  queue_cv_.wait(q, [this] { return queue_.empty() || !upload_error_.ok(); });
  return UploadFailed();
}

Status WorkerHost::FinishReports() {
  std::unique_lock<std::mutex> q(queue_mu_);
  auto next_log = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (upload_error_.ok() && !queue_.empty() && !channel_->stop_requested()) {
    queue_cv_.wait_for(q, std::chrono::milliseconds(50));
    if (std::chrono::steady_clock::now() >= next_log && !queue_.empty()) {
      LOG_INFO << "waiting for the checkpoint of report " << queue_.front().seq
               << " to be uploaded before ending";
      next_log += std::chrono::seconds(30);
    }
  }
  if (upload_error_.ok() && !queue_.empty()) {
    // Asked to stop: the agent kills the rank after its grace period anyway.
    queue_cv_.wait_for(q, kStopDrain, [this] { return queue_.empty() || !upload_error_.ok(); });
    if (upload_error_.ok() && !queue_.empty()) {
      LOG_WARN << "stopping: the checkpoint of report " << queue_.front().seq
               << " is abandoned (not uploaded after " << kStopDrain.count()
               << " ms); it is not committed";
      abandon_ = true;
      queue_cv_.notify_all();
      return Status::Ok();
    }
  }
  return UploadFailed();
}

const char* WorkerHost::GetContextJson(void* host) {
  return static_cast<WorkerHost*>(host)->context_json_.c_str();
}

namespace {

// 0, or 1 with the status's message in err.
int ToReturnCode(const Status& st, char* err, size_t err_len) {
  if (st.ok()) return 0;
  if (err != nullptr && err_len > 0) {
    size_t n = std::min(st.message().size(), err_len - 1);
    std::memcpy(err, st.message().data(), n);
    err[n] = '\0';
  }
  return 1;
}

}  // namespace

int WorkerHost::ReportThunk(void* host, const char* metrics_json, const char* checkpoint_dir,
                            char* err, size_t err_len) {
  return ToReturnCode(static_cast<WorkerHost*>(host)->Report(metrics_json, checkpoint_dir), err,
                      err_len);
}

int WorkerHost::ReportAsyncThunk(void* host, const char* metrics_json, const char* checkpoint_dir,
                                 const char* options_json, char* err, size_t err_len) {
  return ToReturnCode(
      static_cast<WorkerHost*>(host)->ReportAsync(metrics_json, checkpoint_dir, options_json), err,
      err_len);
}

int WorkerHost::ReportDeferredThunk(void* host, const char* metrics_json, const char* options_json,
                                    int64_t* ticket, char* dir, size_t dir_len, char* err,
                                    size_t err_len) {
  if (ticket == nullptr || dir == nullptr || dir_len == 0)
    return ToReturnCode(Status::InvalidArgument("report_deferred: no ticket or dir buffer"), err,
                        err_len);
  auto reserved = static_cast<WorkerHost*>(host)->ReportDeferred(metrics_json, options_json);
  if (!reserved.ok()) return ToReturnCode(reserved.status(), err, err_len);
  if (reserved->second.size() >= dir_len) {
    // The seq is taken; its files can never arrive: fail the upload so no later report
    // goes out with a gap in the sequence.
    (void)static_cast<WorkerHost*>(host)->ReportDeferredDone(reserved->first,
                                                             "the directory buffer is too small");
    return ToReturnCode(Status::InvalidArgument("report_deferred: dir_len " +
                                                std::to_string(dir_len) + " is too small"),
                        err, err_len);
  }
  std::memcpy(dir, reserved->second.c_str(), reserved->second.size() + 1);
  *ticket = reserved->first;
  return 0;
}

int WorkerHost::ReportDeferredDoneThunk(void* host, int64_t ticket, const char* error, char* err,
                                        size_t err_len) {
  return ToReturnCode(static_cast<WorkerHost*>(host)->ReportDeferredDone(ticket, error), err,
                      err_len);
}

int WorkerHost::WaitReportsThunk(void* host, char* err, size_t err_len) {
  return ToReturnCode(static_cast<WorkerHost*>(host)->WaitReports(), err, err_len);
}

int64_t WorkerHost::RegroupWaitThunk(void* host, int64_t min_generation, int64_t timeout_ms) {
  const int min = static_cast<int>(std::clamp<int64_t>(min_generation, 0, INT32_MAX));
  const auto limit = std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 0));
  return static_cast<WorkerHost*>(host)->channel_->WaitForRegroup(min, limit);
}

const char* WorkerHost::RegroupInfoThunk(void* host) {
  auto* self = static_cast<WorkerHost*>(host);
  const events::Regroup r = self->channel_->LatestRegroup();
  if (r.generation == 0) return nullptr;
  nlohmann::json j = {{"generation", r.generation}};
  if (!r.ranks.empty()) {
    j["ranks"] = r.ranks;
    j["store_addr"] = r.store_addr;
    j["store_port"] = r.store_port;
  }
  std::lock_guard<std::mutex> lock(self->regroup_mu_);
  self->regroup_infos_.push_back(j.dump());
  return self->regroup_infos_.back().c_str();
}

int64_t WorkerHost::NextReportSeqThunk(void* host) {
  return static_cast<WorkerHost*>(host)->NextReportSeq();
}

int WorkerHost::SkipReportSeqThunk(void* host, int64_t seq, char* err, size_t err_len) {
  return ToReturnCode(static_cast<WorkerHost*>(host)->SkipReportSeq(seq), err, err_len);
}

int64_t WorkerHost::NextReportSeq() {
  std::lock_guard<std::mutex> lock(report_mu_);
  return next_seq_;
}

Status WorkerHost::SkipReportSeq(int64_t seq) {
  std::lock_guard<std::mutex> lock(report_mu_);
  // Queued reports keep the seqs they reserved; the skipped ones are never sent.
  TRAINTL_RETURN_IF_ERROR(WaitQueueEmpty());
  if (seq > next_seq_) {
    LOG_INFO << "report sequence moves from " << next_seq_ << " to " << seq
             << " (taking a replica's state)";
    next_seq_ = seq;
  }
  return Status::Ok();
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
