// LogStream: the text of GET /v1/jobs/{job}/logs - one rank's log, or several ranks'
// interleaved line by line in the order they were written (each line prefixed
// "[rank N] "), optionally only the last N lines or those written since a time, and with
// follow, new lines as they come: across the job's restarts (a "--- attempt N ---" line
// marks each), waiting for a job that has not started, until the job ends.
//
// Line times come from each log's index (daemon/node/log_index.h), so ranks interleave to
// within one sample interval; lines after the last sample count as written now.
//
// A rank that ran on another node (the attempt's placement, AttemptRecord::rank_nodes)
// is read from that node's daemon, chunk by chunk (GET /v1/internal/logs/..., with the
// cluster's token, on the BlockingCallPool); its lines merge in like a local rank's. A
// node that does not answer gets one line saying so in place of its ranks' lines; a
// follow keeps asking it and goes on where it was when it answers again.
//
// Thread-safety: lives on the io_context thread of the API (a shared_ptr keeps it alive
// across its timer and write callbacks).
#pragma once

#include <sys/types.h>

#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "daemon/api/api_routes.h"
#include "daemon/node/log_chunk.h"
#include "daemon/node/log_index.h"

namespace traintl {

class LogStream : public std::enable_shared_from_this<LogStream> {
 public:
  struct Options {
    std::vector<int> ranks;  // the ranks to show; empty (default): every rank of the job
    // The attempt; 0 (default): the latest, and with `follow` every one after it.
    int attempt = 0;
    bool follow = false;  // keep streaming new lines (default false)
    int tail = 0;         // only the last N lines of what exists; 0 (default): all
    // With `tail`: at most this many bytes of them, the newest (a line longer than that
    // keeps its end). 0 (default): 64 MiB, also the most it can be.
    size_t tail_max_bytes = 0;
    int64_t since_ms = 0;  // only lines written at or after this unix ms; 0 (default): all
    bool prefix = false;   // "[rank N] " before each line (default false)
  };

  LogStream(const ApiContext& ctx, std::shared_ptr<http::Responder> res, std::string job_id,
            int num_workers, Options options);
  ~LogStream();
  LogStream(const LogStream&) = delete;
  LogStream& operator=(const LogStream&) = delete;

  // Starts the chunked answer and streams; the job has an attempt unless following.
  void Start();

 private:
  struct Source {
    int rank = 0;
    std::string path;     // local: the log file
    bool remote = false;  // on another node: read through its daemon
    std::string node;     // remote: its node id and API address
    std::string address;
    off_t remote_size = 0;   // remote: the file's size at the last answer
    bool located = false;    // remote: its history start is known (offset is a file offset)
    bool said_down = false;  // remote: did not answer; the "cannot be reached" line was sent
    std::chrono::steady_clock::time_point retry_at;  // remote, said_down: when to ask again
    off_t offset = 0;                                // next byte to read; buf ends here
    off_t hist_end = 0;                              // the history is the bytes before this
    std::string buf;                                 // read, not yet sent: from buf_head on
    size_t buf_head = 0;
    std::vector<LogMark> marks;
  };

  // Waits (follow) for the job's first attempt, then opens it.
  void WaitForStart();
  // Opens attempt `a`: its sources, then its history (what exists), then Pump.
  void OpenAttempt(int attempt, bool marker);
  // Everything up to now, merged by time: as chunks, or (tail) the last N lines.
  void History();
  // Merges history lines into out_ until it is a chunk's worth, then flushes and goes on.
  void MergeHistory();
  // Follow: new bytes of every source, every 200 ms, until the attempt ends; then the next
  // attempt, or the end.
  void Pump();
  void PumpFetched(bool ended);
  // Remote sources `which` (indexes into sources_): the next chunk of each (from its
  // history start when not yet located; with `limit_to_hist_end`, not past its hist_end),
  // in parallel on the BlockingCallPool; then `then` on the io_context. No remote source:
  // `then` at once.
  void FetchRemote(std::vector<size_t> which, bool limit_to_hist_end, std::function<void()> then);
  std::string RemoteTarget(const Source& s, size_t max) const;
  // The bound of a tail's bytes: options_.tail_max_bytes, at most (and by default)
  // kMaxTailBytes.
  size_t TailMaxBytes() const;
  struct Fetch {
    std::vector<size_t> which;
    bool limit_to_hist_end = false;
    std::function<void()> then;
    std::vector<Result<http::ClientResponse>> answers;
    size_t left = 0;
  };
  // On the io_context, once every answer of fetch_ is in: applies them, then its `then`.
  void RemoteFetched();
  void AfterAttempt();
  bool AttemptEnded() const;
  // Reads up to `max` more bytes of `src`, not past `limit` (-1: its size now); true when
  // bytes before that end remain unread.
  bool Fill(Source& src, size_t max, off_t limit = -1);
  // Whether `src` holds a complete line; its end's file offset in *end.
  bool PeekLine(const Source& src, off_t* end) const;
  // Takes the complete line PeekLine saw (with its '\n').
  std::string TakeLine(Source& src);
  void Emit(const Source& src, const std::string& line);
  void Flush(std::function<void()> then);
  void Later(std::function<void()> then);
  void End();

  // Constant after construction.
  const ApiContext ctx_;
  const std::shared_ptr<http::Responder> res_;
  const std::string job_id_;
  const int num_workers_;
  const Options options_;

  boost::asio::steady_timer timer_;
  int attempt_ = 0;
  std::vector<Source> sources_;
  int64_t history_now_ = 0;             // the time of lines written after their log's last mark
  std::deque<std::string> tail_lines_;  // with options_.tail: the last lines merged
  size_t tail_bytes_ = 0;               // their bytes
  std::string out_;                     // what the next chunk carries
  std::unique_ptr<Fetch> fetch_;        // the remote chunks being fetched, if any
  std::shared_ptr<LogStream> fetching_self_;  // set while they are
};

}  // namespace traintl
