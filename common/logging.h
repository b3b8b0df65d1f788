// Minimal leveled logging to stderr, one event per line.
//
// When stderr is the systemd journal (JOURNAL_STREAM matches stderr), lines carry a
// "<N>" syslog priority prefix and no timestamp; otherwise "2026-01-01T00:00:00.000Z I ".
// Thread-safety: every function is safe to call from any thread; a line is written with
// a single write(2).
#pragma once

#include <sstream>
#include <string>

namespace traintl {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// Parses "debug", "info", "warning"/"warn", "error"; false when unknown.
bool ParseLogLevel(const std::string& text, LogLevel* out);
// Prefix every line with "[tag] " (e.g. the node id); empty for none.
void SetLogTag(const std::string& tag);

// Turns the stream expression into void, for the ternary in TRAINTL_LOG; & binds less
// tightly than <<, so the whole chain is built first.
struct LogVoidify {
  void operator&(std::ostream&) {}
};

class LogMessage {
 public:
  explicit LogMessage(LogLevel level) : level_(level) {}
  ~LogMessage();
  std::ostream& stream() { return os_; }

 private:
  LogLevel level_;
  std::ostringstream os_;
};

}  // namespace traintl

// The ternary (not an if/else) keeps `if (x) LOG_INFO << ...; else ...` unambiguous, and
// skips evaluating the stream arguments below the log level.
#define TRAINTL_LOG(level)                                  \
  !(::traintl::LogLevel::level >= ::traintl::GetLogLevel()) \
      ? (void)0                                             \
      : ::traintl::LogVoidify() & ::traintl::LogMessage(::traintl::LogLevel::level).stream()

#define LOG_DEBUG TRAINTL_LOG(kDebug)
#define LOG_INFO TRAINTL_LOG(kInfo)
#define LOG_WARN TRAINTL_LOG(kWarning)
#define LOG_ERROR TRAINTL_LOG(kError)
