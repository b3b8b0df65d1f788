// CSV (text_formats.h): splitting records into fields, the header, type inference from
// sample rows, and ParseCsvRows, which tries whole-record and per-field fast paths
// (text_numbers.h) before the general conversion.
#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <type_traits>

#include "worker/data/text_format_internal.h"
#include "worker/data/text_formats.h"
#include "worker/data/text_numbers.h"
#include "worker/data/text_simd.h"

namespace traintl {
namespace data {

std::atomic<text_internal::CsvRecordPath>& text_internal::CsvRecordPathForTests() {
  static std::atomic<CsvRecordPath> path{CsvRecordPath::kBest};
  return path;
}

namespace {

using text_internal::FastDecimal;
using text_internal::FastFloat;
using text_internal::FastInt;
using text_internal::FieldEnd;
using text_internal::IntParse;
using text_internal::kFastDecimalReach;
using text_internal::OverrideHint;
using text_internal::ParseFloat;
using text_internal::ParseInt;
using text_internal::Quote;
using text_internal::SeparatorMask64;
using text_internal::Trim;

// Where ParseCsvRows puts one field's values.
struct Sink {
  DType dtype = DType::kString;
  bool numeric = false;       // false also for fields that are not read
  ColumnData* col = nullptr;  // the output column; null when not read
  char* values = nullptr;     // numeric: the value of the block's first row
};

// FastDecimal into `sink` at the block's row `row`.
inline bool FastDecimal(const Sink& sink, const char*& p, int64_t row) {
  switch (sink.dtype) {
    case DType::kFloat64:
      return FastDecimal(p, reinterpret_cast<double*>(sink.values) + row);
    case DType::kFloat32:
      return FastDecimal(p, reinterpret_cast<float*>(sink.values) + row);
    case DType::kInt64:
      return FastDecimal(p, reinterpret_cast<int64_t*>(sink.values) + row);
    case DType::kInt32:
      return FastDecimal(p, reinterpret_cast<int32_t*>(sink.values) + row);
    case DType::kString:
      return false;
  }
  return false;
}

// One whole record of numeric fields that all go to columns of type T, each a
// FastDecimal, ending with its line: `values[f]` is field f's column (of T) at the block's
// first row. Advances p past the record's newline; false when some field is not that simple
// (the general path then reads the record from its start, overwriting what this wrote).
template <typename T>
inline bool FastRecord(const char*& p, const char* end, char* const* values, size_t nf,
                       int64_t row) {
  const char* q = p;
  // A FastDecimal field is at most 16 bytes and FastDecimal reads at most kFastDecimalReach
  // from its start, so with this many bytes left no field of a fast record needs its own
  // bounds check, and each field's terminator is known: ',' but after the last.
  if (end - q >= static_cast<ptrdiff_t>(17 * nf) + kFastDecimalReach) {
    for (size_t f = 0; f + 1 < nf; ++f) {
      if (!FastDecimal<T, FieldEnd::kComma>(q, reinterpret_cast<T*>(values[f]) + row)) {
        return false;
      }
      ++q;
    }
    if (!FastDecimal<T, FieldEnd::kLine>(q, reinterpret_cast<T*>(values[nf - 1]) + row)) {
      return false;
    }
    p = q + (*q == '\r' ? 2 : 1);
    return true;
  }
  for (size_t f = 0; f < nf; ++f) {
    T* out = reinterpret_cast<T*>(values[f]) + row;
    if (end - q < kFastDecimalReach || !FastDecimal(q, out)) return false;
    if (*q == ',') {
      if (f + 1 == nf) return false;  // too many fields
      ++q;
    }
  }
  if (*q == '\r') ++q;
  if (*q != '\n') return false;  // too few fields
  p = q + 1;
  return true;
}

// FastRecord with the fields found first: the separators (',' and '\n') of the record come
// from 64-byte bitmasks (SeparatorMask64), so each field's start is known without parsing
// the field before it, and the fields' FastDecimal conversions do not wait on each other
// (FastRecord's next field starts where its last conversion ended, a chain of dependent
// loads through every field of the record). The same values and the same fallback:
// FastDecimal<T, kComma> accepts a field only when a ',' follows its digits, and digits
// hold no separator, so that ',' is the field's separator in the mask (and likewise the
// line end of the last field, '\r' not being a separator); anything else returns false
// (the general path then reads the record from its start). Needs the window's 64 bytes
// and FastDecimal's reach from each field start readable; returns false where the buffer
// ends sooner.
template <typename T>
inline bool FastRecordIndexed(const char*& p, const char* end, char* const* values, size_t nf,
                              int64_t row) {
  constexpr ptrdiff_t kNeed = text_internal::kSeparatorWindow + kFastDecimalReach;
  const char* window = p;
  if (end - window < kNeed) return false;
  uint64_t mask = SeparatorMask64(window);
  const char* field = p;
  const char* sep = p;
  for (size_t f = 0; f < nf; ++f) {
    while (mask == 0) {
      window += text_internal::kSeparatorWindow;
      if (end - window < kNeed) return false;
      mask = SeparatorMask64(window);
    }
    sep = window + __builtin_ctzll(mask);
    mask &= mask - 1;
    const char* q = field;
    T* out = reinterpret_cast<T*>(values[f]) + row;
    if (f + 1 < nf) {
      if (!FastDecimal<T, FieldEnd::kComma>(q, out)) return false;
    } else {
      if (!FastDecimal<T, FieldEnd::kLine>(q, out)) return false;
    }
    field = sep + 1;
  }
  p = field;
  return true;
}

#if defined(TRAINTL_CSV_SSE41)
// FastRecordIndexed with each field converted by DecimalSse41 from its bounds (which the
// separator bitmask gives): a ',' must end every field but the last, a line end the last.
// For CPUs with SSE4.1 (checked at run time: the build targets baseline x86-64). Needs the
// same bytes readable as FastRecordIndexed, which covers DecimalSse41's 16 from a field
// start. The values are FastDecimal's / the general path's (see DecimalSse41); false
// (the general path then reads the record) for anything else.
template <typename T>
__attribute__((target("sse4.1"), noinline)) bool FastRecordSse41(const char*& p, const char* end,
                                                                 char* const* values, size_t nf,
                                                                 int64_t row) {
  constexpr ptrdiff_t kNeed = text_internal::kSeparatorWindow + kFastDecimalReach;
  static_assert(kFastDecimalReach >= 17, "DecimalSse41 reads 16 bytes after a '-'");
  const char* window = p;
  if (end - window < kNeed) return false;
  uint64_t mask = SeparatorMask64(window);
  const char* field = p;
  for (size_t f = 0; f < nf; ++f) {
    while (mask == 0) {
      window += text_internal::kSeparatorWindow;
      if (end - window < kNeed) return false;
      mask = SeparatorMask64(window);
    }
    const char* sep = window + __builtin_ctzll(mask);
    mask &= mask - 1;
    const char* e = sep;
    if (f + 1 < nf) {
      if (*sep != ',') return false;
    } else {
      if (*sep != '\n') return false;
      if (e > field && e[-1] == '\r') --e;
    }
    if (!text_internal::DecimalSse41(field, e, reinterpret_cast<T*>(values[f]) + row)) {
      return false;
    }
    field = sep + 1;
  }
  p = field;
  return true;
}
#endif

// The fast path for column `col` at `row`; false when the field needs the general path.
inline bool FastValue(DType dtype, const char*& p, const char* end, ColumnData* col, int64_t row) {
  switch (dtype) {
    case DType::kFloat64:
      return FastFloat(p, end, col->As<double>() + row);
    case DType::kFloat32:
      return FastFloat(p, end, col->As<float>() + row);
    case DType::kInt64:
      return FastInt(p, end, col->As<int64_t>() + row);
    case DType::kInt32:
      return FastInt(p, end, col->As<int32_t>() + row);
    case DType::kString:
      return false;
  }
  return false;
}

// Writes one CSV value into column `out` at `row`.
inline bool ConvertValue(DType dtype, const char* b, const char* e, ColumnData* col, int64_t row,
                         std::string* why) {
  switch (dtype) {
    case DType::kFloat64:
      if (ParseFloat(b, e, col->As<double>() + row)) return true;
      break;
    case DType::kFloat32:
      if (ParseFloat(b, e, col->As<float>() + row)) return true;
      break;
    case DType::kInt64: {
      IntParse r = ParseInt(b, e, col->As<int64_t>() + row);
      if (r == IntParse::kOk) return true;
      if (r == IntParse::kOutOfRange) *why = " (out of range)";
      break;
    }
    case DType::kInt32: {
      IntParse r = ParseInt(b, e, col->As<int32_t>() + row);
      if (r == IntParse::kOk) return true;
      if (r == IntParse::kOutOfRange) *why = " (out of range)";
      break;
    }
    case DType::kString:
      col->AppendString(b, static_cast<size_t>(e - b));
      return true;
  }
  return false;
}

// What a sample of values allows a column to be.
struct TypeVote {
  bool all_int = true;
  bool all_number = true;
  bool any_value = false;
  void Add(const char* b, const char* e) {
    Trim(b, e);
    if (b == e) {
      all_int = false;  // an empty int is NaN: needs a float column
      return;
    }
    any_value = true;
    int64_t i;
    if (all_int && ParseInt(b, e, &i) == IntParse::kOk) return;
    all_int = false;
    double d;
    if (!ParseFloat(b, e, &d)) all_number = false;
  }
  DType Type() const {
    if (!any_value || !all_number) return DType::kString;
    return all_int ? DType::kInt64 : DType::kFloat64;
  }
};

// Advances *p past blank lines (ScanRecords consumes them together with the next record).
void SkipBlankLines(const char* buf, size_t len, size_t* p, int64_t* line) {
  for (;;) {
    if (*p < len && buf[*p] == '\n') {
      *p += 1;
    } else if (*p + 1 < len && buf[*p] == '\r' && buf[*p + 1] == '\n') {
      *p += 2;
    } else {
      return;
    }
    ++*line;
  }
}

}  // namespace

Status SplitCsvRecord(const char* p, size_t n, const TextPos& pos, std::vector<std::string>* out) {
  out->clear();
  const char* end = p + n;
  const char* start = p;
  for (;;) {
    std::string field;
    if (p < end && *p == '"') {
      ++p;
      for (;;) {
        if (p >= end) {
          return Status::InvalidArgument(
              Located(pos, pos.line, pos.offset, "a quoted field is not closed"));
        }
        if (*p == '"') {
          if (p + 1 < end && p[1] == '"') {
            field += '"';
            p += 2;
            continue;
          }
          ++p;
          break;
        }
        field += *p++;
      }
      if (p < end && *p != ',') {
        return Status::InvalidArgument(
            Located(pos, pos.line, pos.offset + static_cast<uint64_t>(p - start),
                    "unexpected " + Quote(p, p + 1) + " after the closing quote of field " +
                        std::to_string(out->size() + 1)));
      }
    } else {
      const char* fs = p;
      while (p < end && *p != ',') ++p;
      field.assign(fs, p);
    }
    out->push_back(std::move(field));
    if (p < end && *p == ',') {
      ++p;
      continue;
    }
    return Status::Ok();
  }
}

Result<CsvHeader> ParseCsvHeader(const char* buf, size_t len, bool at_eof,
                                 const std::vector<std::string>& column_names, const TextPos& pos) {
  CsvHeader h;
  h.data_offset = Utf8BomLength(buf, len);
  h.data_line = pos.line;
  if (!column_names.empty()) {
    h.names = column_names;
  } else {
    // Blank lines before the header are skipped, as blank lines anywhere.
    SkipBlankLines(buf, len, &h.data_offset, &h.data_line);
    const TextPos at{pos.file, h.data_line, pos.offset + h.data_offset};
    TRAINTL_ASSIGN_OR_RETURN(ScanResult r, ScanRecords(buf + h.data_offset, len - h.data_offset, 1,
                                                       at_eof, /*csv=*/true, at));
    if (r.rows == 0) {
      if (at_eof) {
        return Status::InvalidArgument(
            (pos.file ? *pos.file : std::string()) +
            ": the file has no header row (an empty CSV file; every CSV file starts with a "
            "header, or set column_names)");
      }
      return Status::InvalidArgument(Located(
          at, at.line, at.offset,
          "the header row is longer than the first " + std::to_string(len) + " bytes of the file"));
    }
    const char* rec = buf + h.data_offset;
    size_t n = r.consumed;
    h.data_offset += r.consumed;
    h.data_line += r.lines;
    while (n > 0 && (rec[n - 1] == '\n' || rec[n - 1] == '\r')) --n;
    TRAINTL_RETURN_IF_ERROR(SplitCsvRecord(rec, n, at, &h.names));
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < h.names.size(); ++i) {
    if (h.names[i].empty() && column_names.empty()) h.names[i] = "Unnamed: " + std::to_string(i);
    if (!seen.insert(h.names[i]).second) {
      return Status::InvalidArgument(
          (pos.file ? *pos.file : std::string()) + ": column '" + h.names[i] + "' appears twice " +
          (column_names.empty() ? "in the header row" : "in column_names"));
    }
  }
  return h;
}

Result<Schema> InferCsvSchema(const std::vector<std::string>& names, const char* buf, size_t len,
                              int64_t max_rows, const std::map<std::string, DType>& types,
                              const TextPos& pos) {
  std::vector<TypeVote> votes(names.size());
  std::vector<std::string> fields;
  size_t p = 0;
  int64_t line = pos.line;
  for (int64_t rows = 0; rows < max_rows && p < len;) {
    SkipBlankLines(buf, len, &p, &line);
    TextPos at{pos.file, line, pos.offset + p};
    TRAINTL_ASSIGN_OR_RETURN(ScanResult r,
                             ScanRecords(buf + p, len - p, 1, /*at_eof=*/true, /*csv=*/true, at));
    if (r.consumed == 0 || r.rows == 0) break;
    const char* rec = buf + p;
    size_t n = r.consumed;
    p += r.consumed;
    line += r.lines;
    ++rows;
    while (n > 0 && (rec[n - 1] == '\n' || rec[n - 1] == '\r')) --n;
    TRAINTL_RETURN_IF_ERROR(SplitCsvRecord(rec, n, at, &fields));
    if (fields.size() != names.size()) {
      return Status::InvalidArgument(Located(at, at.line, at.offset,
                                             "expected " + std::to_string(names.size()) +
                                                 " fields (as the header has), got " +
                                                 std::to_string(fields.size())));
    }
    for (size_t i = 0; i < fields.size(); ++i) {
      votes[i].Add(fields[i].data(), fields[i].data() + fields[i].size());
    }
  }
  Schema schema;
  for (size_t i = 0; i < names.size(); ++i) {
    ColumnSpec c;
    c.name = names[i];
    auto it = types.find(names[i]);
    c.dtype = it != types.end() ? it->second : votes[i].Type();
    schema.push_back(std::move(c));
  }
  return schema;
}

namespace {

// About how many records buf[0, len) holds, from the length of its first few (a little
// more, so that the columns rarely need to grow).
int64_t EstimateRows(const char* buf, size_t len) {
  constexpr int kSample = 8;
  const char* p = buf;
  const char* const end = buf + len;
  int n = 0;
  while (n < kSample && p < end) {
    const void* nl = std::memchr(p, '\n', static_cast<size_t>(end - p));
    p = nl == nullptr ? end : static_cast<const char*>(nl) + 1;
    ++n;
  }
  if (n == 0) return 0;
  const int64_t per_record = std::max<int64_t>(1, (p - buf) / n);
  const int64_t estimate = static_cast<int64_t>(len) / per_record;
  return estimate + estimate / 8 + 16;
}

}  // namespace

Status ParseCsvRows(const char* buf, size_t len, int64_t rows, const std::vector<FieldPlan>& fields,
                    const Schema& out_schema, const TextPos& pos, RowBlock* out,
                    int64_t* lines_out) {
  const int64_t base_row = out->num_rows;
  // Rows the numeric columns have room for: `rows`, or when unknown an estimate, grown
  // when the records turn out to be more.
  int64_t capacity = rows >= 0 ? rows : EstimateRows(buf, len);
  auto size_columns = [&] {
    for (size_t o = 0; o < out_schema.size(); ++o) {
      if (out_schema[o].dtype != DType::kString) {
        out->columns[o].values.Resize(out_schema[o].RowBytes() *
                                      static_cast<size_t>(base_row + capacity));
      }
    }
  };
  size_columns();
  const size_t nf = fields.size();
  // Per field, where its values go, looked up once rather than per value; the last entry
  // stands for fields beyond nf (an error, found at the end of the record).
  std::vector<Sink> sinks(nf + 1);
  std::vector<char*> uniform_values(nf);
  // Points the sinks at the columns' (perhaps moved) values.
  auto point_sinks = [&] {
    for (size_t f = 0; f < nf; ++f) {
      if (fields[f].out < 0) continue;
      const ColumnSpec& spec = out_schema[static_cast<size_t>(fields[f].out)];
      ColumnData* col = &out->columns[static_cast<size_t>(fields[f].out)];
      sinks[f].dtype = spec.dtype;
      sinks[f].col = col;
      if (spec.dtype != DType::kString) {
        sinks[f].numeric = true;
        sinks[f].values = col->values.data() + spec.RowBytes() * static_cast<size_t>(base_row);
      }
      uniform_values[f] = sinks[f].values;
    }
  };
  point_sinks();
  const char* p = buf;
  const char* const end = buf + len;
  int64_t line = pos.line;
  int64_t row = 0;
  // When every field is read into a column of one numeric type (what iter_torch_batches
  // with one dtype asks for), whole records go through FastRecord, which skips the
  // per-field dispatch below. It stops being tried when it fails for many records.
  DType uniform = nf > 0 && sinks[0].numeric ? sinks[0].dtype : DType::kString;
  for (size_t f = 1; f < nf && uniform != DType::kString; ++f) {
    if (!sinks[f].numeric || sinks[f].dtype != uniform) uniform = DType::kString;
  }
  char* const* values = uniform_values.data();
  int64_t fast_misses = 0;
  // Far enough from the end of the buffer, FastRecordSse41 or FastRecordIndexed; near it
  // (and for records longer than what is left), FastRecord, which reads less ahead.
  constexpr ptrdiff_t kIndexedReach = text_internal::kSeparatorWindow + kFastDecimalReach;
  using text_internal::CsvRecordPath;
  const CsvRecordPath path = text_internal::CsvRecordPathForTests().load(std::memory_order_relaxed);
#if defined(TRAINTL_CSV_SSE41)
  static const bool have_sse41 = __builtin_cpu_supports("sse4.1");
  const bool sse41 = have_sse41 && path == CsvRecordPath::kBest;
#endif
  auto record = [&](auto* type, const char*& q) {
    using T = std::remove_pointer_t<decltype(type)>;
    if (path == CsvRecordPath::kSequential || end - q < kIndexedReach) {
      return FastRecord<T>(q, end, values, nf, row);
    }
#if defined(TRAINTL_CSV_SSE41)
    if (sse41) return FastRecordSse41<T>(q, end, values, nf, row);
#endif
    if (!text_internal::kSeparatorMaskVectorized && path == CsvRecordPath::kBest) {
      return FastRecord<T>(q, end, values, nf, row);
    }
    return FastRecordIndexed<T>(q, end, values, nf, row);
  };
  auto fast_record = [&](const char*& q) {
    if (fast_misses > 64 && fast_misses * 8 > row) return false;
    bool ok = false;
    switch (uniform) {
      case DType::kFloat32:
        ok = record(static_cast<float*>(nullptr), q);
        break;
      case DType::kFloat64:
        ok = record(static_cast<double*>(nullptr), q);
        break;
      case DType::kInt64:
        ok = record(static_cast<int64_t*>(nullptr), q);
        break;
      case DType::kInt32:
        ok = record(static_cast<int32_t*>(nullptr), q);
        break;
      case DType::kString:
        return false;
    }
    if (!ok) ++fast_misses;
    return ok;
  };
  std::string scratch;
  std::string why;
  while (p < end) {
    if (*p == '\n') {
      ++p;
      ++line;
      continue;
    }
    if (*p == '\r' && (p + 1 == end || p[1] == '\n')) {
      p += p + 1 == end ? 1 : 2;
      ++line;
      continue;
    }
    if (row >= capacity) {
      if (rows >= 0) {
        return Status::Internal(Located(pos, line, pos.offset + static_cast<uint64_t>(p - buf),
                                        "more records than the scan counted"));
      }
      capacity += capacity / 2 + 16;
      size_columns();
      point_sinks();
    }
    if (fast_record(p)) {
      ++line;
      ++row;
      continue;
    }
    const char* const rec = p;
    const int64_t rec_line = line;
    // The rows before the bad one stay in `out`, so that they are still delivered.
    auto error = [&](const std::string& what) {
      out->num_rows = base_row + row;
      return Status::InvalidArgument(
          Located(pos, rec_line, pos.offset + static_cast<uint64_t>(rec - buf), what));
    };
    size_t f = 0;
    for (;;) {
      const char* fs;
      const char* fe;
      if (p < end && *p == '"') {
        ++p;
        scratch.clear();
        const char* seg = p;
        const int64_t quote_line = line;
        for (;;) {
          if (p >= end) {
            // Only reachable for a block the reader did not scan (rows < 0), which
            // ends at the end of the file.
            out->num_rows = base_row + row;
            return Status::InvalidArgument(
                Located(pos, quote_line, pos.offset + static_cast<uint64_t>(rec - buf),
                        "a quoted field is not closed before the end of the file"));
          }
          if (*p == '"') {
            if (p + 1 < end && p[1] == '"') {
              scratch.append(seg, p + 1);
              p += 2;
              seg = p;
              continue;
            }
            scratch.append(seg, p);
            ++p;
            break;
          }
          if (*p == '\n') ++line;
          ++p;
        }
        fs = scratch.data();
        fe = fs + scratch.size();
        if (p < end && *p != ',' && *p != '\n' && !(*p == '\r' && (p + 1 == end || p[1] == '\n'))) {
          return error("unexpected " + Quote(p, p + 1) + " after the closing quote of field " +
                       std::to_string(f + 1));
        }
      } else {
        const Sink& sink = sinks[f < nf ? f : nf];
        if (sink.numeric) {
          if ((end - p >= kFastDecimalReach && FastDecimal(sink, p, row)) ||
              FastValue(sink.dtype, p, end, sink.col, base_row + row)) {
            ++f;
            if (p < end && *p == ',') {
              ++p;
              continue;
            }
            break;
          }
        }
        fs = p;
        while (p < end && *p != ',' && *p != '\n') ++p;
        fe = p;
        if (fe > fs && fe[-1] == '\r' && (p == end || *p == '\n')) --fe;
      }
      if (f < nf && fields[f].out >= 0) {
        const int o = fields[f].out;
        const ColumnSpec& spec = out_schema[static_cast<size_t>(o)];
        why.clear();
        if (!ConvertValue(spec.dtype, fs, fe, &out->columns[static_cast<size_t>(o)], base_row + row,
                          &why)) {
          return error("column '" + spec.name + "': cannot parse " + Quote(fs, fe) + " as " +
                       DTypeName(spec.dtype) + why +
                       OverrideHint(fields[f].inferred, pos.file ? *pos.file : ""));
        }
      }
      ++f;
      if (p < end && *p == ',') {
        ++p;
        continue;
      }
      break;
    }
    if (f != nf) {
      return error("expected " + std::to_string(nf) + " fields (as the header has), got " +
                   std::to_string(f));
    }
    if (p < end && *p == '\r') ++p;
    if (p < end && *p == '\n') {
      ++p;
      ++line;
    }
    ++row;
  }
  if (rows >= 0 && row != rows) {
    return Status::Internal(Located(pos, line, pos.offset + len,
                                    "the scan counted " + std::to_string(rows) +
                                        " records, the parser " + std::to_string(row)));
  }
  if (rows < 0) {
    capacity = row;
    size_columns();
  }
  out->num_rows = base_row + row;
  if (lines_out != nullptr) *lines_out = line - pos.line;
  return Status::Ok();
}

}  // namespace data
}  // namespace traintl
