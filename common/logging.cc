#include "common/logging.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

#include "common/utf8.h"

namespace traintl {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_tag_mu;
std::string g_tag;  // guarded by g_tag_mu

bool StderrIsJournal() {
  static const bool is_journal = [] {
    const char* js = std::getenv("JOURNAL_STREAM");
    if (js == nullptr) return false;
    unsigned long dev = 0, ino = 0;
    if (std::sscanf(js, "%lu:%lu", &dev, &ino) != 2) return false;
    struct stat st;
    if (fstat(STDERR_FILENO, &st) != 0) return false;
    return st.st_dev == dev && st.st_ino == ino;
  }();
  return is_journal;
}

}  // namespace

void SetLogLevel(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }

bool ParseLogLevel(const std::string& t, LogLevel* out) {
  if (t == "debug")
    *out = LogLevel::kDebug;
  else if (t == "info")
    *out = LogLevel::kInfo;
  else if (t == "warning" || t == "warn")
    *out = LogLevel::kWarning;
  else if (t == "error")
    *out = LogLevel::kError;
  else
    return false;
  return true;
}

void SetLogTag(const std::string& tag) {
  std::lock_guard<std::mutex> l(g_tag_mu);
  g_tag = tag;
}

LogMessage::~LogMessage() {
  static const char kLetters[] = {'D', 'I', 'W', 'E'};
  static const int kSyslog[] = {7, 6, 4, 3};
  std::string line;
  const int lv = static_cast<int>(level_);
  if (StderrIsJournal()) {
    line = "<" + std::to_string(kSyslog[lv]) + ">";
  } else {
    auto now = std::chrono::system_clock::now();
    std::time_t secs = std::chrono::system_clock::to_time_t(now);
    int ms = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() %
        1000);
    std::tm tm;
    gmtime_r(&secs, &tm);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ %c ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms, kLetters[lv]);
    line = buf;
  }
  {
    std::lock_guard<std::mutex> l(g_tag_mu);
    if (!g_tag.empty()) line += "[" + g_tag + "] ";
  }
  std::string msg = os_.str();
  for (char& c : msg)
    if (c == '\n') c = ' ';  // one event per line, always
  // Messages quote what jobs write (a failure's text): a carriage return or an escape
  // sequence in it must not forge or hide lines where the log is read.
  line += EscapeControls(msg, /*keep_newlines=*/false);
  line += '\n';
  ssize_t unused = ::write(STDERR_FILENO, line.data(), line.size());
  (void)unused;
}

}  // namespace traintl
