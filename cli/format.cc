#include "cli/format.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <ctime>

#include "common/utf8.h"

namespace traintl {
namespace cli {
namespace {

std::string FormatLocalOrUtc(int64_t ms, bool utc, const char* format) {
  time_t secs = static_cast<time_t>(ms / 1000);
  struct tm tm_value;
  if (utc) {
    gmtime_r(&secs, &tm_value);
  } else {
    localtime_r(&secs, &tm_value);
  }
  char buf[64];
  size_t n = std::strftime(buf, sizeof(buf), format, &tm_value);
  return std::string(buf, n);
}

}  // namespace

Table::Table(std::vector<std::string> headers)
    : headers_(std::move(headers)), right_(headers_.size(), false) {}

void Table::AddRow(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

void Table::AlignRight(size_t index) {
  if (index < right_.size()) right_[index] = true;
}

std::string Table::Render() const {
  std::vector<size_t> width(headers_.size());
  for (size_t i = 0; i < headers_.size(); ++i) width[i] = TerminalWidth(headers_[i]);
  // Cells hold what jobs wrote (names, reasons, configs): shown, never acted on.
  std::vector<std::vector<std::string>> rows = rows_;
  for (auto& row : rows) {
    for (auto& cell : row) {
      cell = Printable(cell);
      std::replace(cell.begin(), cell.end(), '\t', ' ');  // a tab would break the columns
    }
  }
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], TerminalWidth(row[i]));
  }
  std::string out;
  auto render_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      if (i > 0) line += "  ";
      std::string pad(width[i] - TerminalWidth(row[i]), ' ');
      line += right_[i] ? pad + row[i] : row[i] + pad;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
  };
  render_row(headers_);
  for (const auto& row : rows) render_row(row);
  return out;
}

std::string FormatDuration(int64_t ms) {
  if (ms < 0) return "-";
  int64_t s = ms / 1000;
  char buf[64];
  if (s < 60) {
    std::snprintf(buf, sizeof(buf), "%llds", static_cast<long long>(s));
  } else if (s < 3600) {
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  } else if (s < 86400) {
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>(s % 3600 / 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lldd%02lldh", static_cast<long long>(s / 86400),
                  static_cast<long long>(s % 86400 / 3600));
  }
  return buf;
}

std::string FormatTime(std::optional<int64_t> ms, bool utc) {
  if (!ms) return "-";
  return FormatLocalOrUtc(*ms, utc, "%Y-%m-%d %H:%M:%S");
}

std::string FormatClock(int64_t ms, bool utc) { return FormatLocalOrUtc(ms, utc, "%H:%M:%S"); }

std::string FormatSpan(std::optional<int64_t> started, std::optional<int64_t> ended,
                       int64_t now_ms) {
  if (!started) return "-";
  return FormatDuration(ended.value_or(now_ms) - *started);
}

std::string FormatBytes(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  size_t unit = 0;
  while (bytes >= 1024 && unit + 1 < sizeof(kUnits) / sizeof(kUnits[0])) {
    bytes /= 1024;
    ++unit;
  }
  char buf[64];
  if (unit == 0) {
    std::snprintf(buf, sizeof(buf), "%.0f B", bytes);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f %s", bytes, kUnits[unit]);
  }
  return buf;
}

std::string Printable(const std::string& text) {
  return EscapeControls(text, /*keep_newlines=*/false);
}

std::string PrintableLines(const std::string& text) {
  return EscapeControls(text, /*keep_newlines=*/true);
}

std::string FormatScalar(const nlohmann::json& v) {
  if (v.is_string()) return Printable(v.get<std::string>());
  if (v.is_number_float()) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.6g", v.get<double>());
    return buf;
  }
  if (v.is_null()) return "null";
  return Printable(v.dump());
}

std::string FormatMetrics(const nlohmann::json& metrics) {
  if (!metrics.is_object()) return "";
  std::string out;
  for (auto it = metrics.begin(); it != metrics.end(); ++it) {
    if (!out.empty()) out += ' ';
    out += Printable(it.key());
    out += '=';
    std::string value = FormatScalar(it.value());
    // Quote strings that would otherwise break the key=value reading.
    if (it.value().is_string() &&
        (value.empty() || value.find_first_of(" =\t\"\\") != std::string::npos)) {
      value = Printable(it.value().dump());
    }
    out += value;
  }
  return out;
}

std::string SignalName(int signal) {
  switch (signal) {
    case SIGHUP:
      return "SIGHUP";
    case SIGINT:
      return "SIGINT";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGILL:
      return "SIGILL";
    case SIGTRAP:
      return "SIGTRAP";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGKILL:
      return "SIGKILL";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGUSR2:
      return "SIGUSR2";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGALRM:
      return "SIGALRM";
    case SIGTERM:
      return "SIGTERM";
    case SIGCHLD:
      return "SIGCHLD";
    case SIGCONT:
      return "SIGCONT";
    case SIGSTOP:
      return "SIGSTOP";
    case SIGTSTP:
      return "SIGTSTP";
    case SIGXCPU:
      return "SIGXCPU";
    case SIGXFSZ:
      return "SIGXFSZ";
    case SIGSYS:
      return "SIGSYS";
    default:
      return "signal " + std::to_string(signal);
  }
}

std::string Truncate(const std::string& text, size_t width) {
  std::string flat = text;
  for (char& c : flat) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  flat = Printable(flat);  // before the cut: no raw control survives it
  if (TerminalWidth(flat) <= width) return flat;
  if (width <= 3) return std::string(width, '.');
  return flat.substr(0, PrefixForColumns(flat, width - 3)) + "...";
}

std::string Indent(const std::string& text, const std::string& prefix) {
  std::string out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out += prefix;
    out.append(text, start, end - start);
    out += '\n';
    start = end + 1;
  }
  return out;
}

const nlohmann::json& JsonField(const nlohmann::json& object, const char* key) {
  static const nlohmann::json kNull;
  if (!object.is_object()) return kNull;
  auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

std::string JsonString(const nlohmann::json& object, const char* key, const std::string& fallback) {
  const auto& v = JsonField(object, key);
  return v.is_string() ? v.get<std::string>() : fallback;
}

std::optional<int64_t> JsonInt(const nlohmann::json& object, const char* key) {
  const auto& v = JsonField(object, key);
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) return static_cast<int64_t>(v.get<double>());
  return std::nullopt;
}

}  // namespace cli
}  // namespace traintl
