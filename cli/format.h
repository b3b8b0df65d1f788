// Output formatting for people: aligned tables, durations, times, compact metrics, signal
// names, and tolerant accessors for the daemon's JSON (missing or null fields read as
// absent rather than throwing).
//
// Thread-safety: Table is a value type without synchronization; the functions are pure
// except FormatTime, which reads the process's time zone.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace traintl {
namespace cli {

// A text table: a header row and rows of cells, columns separated by two spaces, no
// trailing blanks. Widths count UTF-8 code points.
class Table {
 public:
  explicit Table(std::vector<std::string> headers);

  // Rows shorter than the header are padded with empty cells; longer ones are cut.
  void AddRow(std::vector<std::string> cells);
  // Right-aligns column `index` (numbers read better that way).
  void AlignRight(size_t index);
  size_t num_rows() const { return rows_.size(); }
  // The table, one line per row, each ending in '\n'.
  std::string Render() const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<bool> right_;
};

// "0s", "45s", "3m05s", "2h04m", "3d05h"; "-" for a negative duration.
std::string FormatDuration(int64_t ms);
// "2024-05-01 14:03:22" in local time (UTC when `utc`); "-" when absent.
std::string FormatTime(std::optional<int64_t> ms_since_epoch, bool utc = false);
// "14:03:22" in local time (UTC when `utc`).
std::string FormatClock(int64_t ms_since_epoch, bool utc = false);
// "-" when the job never started; else ended (or `now` while running) minus started.
std::string FormatSpan(std::optional<int64_t> started, std::optional<int64_t> ended,
                       int64_t now_ms);
// "512 B", "1.5 KiB", "3.2 GiB".
std::string FormatBytes(double bytes);
// `metrics` as "loss=0.1234 epoch=3" in key order; "" for an empty or non-object value.
std::string FormatMetrics(const nlohmann::json& metrics);
// Text someone else wrote (a job's name, metric, failure, config) made safe to print to a
// terminal: escape sequences, carriage returns and other controls shown as "\xNN"
// (EscapeControls, common/utf8.h), so that they cannot move the cursor, clear the screen
// or retitle the window. Printable escapes newlines too (for one-line fields and table
// cells), PrintableLines keeps them (a log tail). Table, FormatMetrics, FormatScalar and
// Truncate apply it themselves.
std::string Printable(const std::string& text);
std::string PrintableLines(const std::string& text);
// One JSON scalar for people: strings unquoted, doubles with 6 significant digits.
std::string FormatScalar(const nlohmann::json& value);
// "SIGSEGV" for 11 etc.; "signal N" for numbers without a name.
std::string SignalName(int signal);
// At most `width` terminal columns (TerminalWidth: a CJK character or an emoji takes two),
// ending in "..." when cut; newlines become spaces, other controls are escaped (Printable).
std::string Truncate(const std::string& text, size_t width);
// Indents every line of `text` by `prefix`; ensures a final newline for non-empty text.
std::string Indent(const std::string& text, const std::string& prefix);

// Tolerant JSON accessors: absent, null or mistyped fields give the fallback / nullopt.
std::string JsonString(const nlohmann::json& object, const char* key,
                       const std::string& fallback = "");
std::optional<int64_t> JsonInt(const nlohmann::json& object, const char* key);
const nlohmann::json& JsonField(const nlohmann::json& object, const char* key);

}  // namespace cli
}  // namespace traintl
