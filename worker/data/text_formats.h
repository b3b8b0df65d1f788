// The line-based formats, CSV and JSON Lines: splitting bytes into records, reading a CSV
// header, inferring column types from sample rows, and parsing a run of complete records
// into columns.
//
// CSV follows RFC 4180: ',' separates fields, a field that starts with '"' is quoted ("" is
// a quote inside it, and it may span lines), records end with \n or \r\n. A quote inside an
// unquoted field is an ordinary character. Blank lines are skipped (they are not rows).
// Numbers: decimal or exponent notation, optional sign, nan/inf; surrounding spaces are
// ignored; an empty field is NaN in a float column and an error in an int column.
//
// JSON Lines: one JSON object per line; blank lines are skipped. A key holds a number,
// a string, a bool (read as 0/1), null (NaN; an error for ints and strings) or a
// rectangular array of numbers (a column whose rows have that shape). Keys a row has
// beyond the schema's are ignored; a missing key is an error.
//
// Every error names the file, the line and the byte offset of the record.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/result.h"
#include "worker/data/columns.h"

namespace traintl {
namespace data {

// Longest record (or header, or carried start of one) a reader buffers: a longer one is
// refused rather than read into memory without bound.
inline constexpr size_t kMaxRecordBytes = 64u << 20;

// Where a buffer starts in its file, for messages.
struct TextPos {
  const std::string* file = nullptr;
  int64_t line = 1;     // the line number of buf[0] (1-based)
  uint64_t offset = 0;  // the byte offset of buf[0] in the file
};

// "<file>:<line>: <what> (byte offset <offset>)".
std::string Located(const TextPos& pos, int64_t line, uint64_t offset, const std::string& what);

struct ScanResult {
  size_t consumed = 0;  // bytes of complete records (a record boundary)
  int64_t rows = 0;     // non-blank records among them
  int64_t lines = 0;    // newlines among them (quoted newlines included)
};

// Consumes complete records from buf[0, len), which starts at a record boundary: stops
// after `max_rows` rows or at the last complete record. With `at_eof`, a last record
// without a newline is complete. `csv` enables quote handling. Fails only on a quoted
// field still open at the end of the file.
Result<ScanResult> ScanRecords(const char* buf, size_t len, int64_t max_rows, bool at_eof, bool csv,
                               const TextPos& pos);

// Skips a UTF-8 byte order mark; returns its length (0 or 3).
size_t Utf8BomLength(const char* buf, size_t len);

// Splits one CSV record (without its line ending) into unquoted fields.
Status SplitCsvRecord(const char* p, size_t n, const TextPos& pos, std::vector<std::string>* out);

// A CSV file's column names: its header, or `column_names` when given (then the file has
// no header row). Empty header names become "Unnamed: <i>" (as pandas names them).
struct CsvHeader {
  std::vector<std::string> names;
  size_t data_offset = 0;  // bytes of the BOM, blank lines and the header record
  int64_t data_line = 1;   // the line the first data record is on
};
// Reads the header from the head of a file (`len` bytes of it; `at_eof` when that is the
// whole file). Fails when the head holds no complete header record, or on duplicate names.
Result<CsvHeader> ParseCsvHeader(const char* buf, size_t len, bool at_eof,
                                 const std::vector<std::string>& column_names, const TextPos& pos);

// Types CSV columns from sample records (buf holds complete records): int64 when every
// value is an integer, float64 when every value is a number or empty, string otherwise
// (also when every value is empty). `types` overrides by name. At most `max_rows` rows.
Result<Schema> InferCsvSchema(const std::vector<std::string>& names, const char* buf, size_t len,
                              int64_t max_rows, const std::map<std::string, DType>& types,
                              const TextPos& pos);

// Types JSON Lines columns from sample lines: the keys of the first object, in order.
Result<Schema> InferJsonlSchema(const char* buf, size_t len, int64_t max_rows,
                                const std::map<std::string, DType>& types, const TextPos& pos);

// How one field of a file's records is read.
struct FieldPlan {
  int out = -1;  // the output column; -1: not read
  // True when the column's type was inferred, so an error can say how to override it.
  bool inferred = false;
};

// Parses `rows` CSV records from buf[0, len) (complete records from a record boundary,
// as ScanRecords consumed them) into `out`, which follows `out_schema` and gets the rows
// appended. `fields` has one entry per field of the file's records. rows < 0: as many as
// buf holds (which need not have been scanned: then a quoted field still open at the end
// of buf is an error, as the end of the file). *lines_out (when not null) gets the lines
// the records took.
Status ParseCsvRows(const char* buf, size_t len, int64_t rows, const std::vector<FieldPlan>& fields,
                    const Schema& out_schema, const TextPos& pos, RowBlock* out,
                    int64_t* lines_out = nullptr);

// Parses `rows` JSON lines likewise; columns are found by name.
Status ParseJsonlRows(const char* buf, size_t len, int64_t rows, const Schema& out_schema,
                      const std::vector<bool>& inferred, const TextPos& pos, RowBlock* out);

}  // namespace data
}  // namespace traintl
