#include "daemon/api/log_stream.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "daemon/state/commands.h"

namespace traintl {

namespace {

constexpr size_t kChunkBytes = 256 * 1024;
constexpr size_t kReadBytes = 1 << 20;
constexpr off_t kTailWindow = 16 << 20;  // a tail looks back at most this far per rank
constexpr auto kPollInterval = std::chrono::milliseconds(200);

std::string ReadRange(const std::string& path, off_t from, size_t n) {
  std::string out(n, '\0');
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return "";
  ssize_t r = ::pread(fd, out.data(), n, from);
  ::close(fd);
  out.resize(r > 0 ? static_cast<size_t>(r) : 0);
  return out;
}

off_t SizeOf(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? st.st_size : 0;
}

}  // namespace

LogStream::LogStream(const ApiContext& ctx, std::shared_ptr<http::Responder> res,
                     std::string job_id, int num_workers, Options options)
    : ctx_(ctx),
      res_(std::move(res)),
      job_id_(std::move(job_id)),
      num_workers_(num_workers),
      options_(std::move(options)),
      timer_(*ctx.io) {
  ++*ctx_.open_log_streams;
}

LogStream::~LogStream() { --*ctx_.open_log_streams; }

void LogStream::Start() {
  res_->BeginChunked(200, "text/plain; charset=utf-8");
  WaitForStart();
}

void LogStream::WaitForStart() {
  if (res_->closed()) return;
  auto job = ctx_.store->GetJob(job_id_, /*with_spec=*/false);
  if (!job) return End();
  if (options_.attempt > 0) return OpenAttempt(options_.attempt, false);
  if (job->attempt >= 1) return OpenAttempt(job->attempt, false);
  if (IsTerminalJobState(job->state) || !options_.follow) return End();
  Later([this] { WaitForStart(); });
}

void LogStream::OpenAttempt(int attempt, bool marker) {
  attempt_ = attempt;
  sources_.clear();
  std::vector<int> ranks = options_.ranks;
  if (ranks.empty())
    for (int r = 0; r < num_workers_; ++r) ranks.push_back(r);
  for (int r : ranks) {
    Source s;
    s.rank = r;
    s.path = ctx_.agent->LogPath(job_id_, attempt, r);
    sources_.push_back(std::move(s));
  }
  if (marker) out_ += "--- attempt " + std::to_string(attempt) + " ---\n";
  History();
}

off_t LogStream::HistoryStart(const Source& src, off_t size) const {
  off_t start = 0;
  if (options_.since_ms > 0) {
    // Every byte up to the last mark before `since` was written before it.
    for (const LogMark& m : src.marks) {
      if (m.time_ms >= options_.since_ms) break;
      start = std::min<off_t>(m.size, size);
    }
    if (start > 0) {
      // Back to the start of the line the mark falls in: it ends later.
      const off_t from = std::max<off_t>(0, start - 65536);
      const std::string before = ReadRange(src.path, from, static_cast<size_t>(start - from));
      const size_t nl = before.rfind('\n');
      if (nl != std::string::npos) start = from + static_cast<off_t>(nl) + 1;
    }
  }
  if (options_.tail > 0) {
    const off_t window = std::min<off_t>(size, kTailWindow);
    const std::string buf = ReadRange(src.path, size - window, static_cast<size_t>(window));
    int lines = 0;
    size_t pos = buf.size();
    if (pos > 0 && buf[pos - 1] == '\n') --pos;
    while (pos > 0) {
      if (buf[pos - 1] == '\n' && ++lines == options_.tail) break;
      --pos;
    }
    start = std::max(start, size - window + static_cast<off_t>(pos));
  }
  return start;
}

void LogStream::History() {
  history_now_ = commands::NowMs();
  tail_lines_.clear();
  for (Source& s : sources_) {
    s.marks = ReadLogIndex(LogIndexPath(s.path));
    s.hist_end = SizeOf(s.path);
    s.offset = HistoryStart(s, s.hist_end);
  }
  MergeHistory();
}

void LogStream::MergeHistory() {
  if (res_->closed()) return;
  for (;;) {
    // The source whose next line was written first (ties: the lower rank).
    Source* next = nullptr;
    int64_t next_time = 0;
    for (Source& s : sources_) {
      off_t end = 0;
      while (!PeekLine(s, &end) && s.offset < s.hist_end) Fill(s, kReadBytes, s.hist_end);
      if (!PeekLine(s, &end)) continue;
      const int64_t t = LogTimeOf(s.marks, end, history_now_);
      if (next == nullptr || t < next_time) {
        next = &s;
        next_time = t;
      }
    }
    if (next == nullptr) break;
    std::string line = TakeLine(*next);
    if (options_.since_ms > 0 && next_time < options_.since_ms) continue;
    if (options_.tail > 0) {
      tail_lines_.push_back((options_.prefix ? "[rank " + std::to_string(next->rank) + "] " : "") +
                            line);
      if (static_cast<int>(tail_lines_.size()) > options_.tail) tail_lines_.pop_front();
      continue;
    }
    Emit(*next, line);
    if (out_.size() >= kChunkBytes) {
      auto self = shared_from_this();
      return Flush([self] { self->MergeHistory(); });
    }
  }
  for (auto& line : tail_lines_) out_ += line;
  tail_lines_.clear();
  auto self = shared_from_this();
  Flush([self] { self->Pump(); });
}

void LogStream::Pump() {
  if (res_->closed()) return;
  // Decide before reading: an ended attempt's files no longer grow.
  const bool ended = !options_.follow || AttemptEnded();
  bool more = false;
  for (Source& s : sources_) {
    if (Fill(s, kReadBytes)) more = true;
    off_t end = 0;
    while (PeekLine(s, &end)) Emit(s, TakeLine(s));
  }
  auto self = shared_from_this();
  if (more) return Flush([self] { self->Pump(); });
  if (!ended) return Flush([self] { self->Later([self] { self->Pump(); }); });
  // The attempt is over: its last lines, even without a newline.
  for (Source& s : sources_) {
    if (s.buf_head < s.buf.size()) {
      Emit(s, s.buf.substr(s.buf_head) + "\n");
      s.buf.clear();
      s.buf_head = 0;
    }
  }
  Flush([self] { self->AfterAttempt(); });
}

void LogStream::AfterAttempt() {
  if (res_->closed()) return;
  if (!options_.follow || options_.attempt > 0) return End();
  auto job = ctx_.store->GetJob(job_id_, /*with_spec=*/false);
  if (!job) return End();
  if (job->attempt > attempt_) return OpenAttempt(job->attempt, /*marker=*/true);
  if (IsTerminalJobState(job->state)) return End();
  auto self = shared_from_this();
  Later([self] { self->AfterAttempt(); });  // waiting to restart
}

bool LogStream::AttemptEnded() const {
  auto job = ctx_.store->GetJob(job_id_, /*with_spec=*/false);
  if (!job || job->attempt != attempt_) return true;
  return IsTerminalJobState(job->state) || job->state == kJobPending;
}

bool LogStream::Fill(Source& s, size_t max, off_t limit) {
  const off_t size = limit >= 0 ? limit : SizeOf(s.path);
  if (s.offset >= size) return false;
  const size_t n = static_cast<size_t>(std::min<off_t>(size - s.offset, static_cast<off_t>(max)));
  std::string data = ReadRange(s.path, s.offset, n);
  if (s.buf_head > 0 && s.buf_head >= s.buf.size() / 2) {
    s.buf.erase(0, s.buf_head);
    s.buf_head = 0;
  }
  s.buf += data;
  s.offset += static_cast<off_t>(data.size());
  return s.offset < size;
}

bool LogStream::PeekLine(const Source& s, off_t* end) const {
  const size_t nl = s.buf.find('\n', s.buf_head);
  if (nl == std::string::npos) return false;
  *end = s.offset - static_cast<off_t>(s.buf.size() - (nl + 1));
  return true;
}

std::string LogStream::TakeLine(Source& s) {
  const size_t nl = s.buf.find('\n', s.buf_head);
  std::string line = s.buf.substr(s.buf_head, nl + 1 - s.buf_head);
  s.buf_head = nl + 1;
  return line;
}

void LogStream::Emit(const Source& s, const std::string& line) {
  if (options_.prefix) out_ += "[rank " + std::to_string(s.rank) + "] ";
  out_ += line;
}

void LogStream::Flush(std::function<void()> then) {
  if (out_.empty()) return then();
  std::string chunk;
  chunk.swap(out_);
  res_->WriteChunk(std::move(chunk), [then = std::move(then)](bool ok) {
    if (ok) then();
  });
}

void LogStream::Later(std::function<void()> then) {
  auto self = shared_from_this();
  timer_.expires_after(kPollInterval);
  timer_.async_wait([self, then = std::move(then)](const boost::system::error_code& ec) {
    if (!ec) then();
  });
}

void LogStream::End() {
  auto self = shared_from_this();
  Flush([self] { self->res_->EndChunked(); });
}

}  // namespace traintl
