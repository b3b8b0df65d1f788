#include "daemon/api/log_stream.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <chrono>
#include <cstring>
#include <map>

#include "daemon/state/commands.h"

namespace traintl {

namespace {

constexpr size_t kChunkBytes = 256 * 1024;
constexpr size_t kReadBytes = 1 << 20;
// A line longer than this (a progress bar redrawn with \r, a tensor printed whole) is
// shown in pieces of this size: the stream's buffer stays bounded, and so does the
// search for a newline.
constexpr size_t kMaxLineBytes = 1 << 20;
// With `tail`: the merged last lines kept at most (every rank may hold 16 MiB of them),
// and how many lines are merged before other handlers get the io thread.
constexpr size_t kMaxTailBytes = 64u << 20;
constexpr int kLinesPerTurn = 16384;
constexpr auto kPollInterval = std::chrono::milliseconds(200);
constexpr auto kRemoteTimeout = std::chrono::seconds(5);
// A follow asks a node that did not answer again this often, and waits less for it, so
// that a node that is down holds up the other ranks' lines only now and then.
constexpr auto kDownRetryInterval = std::chrono::seconds(10);
constexpr auto kDownTimeout = std::chrono::seconds(1);

std::string ReadRange(const std::string& path, off_t from, size_t n) {
  return ReadLogRange(path, from, n);
}

off_t SizeOf(const std::string& path) { return std::max<off_t>(LogFileSize(path), 0); }

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
  std::vector<std::string> rank_nodes;
  std::map<std::string, std::string> addresses;
  if (ctx_.peers != nullptr && ctx_.calls != nullptr) {
    if (auto a = ctx_.store->GetAttempt(job_id_, attempt)) {
      rank_nodes = std::move(a->rank_nodes);
      addresses = std::move(a->node_addresses);
    }
  }
  for (const RankLogPlace& p : PlaceRankLogs(ranks, rank_nodes, addresses, ctx_.node_id)) {
    Source s;
    s.rank = p.rank;
    s.remote = p.remote;
    s.node = p.node;
    s.address = p.address;
    if (!s.remote) s.path = ctx_.agent->LogPath(job_id_, attempt, p.rank);
    sources_.push_back(std::move(s));
  }
  if (marker) out_ += "--- attempt " + std::to_string(attempt) + " ---\n";
  History();
}

void LogStream::History() {
  history_now_ = commands::NowMs();
  tail_lines_.clear();
  std::vector<size_t> remote;
  for (size_t i = 0; i < sources_.size(); ++i) {
    Source& s = sources_[i];
    if (s.remote) {
      remote.push_back(i);
      continue;
    }
    s.marks = ReadLogIndex(LogIndexPath(s.path));
    s.hist_end = SizeOf(s.path);
    s.offset = LogHistoryStart(s.path, s.marks, s.hist_end, options_.tail, options_.since_ms,
                               TailMaxBytes());
  }
  auto self = shared_from_this();
  FetchRemote(std::move(remote), /*limit_to_hist_end=*/true, [self] { self->MergeHistory(); });
}

void LogStream::MergeHistory() {
  if (res_->closed()) return;
  for (int lines = 0;; ++lines) {
    if (lines == kLinesPerTurn) {
      auto self = shared_from_this();
      boost::asio::post(*ctx_.io, [self] { self->MergeHistory(); });
      return;
    }
    // The source whose next line was written first (ties: the lower rank).
    Source* next = nullptr;
    int64_t next_time = 0;
    std::vector<size_t> fetch;  // remote sources with no line at hand and more to read
    for (size_t i = 0; i < sources_.size(); ++i) {
      Source& s = sources_[i];
      off_t end = 0;
      if (s.remote) {
        if (!PeekLine(s, &end) && s.offset < s.hist_end) fetch.push_back(i);
        continue;
      }
      while (!PeekLine(s, &end) && s.offset < s.hist_end) Fill(s, kReadBytes, s.hist_end);
    }
    if (!fetch.empty()) {
      auto self = shared_from_this();
      return FetchRemote(std::move(fetch), /*limit_to_hist_end=*/true,
                         [self] { self->MergeHistory(); });
    }
    for (Source& s : sources_) {
      off_t end = 0;
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
      const size_t max_bytes = TailMaxBytes();
      std::string prefix = options_.prefix ? "[rank " + std::to_string(next->rank) + "] " : "";
      if (prefix.size() + line.size() > max_bytes) {
        // A line longer than the bound: its newest bytes, from a whole character on.
        size_t cut = std::min(line.size(), prefix.size() + line.size() - max_bytes);
        while (cut < line.size() && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) ++cut;
        line.erase(0, cut);
      }
      tail_lines_.push_back(prefix + line);
      tail_bytes_ += tail_lines_.back().size();
      while (!tail_lines_.empty() &&
             (static_cast<int>(tail_lines_.size()) > options_.tail || tail_bytes_ > max_bytes)) {
        tail_bytes_ -= tail_lines_.front().size();
        tail_lines_.pop_front();
      }
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
  tail_bytes_ = 0;
  auto self = shared_from_this();
  Flush([self] { self->Pump(); });
}

void LogStream::Pump() {
  if (res_->closed()) return;
  // Decide before reading: an ended attempt's files no longer grow.
  const bool ended = !options_.follow || AttemptEnded();
  const auto now = std::chrono::steady_clock::now();
  std::vector<size_t> remote;
  for (size_t i = 0; i < sources_.size(); ++i)
    if (sources_[i].remote && (!sources_[i].said_down || now >= sources_[i].retry_at))
      remote.push_back(i);
  auto self = shared_from_this();
  FetchRemote(std::move(remote), /*limit_to_hist_end=*/false,
              [self, ended] { self->PumpFetched(ended); });
}

void LogStream::PumpFetched(bool ended) {
  if (res_->closed()) return;
  bool more = false;
  for (Source& s : sources_) {
    if (s.remote) {
      if (s.offset < s.remote_size) more = true;
    } else if (Fill(s, kReadBytes)) {
      more = true;
    }
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

size_t LogStream::TailMaxBytes() const {
  return options_.tail_max_bytes > 0 ? std::min(options_.tail_max_bytes, kMaxTailBytes)
                                     : kMaxTailBytes;
}

std::string LogStream::RemoteTarget(const Source& s, size_t max) const {
  std::string t = "/v1/internal/logs/" + job_id_ + "/" + std::to_string(attempt_) + "/" +
                  std::to_string(s.rank) + "?max=" + std::to_string(max);
  if (!s.located) {
    // max_bytes: a node of an older release ignores it and sends the whole tail, which
    // MergeHistory bounds all the same.
    t += "&offset=-1&marks=1&tail=" + std::to_string(options_.tail) +
         "&since=" + std::to_string(options_.since_ms) +
         "&max_bytes=" + std::to_string(TailMaxBytes());
  } else {
    t += "&offset=" + std::to_string(s.offset);
  }
  return t;
}

void LogStream::FetchRemote(std::vector<size_t> which, bool limit_to_hist_end,
                            std::function<void()> then) {
  if (which.empty()) return then();
  // One fetch at a time: the stream waits for it before it reads on.
  fetch_ = std::make_unique<Fetch>();
  Fetch& f = *fetch_;
  f.which = std::move(which);
  f.limit_to_hist_end = limit_to_hist_end;
  f.then = std::move(then);
  f.left = f.which.size();
  for (size_t k = 0; k < f.which.size(); ++k)
    f.answers.emplace_back(Status::Unavailable("not asked"));
  // Alive until the answers are in. The pool's threads hold no reference of their own (nor
  // anything that holds one), so that the stream is only ever destroyed on the io_context.
  fetching_self_ = shared_from_this();
  for (size_t k = 0; k < f.which.size(); ++k) {
    const Source& s = sources_[f.which[k]];
    size_t max = kReadBytes;
    if (limit_to_hist_end && s.located)
      max = static_cast<size_t>(std::min<off_t>(s.hist_end - s.offset, static_cast<off_t>(max)));
    const std::chrono::milliseconds timeout = s.said_down ? kDownTimeout : kRemoteTimeout;
    ctx_.calls->Post([this, k, target = RemoteTarget(s, max), address = s.address, timeout,
                      peers = ctx_.peers, io = ctx_.io] {
      Result<http::ClientResponse> r = Status::Unavailable("no address");
      if (!address.empty()) r = peers->Call(address, "GET", target, "", timeout);
      boost::asio::post(*io, [this, k, r = std::move(r)]() mutable {
        fetch_->answers[k] = std::move(r);
        if (--fetch_->left == 0) RemoteFetched();
      });
    });
  }
}

void LogStream::RemoteFetched() {
  std::shared_ptr<LogStream> self = std::move(fetching_self_);
  std::unique_ptr<Fetch> done = std::move(fetch_);
  Fetch& f = *done;
  for (size_t k = 0; k < f.which.size(); ++k) {
    Source& s = sources_[f.which[k]];
    const auto& r = f.answers[k];
    Result<LogChunk> c = Status::Unavailable("");
    if (!r.ok()) {
      c = r.status();
    } else if (r->status != 200) {
      c = Status::Unavailable("HTTP " + std::to_string(r->status));
    } else {
      c = DecodeLogChunk(r->body);
    }
    if (c.ok() && s.located && c->exists && c->offset != static_cast<int64_t>(s.offset))
      c = Status::Internal("an unexpected offset");
    if (!c.ok()) {
      s.retry_at = std::chrono::steady_clock::now() + kDownRetryInterval;
      if (!s.said_down) {
        s.said_down = true;
        // Peer call errors start "GET http://host:port/target: "; the address says as much.
        std::string error = c.status().message();
        if (size_t at = error.find("/v1/internal/logs/"); at != std::string::npos)
          if (size_t colon = error.find(": ", at); colon != std::string::npos)
            error = error.substr(colon + 2);
        const std::string why = s.address.empty() ? "its address was not recorded"
                                                  : s.address + " did not answer: " + error;
        Emit(s, "--- rank " + std::to_string(s.rank) + " ran on node " + s.node +
                    ", which cannot be reached (" + why + "); " +
                    (options_.follow && !AttemptEnded() ? "its lines follow if it answers again"
                                                        : "its log is left out") +
                    " ---\n");
      }
      if (f.limit_to_hist_end) s.hist_end = s.offset;  // the history goes on without it
      continue;
    }
    s.said_down = false;  // it answers (again): a later outage is said again
    const bool located = s.located;
    if (!located) {  // its history start: from here on, offsets
      s.located = true;
      s.offset = static_cast<off_t>(c->offset);
      s.hist_end = static_cast<off_t>(c->size);
      s.marks = std::move(c->marks);
    }
    s.remote_size = static_cast<off_t>(c->size);
    // Nothing more where more was expected (the file shrank): the history ends here.
    if (f.limit_to_hist_end && located && c->data.empty()) s.hist_end = s.offset;
    if (s.buf_head > 0 && s.buf_head >= s.buf.size() / 2) {
      s.buf.erase(0, s.buf_head);
      s.buf_head = 0;
    }
    s.buf += c->data;
    s.offset += static_cast<off_t>(c->data.size());
  }
  if (!res_->closed()) f.then();
}

bool LogStream::Fill(Source& s, size_t max, off_t limit) {
  const off_t size = limit >= 0 ? limit : SizeOf(s.path);
  if (s.offset >= size) return false;
  const size_t n = static_cast<size_t>(std::min<off_t>(size - s.offset, static_cast<off_t>(max)));
  std::string data = ReadRange(s.path, s.offset, n);
  if (data.empty()) {
    // Nothing where the size said there was more: the file shrank or is gone (training code
    // truncated its log, or the job was deleted). The history ends here; left as it was,
    // MergeHistory would ask again forever on the io thread.
    if (limit >= 0) s.hist_end = s.offset;
    return false;
  }
  if (s.buf_head > 0 && s.buf_head >= s.buf.size() / 2) {
    s.buf.erase(0, s.buf_head);
    s.buf_head = 0;
  }
  s.buf += data;
  s.offset += static_cast<off_t>(data.size());
  return s.offset < size;
}

namespace {

// Where the next line of `buf` from `head` ends (one past its newline); for a line longer
// than kMaxLineBytes, where its next piece ends: at most kMaxLineBytes, never inside a UTF-8
// character or between CR and LF. npos when no such line is there yet. Looks at no more
// than kMaxLineBytes + 1 bytes, so a long unfinished line is not searched again and again.
size_t LineEnd(const std::string& buf, size_t head) {
  const size_t avail = buf.size() - head;
  const size_t look = std::min(avail, kMaxLineBytes + 1);
  const void* nl = std::memchr(buf.data() + head, '\n', look);
  if (nl != nullptr) return static_cast<size_t>(static_cast<const char*>(nl) - buf.data()) + 1;
  if (avail <= kMaxLineBytes) return std::string::npos;
  size_t cut = head + kMaxLineBytes;
  for (int i = 0; i < 3 && cut > head + 1 && (static_cast<unsigned char>(buf[cut]) & 0xC0) == 0x80;
       ++i) {
    --cut;  // the start of the UTF-8 character the cut fell in
  }
  if (cut > head + 1 && buf[cut - 1] == '\r') --cut;
  return cut;
}

}  // namespace

bool LogStream::PeekLine(const Source& s, off_t* end) const {
  const size_t e = LineEnd(s.buf, s.buf_head);
  if (e == std::string::npos) return false;
  *end = s.offset - static_cast<off_t>(s.buf.size() - e);
  return true;
}

std::string LogStream::TakeLine(Source& s) {
  const size_t e = LineEnd(s.buf, s.buf_head);
  std::string line = s.buf.substr(s.buf_head, e - s.buf_head);
  s.buf_head = e;
  if (line.back() != '\n') line += '\n';  // a piece of a longer line
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
