#include "daemon/node/log_chunk.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace traintl {

namespace {

constexpr off_t kTailWindow = 16 << 20;  // a tail looks back at most this far

// Parses the decimal integer at s[*pos..] (optionally negative) up to `end_char`.
bool TakeInt(const std::string& s, size_t* pos, char end_char, int64_t* out) {
  const size_t end = s.find(end_char, *pos);
  if (end == std::string::npos || end == *pos || end - *pos > 20) return false;
  const std::string digits = s.substr(*pos, end - *pos);
  char* stop = nullptr;
  const long long v = std::strtoll(digits.c_str(), &stop, 10);
  if (stop == nullptr || *stop != '\0') return false;
  *out = v;
  *pos = end + 1;
  return true;
}

}  // namespace

std::string ReadLogRange(const std::string& path, off_t from, size_t n) {
  std::string out(n, '\0');
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return "";
  ssize_t r = ::pread(fd, out.data(), n, from);
  ::close(fd);
  out.resize(r > 0 ? static_cast<size_t>(r) : 0);
  return out;
}

off_t LogFileSize(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? st.st_size : -1;
}

std::string EncodeLogChunk(const LogChunk& c) {
  std::string out = std::to_string(c.offset) + " " + std::to_string(c.size) + " " +
                    (c.exists ? "1" : "0") + " " + std::to_string(c.marks.size()) + "\n";
  for (const LogMark& m : c.marks)
    out += std::to_string(m.time_ms) + " " + std::to_string(m.size) + "\n";
  out += c.data;
  return out;
}

Result<LogChunk> DecodeLogChunk(const std::string& body) {
  LogChunk c;
  size_t pos = 0;
  int64_t exists = 0, n = 0;
  if (!TakeInt(body, &pos, ' ', &c.offset) || !TakeInt(body, &pos, ' ', &c.size) ||
      !TakeInt(body, &pos, ' ', &exists) || !TakeInt(body, &pos, '\n', &n) || c.offset < 0 ||
      c.size < 0 || n < 0 || (exists != 0 && exists != 1))
    return Status::InvalidArgument("malformed log chunk header");
  c.exists = exists == 1;
  for (int64_t i = 0; i < n; ++i) {
    LogMark m;
    if (!TakeInt(body, &pos, ' ', &m.time_ms) || !TakeInt(body, &pos, '\n', &m.size))
      return Status::InvalidArgument("malformed log chunk mark");
    c.marks.push_back(m);
  }
  c.data = body.substr(pos);
  if (c.offset + static_cast<int64_t>(c.data.size()) > std::max(c.size, c.offset))
    return Status::InvalidArgument("log chunk bytes past the log's size");
  return c;
}

off_t LogDataStart(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return 0;
  off_t data = ::lseek(fd, 0, SEEK_DATA);
  if (data < 0) {
    // ENXIO: nothing but a hole (or an empty file); anything else: holes are not known.
    struct stat st;
    data = errno == ENXIO && ::fstat(fd, &st) == 0 ? st.st_size : 0;
  }
  ::close(fd);
  if (data <= 0) return 0;
  // The hole ends on a page, most likely mid-line: from the next line on.
  const std::string after = ReadLogRange(path, data, 65536);
  const size_t nl = after.find('\n');
  return nl == std::string::npos ? data : data + static_cast<off_t>(nl) + 1;
}

off_t LogHistoryStart(const std::string& path, const std::vector<LogMark>& marks, off_t size,
                      int tail, int64_t since_ms, size_t tail_max_bytes) {
  off_t start = 0;
  if (since_ms > 0) {
    // Every byte up to the last mark before `since` was written before it.
    for (const LogMark& m : marks) {
      if (m.time_ms >= since_ms) break;
      start = std::min<off_t>(m.size, size);
    }
    if (start > 0) {
      // Back to the start of the line the mark falls in: it ends later.
      const off_t from = std::max<off_t>(0, start - 65536);
      const std::string before = ReadLogRange(path, from, static_cast<size_t>(start - from));
      const size_t nl = before.rfind('\n');
      if (nl != std::string::npos) start = from + static_cast<off_t>(nl) + 1;
    }
  }
  if (tail > 0) {
    const off_t window = std::min<off_t>(size, kTailWindow);
    const std::string buf = ReadLogRange(path, size - window, static_cast<size_t>(window));
    int lines = 0;
    size_t pos = buf.size();
    if (pos > 0 && buf[pos - 1] == '\n') --pos;
    while (pos > 0) {
      if (buf[pos - 1] == '\n' && ++lines == tail) break;
      --pos;
    }
    start = std::max(start, size - window + static_cast<off_t>(pos));
    // The bound counts from the end of the last whole line: the tail shows whole lines, a
    // line still being written comes after it (LogStream's follow).
    const char* last_nl =
        buf.empty() ? nullptr : static_cast<const char*>(memrchr(buf.data(), '\n', buf.size()));
    const off_t end = last_nl == nullptr ? 0 : last_nl - buf.data() + 1;  // in buf
    if (tail_max_bytes > 0 && tail_max_bytes < static_cast<size_t>(end)) {
      // The line that holds the byte tail_max_bytes + 1 before that end starts before
      // anything the tail can show: from its start (not from that byte, which would cut
      // a line over 1 MiB into other pieces than a whole read does).
      const off_t q = end - static_cast<off_t>(tail_max_bytes) - 1;
      const void* nl = memrchr(buf.data(), '\n', static_cast<size_t>(q));
      if (nl != nullptr)
        start = std::max(start, size - window + (static_cast<const char*>(nl) - buf.data()) + 1);
    }
  }
  return std::max(start, std::min(size, LogDataStart(path)));
}

LogChunk ReadLogChunk(const std::string& path, int64_t offset, size_t max, int tail,
                      int64_t since_ms, bool marks, size_t tail_max_bytes) {
  LogChunk c;
  const off_t size = LogFileSize(path);
  if (size < 0) {
    c.exists = false;
    c.offset = std::max<int64_t>(offset, 0);
    return c;
  }
  c.size = size;
  if (marks || offset < 0) {
    std::vector<LogMark> m = ReadLogIndex(LogIndexPath(path));
    if (offset < 0) offset = LogHistoryStart(path, m, size, tail, since_ms, tail_max_bytes);
    if (marks) c.marks = std::move(m);
  }
  c.offset = offset;
  if (offset < size) {
    const size_t n = static_cast<size_t>(std::min<off_t>(size - offset, static_cast<off_t>(max)));
    c.data = ReadLogRange(path, offset, n);
  }
  return c;
}

std::vector<RankLogPlace> PlaceRankLogs(const std::vector<int>& ranks,
                                        const std::vector<std::string>& rank_nodes,
                                        const std::map<std::string, std::string>& node_addresses,
                                        const std::string& self_node) {
  std::vector<RankLogPlace> out;
  for (int r : ranks) {
    RankLogPlace p;
    p.rank = r;
    if (r >= 0 && static_cast<size_t>(r) < rank_nodes.size() && !rank_nodes[r].empty() &&
        rank_nodes[r] != self_node) {
      p.remote = true;
      p.node = rank_nodes[r];
      if (auto it = node_addresses.find(p.node); it != node_addresses.end()) p.address = it->second;
    } else {
      p.node = self_node;
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace traintl
