#include "daemon/node/log_index.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "common/file_util.h"

namespace traintl {

std::string LogIndexPath(const std::string& log_path) { return log_path + ".idx"; }

std::vector<LogMark> ReadLogIndex(const std::string& index_path) {
  std::vector<LogMark> marks;
  // Bounded: a rank logging for a month at one mark per 250 ms is ~10 M marks at most;
  // the cap keeps a corrupt or planted file from exhausting memory.
  auto text = ReadRegularFile(index_path, size_t{256} << 20);
  if (!text.ok()) return marks;
  const std::string& s = *text;
  for (size_t pos = 0; pos < s.size();) {
    size_t nl = s.find('\n', pos);
    if (nl == std::string::npos) break;  // a mark being written
    long long t = 0, size = 0;
    if (std::sscanf(s.c_str() + pos, "%lld %lld", &t, &size) == 2 && size >= 0 &&
        (marks.empty() || (size >= marks.back().size && t >= marks.back().time_ms))) {
      marks.push_back({t, size});
    }
    pos = nl + 1;
  }
  return marks;
}

int64_t LogTimeOf(const std::vector<LogMark>& marks, int64_t end, int64_t fallback) {
  auto it = std::lower_bound(marks.begin(), marks.end(), end,
                             [](const LogMark& m, int64_t e) { return m.size < e; });
  return it == marks.end() ? fallback : it->time_ms;
}

Status LogIndexWriter::Open(const std::string& index_path) {
  auto fd = OpenAppendNoFollow(index_path, 0640);
  if (!fd.ok()) return fd.status();
  fd_ = std::move(*fd);
  return Status::Ok();
}

void LogIndexWriter::Sample(int64_t now_ms, int64_t size) {
  if (!fd_.valid() || size <= last_size_) return;
  char line[48];
  const int n = std::snprintf(line, sizeof line, "%lld %lld\n", static_cast<long long>(now_ms),
                              static_cast<long long>(size));
  // One write(2) of a short line to an O_APPEND file: a reader sees it whole or not at all.
  if (::write(fd_.get(), line, static_cast<size_t>(n)) == n) last_size_ = size;
}

}  // namespace traintl
