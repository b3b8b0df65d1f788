// LogIndex: when each part of a rank's log was written. A rank writes its log itself (its
// stdout and stderr are the file), so lines carry no time; the agent samples each live
// rank's log size every kLogSampleInterval and appends "<unix ms> <size>\n" to
// "<log>.idx" when it grew. A line ending at byte offset E was written by the time of the
// first mark whose size >= E: that is the time `traintl logs` interleaves ranks by and
// filters --since with, good to one sample interval.
//
// Thread-safety: LogIndexWriter is used by one thread; the free functions are pure or
// read files only.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/safe_fs.h"
#include "common/status.h"

namespace traintl {

inline constexpr std::chrono::milliseconds kLogSampleInterval{250};

struct LogMark {
  int64_t time_ms = 0;  // unix ms of the sample
  int64_t size = 0;     // the log's size then
};

// "<log_path>.idx".
std::string LogIndexPath(const std::string& log_path);

// The marks of an index file, in file order (sizes ascending); lines that do not parse,
// or would go backwards, are skipped. Empty when there is no index.
std::vector<LogMark> ReadLogIndex(const std::string& index_path);

// The time the line ending at byte `end` of the log was written by: the first mark
// with size >= end, else `fallback` (written after the last sample, or no index).
int64_t LogTimeOf(const std::vector<LogMark>& marks, int64_t end, int64_t fallback);

// Appends the marks of one rank's log.
class LogIndexWriter {
 public:
  // Creates (or appends to) `index_path`, never through a symlink. A failure leaves the
  // writer inert: the log is still served, only without times.
  Status Open(const std::string& index_path);
  // Records `size` at `now_ms` when the log grew since the last mark.
  void Sample(int64_t now_ms, int64_t size);

 private:
  UniqueFd fd_;
  int64_t last_size_ = 0;
};

}  // namespace traintl
