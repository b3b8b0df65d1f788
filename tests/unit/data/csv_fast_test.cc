// The CSV parser's indexed whole-record path (FastRecordIndexed in csv_format.cc: the
// fields of a record found from 64-byte separator bitmasks, then converted independently)
// against the path before it (FastRecord, one field after the other) and against
// strtod/strtof: identical values, rows, lines and errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "worker/data/dataset.h"
#include "worker/data/text_formats.h"
#include "worker/data/text_simd.h"

using traintl::Status;
using namespace traintl::data;

namespace {

const std::string kFile = "f.csv";

using text_internal::CsvRecordPath;
constexpr CsvRecordPath kSequential = CsvRecordPath::kSequential;
constexpr CsvRecordPath kIndexed = CsvRecordPath::kIndexed;
constexpr CsvRecordPath kBest = CsvRecordPath::kBest;

// Sets how ParseCsvRows reads whole records, for one scope.
class RecordPath {
 public:
  explicit RecordPath(CsvRecordPath path)
      : was_(text_internal::CsvRecordPathForTests().exchange(path)) {}
  ~RecordPath() { text_internal::CsvRecordPathForTests() = was_; }

 private:
  CsvRecordPath was_;
};

struct Parse {
  Status status;
  RowBlock block;
  int64_t lines = -1;
};

Parse Run(const std::string& text, int64_t rows, const Schema& schema, CsvRecordPath path,
          int64_t first_line = 1) {
  RecordPath mode(path);
  std::vector<FieldPlan> plan;
  for (size_t i = 0; i < schema.size(); ++i) plan.push_back({static_cast<int>(i), false});
  Parse p;
  p.block.Reset(schema, rows < 0 ? 0 : rows);
  p.status = ParseCsvRows(text.data(), text.size(), rows, plan, schema, {&kFile, first_line, 0},
                          &p.block, &p.lines);
  return p;
}

// Same status (message included), rows, lines and value bytes.
void RequireSame(const Parse& a, const Parse& b, const Schema& schema) {
  REQUIRE(a.status.ok() == b.status.ok());
  REQUIRE(a.status.message() == b.status.message());
  REQUIRE(a.block.num_rows == b.block.num_rows);
  if (a.status.ok()) REQUIRE(a.lines == b.lines);
  for (size_t c = 0; c < schema.size(); ++c) {
    const size_t bytes = schema[c].RowBytes() * static_cast<size_t>(a.block.num_rows);
    INFO("column " << c);
    REQUIRE(std::memcmp(a.block.columns[c].values.data(), b.block.columns[c].values.data(),
                        bytes) == 0);
  }
}

Schema Uniform(DType t, size_t n) {
  Schema s;
  for (size_t i = 0; i < n; ++i) s.push_back({"c" + std::to_string(i), t, {}});
  return s;
}

// A random CSV field: mostly what the fast paths take, sometimes what they give up on
// (the general path's cases: exponents, spaces, quotes, empty, '+'), rarely an error.
std::string Field(SplitMix& rng, bool allow_bad) {
  auto digits = [&](int n) {
    std::string d;
    for (int i = 0; i < n; ++i) d += static_cast<char>('0' + rng.Below(10));
    return d;
  };
  const uint64_t kind = rng.Below(100);
  std::string sign = rng.Below(3) == 0 ? "-" : "";
  if (kind < 55) {  // "[-]d{1,8}.d{0,8}": FastDecimal's shape and just beyond it
    return sign + digits(1 + static_cast<int>(rng.Below(8))) + "." +
           digits(static_cast<int>(rng.Below(9)));
  }
  if (kind < 70) return sign + digits(1 + static_cast<int>(rng.Below(9)));  // integers
  if (kind < 73) return sign + "." + digits(1 + static_cast<int>(rng.Below(8)));
  if (kind < 76) return sign + digits(1 + static_cast<int>(rng.Below(20))) + "." + digits(12);
  if (kind < 79) return sign + digits(2) + "e" + std::to_string(rng.Below(40));
  if (kind < 81) return " " + digits(3) + " ";
  if (kind < 83) return "\"" + sign + digits(2) + "." + digits(3) + "\"";
  if (kind < 85) return "+" + digits(4);
  if (kind < 87) return "";
  if (kind < 89) return std::string(static_cast<size_t>(rng.Below(30)), '0') + "1.5";
  if (!allow_bad) return digits(5);
  switch (rng.Below(9)) {
    case 0:
      return "1.2.3";
    case 1:
      return "--1";
    case 2:
      return "abc";
    case 3:
      return "\"a,b\"";
    case 4:
      return "\"x\ny\"";
    case 5:
      return "1\r2";
    case 6:
      return "\"1\"x";
    case 7:
      return "-";
    default:
      return ".";
  }
}

// Random records of `nf` fields (sometimes one too few or too many), LF or CRLF, blank
// lines between them; when `bad`, each field is an error with a small probability.
std::string Records(SplitMix& rng, size_t nf, int n, bool bad) {
  std::string text;
  for (int r = 0; r < n; ++r) {
    size_t fields = nf;
    if (bad && rng.Below(150) == 0) fields = rng.Below(2) && nf > 1 ? nf - 1 : nf + 1;
    for (size_t f = 0; f < fields; ++f) {
      if (f > 0) text += ',';
      text += Field(rng, bad && rng.Below(40) == 0);
    }
    text += rng.Below(6) == 0 ? "\r\n" : "\n";
    if (rng.Below(30) == 0) text += rng.Below(2) ? "\n" : "\r\n";
  }
  if (rng.Below(4) == 0 && !text.empty() && text.back() == '\n') {
    text.pop_back();  // no final newline
    if (!text.empty() && text.back() == '\r') text.pop_back();
  }
  return text;
}

}  // namespace

TEST_CASE("SeparatorMask64 marks the commas and line ends of 64 bytes, as the portable loop does") {
  SplitMix rng(7);
  const char alphabet[] = ",\n\r\"0123456789.-e a";
  std::vector<char> buf(64 * 4 + 64);
  for (int round = 0; round < 2000; ++round) {
    for (char& c : buf) {
      c = rng.Below(4) == 0 ? static_cast<char>(rng.Below(256))
                            : alphabet[rng.Below(sizeof alphabet - 1)];
    }
    const size_t at = rng.Below(buf.size() - 63);  // every alignment
    const uint64_t want = text_internal::SeparatorMask64Scalar(buf.data() + at);
    REQUIRE(text_internal::SeparatorMask64(buf.data() + at) == want);
    uint64_t manual = 0;
    for (int i = 0; i < 64; ++i) {
      const char c = buf[at + static_cast<size_t>(i)];
      if (c == ',' || c == '\n') manual |= uint64_t{1} << i;
    }
    REQUIRE(want == manual);
  }
  std::string all(64, ',');
  CHECK(text_internal::SeparatorMask64(all.data()) == ~uint64_t{0});
  std::string none(64, '\r');
  CHECK(text_internal::SeparatorMask64(none.data()) == 0);
}

TEST_CASE("CSV indexed records: values as strtod/strtof give, fields across 16/32/64 bytes") {
  // Fields of every length 1..16 bytes at every offset of the windows: records of 1 to 40
  // fields, each record's fields a random mix of lengths, and padding so that the records
  // start at every offset modulo 64.
  SplitMix rng(11);
  for (size_t nf : {1, 2, 3, 5, 7, 16, 17, 40}) {
    std::string text;
    std::vector<std::vector<std::string>> cells;
    for (int r = 0; r < 400; ++r) {
      std::vector<std::string> row;
      for (size_t f = 0; f < nf; ++f) {
        std::string v = rng.Below(3) == 0 ? "-" : "";
        const int a = 1 + static_cast<int>(rng.Below(7));
        const int b = static_cast<int>(rng.Below(8));
        for (int i = 0; i < a; ++i) v += static_cast<char>('0' + rng.Below(10));
        if (b > 0 || rng.Below(2)) v += '.';
        for (int i = 0; i < b; ++i) v += static_cast<char>('0' + rng.Below(10));
        row.push_back(v);
        text += (f > 0 ? "," : "") + v;
      }
      text += r % 3 == 0 ? "\r\n" : "\n";
      cells.push_back(row);
    }
    for (DType t : {DType::kFloat32, DType::kFloat64}) {
      const Schema schema = Uniform(t, nf);
      for (size_t pad = 0; pad < 64; pad += 7) {
        const std::string padded = std::string(pad, '\n') + text;
        for (CsvRecordPath path : {kIndexed, kBest}) {
          Parse p = Run(padded, 400, schema, path);
          INFO("fields " << nf << " pad " << pad);
          REQUIRE(p.status.ok());
          REQUIRE(p.block.num_rows == 400);
          CHECK(p.lines == static_cast<int64_t>(pad) + 400);
          for (size_t r = 0; r < 400; ++r) {
            for (size_t f = 0; f < nf; ++f) {
              const std::string& v = cells[r][f];
              if (t == DType::kFloat32) {
                const float want = std::strtof(v.c_str(), nullptr);
                const float got = p.block.columns[f].As<float>()[r];
                REQUIRE(std::memcmp(&want, &got, sizeof want) == 0);
              } else {
                const double want = std::strtod(v.c_str(), nullptr);
                const double got = p.block.columns[f].As<double>()[r];
                REQUIRE(std::memcmp(&want, &got, sizeof want) == 0);
              }
            }
          }
          RequireSame(p, Run(padded, 400, schema, kSequential), schema);
        }
      }
    }
  }
}

TEST_CASE("CSV indexed records: quotes, CRLF, empty fields and short rows as before") {
  const Schema f32 = Uniform(DType::kFloat32, 3);
  const std::string body = "1.5,2.5,3.5\n";
  std::string many;
  for (int i = 0; i < 20; ++i) many += body;
  for (const std::string& odd : std::vector<std::string>{"\"1.5\",2,3\n",
                                                         "1,\"2,5\",3\n",
                                                         "1,2,\"3\r\n\"\n",
                                                         "1,,3\n",
                                                         ",,\n",
                                                         "1,2,3\r\n",
                                                         "1,2\n",
                                                         "1,2,3,4\n",
                                                         "1,2,3\r\r\n",
                                                         "1,2,3\r",
                                                         "1,2,3",
                                                         "1, 2 ,3\n",
                                                         "1,2,3e1\n",
                                                         "1,2,\"3\"\"\"\n",
                                                         "\n\r\n1,2,3\n",
                                                         "1\r,2,3\n",
                                                         "-,2,3\n",
                                                         "1.,.5,-.5\n",
                                                         "12345678.5,1.12345678,0.000000001\n",
                                                         "1,2,3\n\"4\",5,6"}) {
    for (size_t before : {0, 1, 3, 19}) {
      for (size_t after : {0, 1, 5, 20}) {
        std::string text;
        for (size_t i = 0; i < before; ++i) text += body;
        text += odd;
        if (!odd.empty() && odd.back() != '\n' && after > 0) text += "\n";
        for (size_t i = 0; i < after; ++i) text += body;
        INFO(text);
        Parse before = Run(text, -1, f32, kSequential);
        RequireSame(Run(text, -1, f32, kIndexed), before, f32);
        RequireSame(Run(text, -1, f32, kBest), before, f32);
      }
    }
  }
}

TEST_CASE("CSV indexed records: randomized differential against the path before it") {
  // Random texts of every uniform numeric type, parsed whole and in pieces cut at record
  // boundaries (so that the end of the buffer, where the indexed path gives way to
  // FastRecord, falls everywhere), without and with a row count: identical values, rows,
  // lines and errors (message included) with the indexed path on and off.
  SplitMix rng(20261204);
  int errors = 0, oks = 0;
  for (int round = 0; round < 1500; ++round) {
    const size_t nf = 1 + rng.Below(round % 4 == 0 ? 30 : 6);
    const bool bad = rng.Below(3) == 0;
    const std::string text = Records(rng, nf, 1 + static_cast<int>(rng.Below(60)), bad);
    const DType types[] = {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64};
    const Schema schema = Uniform(types[rng.Below(4)], nf);
    INFO("round " << round << " text:\n" << text);
    Parse before = Run(text, -1, schema, kSequential);
    RequireSame(Run(text, -1, schema, kIndexed), before, schema);
    RequireSame(Run(text, -1, schema, kBest), before, schema);
    (before.status.ok() ? oks : errors) += 1;
    // With the rows counted (as the reader does for scanned blocks).
    auto scan = ScanRecords(text.data(), text.size(), INT64_MAX, /*at_eof=*/true, /*csv=*/true,
                            {&kFile, 1, 0});
    if (scan.ok() && scan->consumed == text.size()) {
      Parse counted = Run(text, scan->rows, schema, kSequential);
      RequireSame(Run(text, scan->rows, schema, kIndexed), counted, schema);
      RequireSame(Run(text, scan->rows, schema, kBest), counted, schema);
    }
    // A prefix cut at a newline (a block the reader cut at its last newline).
    const size_t cut = rng.Below(text.size() + 1);
    const size_t nl = text.rfind('\n', cut);
    if (nl != std::string::npos) {
      const std::string head = text.substr(0, nl + 1);
      Parse head_before = Run(head, -1, schema, kSequential);
      RequireSame(Run(head, -1, schema, kIndexed), head_before, schema);
      RequireSame(Run(head, -1, schema, kBest), head_before, schema);
    }
  }
  // Both outcomes were exercised.
  CHECK(oks > 300);
  CHECK(errors > 100);
}

TEST_CASE("CSV indexed records: bit-identical to strtod/strtof, float midpoints included") {
  // Random decimals of up to 16 digits with the point anywhere, and decimals on and next to
  // the midpoint between two floats (where rounding to double first and then to float would
  // go wrong if it ever could): each in a record of 3 fields of one type, read by
  // every record path, must give strtof's float and strtod's double.
  SplitMix rng(424242);
  std::vector<std::string> values;
  for (int i = 0; i < 60000; ++i) {
    std::string v = rng.Below(2) ? "-" : "";
    const int digits = 1 + static_cast<int>(rng.Below(16));
    std::string d;
    for (int k = 0; k < digits; ++k) d += static_cast<char>('0' + rng.Below(10));
    const size_t point = rng.Below(d.size() + 2);
    if (point <= d.size()) d.insert(point, ".");
    values.push_back(v + d);
  }
  char buf[64];
  for (int i = 0; i < 60000; ++i) {
    // A float in [2^16, 2^24): the midpoint above it has at most 8 decimals, exactly.
    const int e = 16 + static_cast<int>(rng.Below(8));
    const float lo = static_cast<float>(std::ldexp(1.0 + rng.Below(1 << 23) / 8388608.0, e));
    const double mid =
        (static_cast<double>(lo) + static_cast<double>(std::nextafter(lo, 1e30f))) / 2;
    const int decimals = 24 - e;  // exact
    const double nudge = (static_cast<int>(rng.Below(3)) - 1) * 1e-8;
    std::snprintf(buf, sizeof buf, "%.*f", nudge == 0 ? decimals : 8, mid + nudge);
    values.push_back((rng.Below(2) ? "-" : "") + std::string(buf));
  }
  for (const char* v : {"8388608.5", "8388609.5", "4194304.25", "4194304.75", "65536.00390625",
                        "65536.01171875", "16777215.5", "0.00000001", "99999999.5",
                        "9999999.99999999", "1.00000005960464477539", "0.000000059604644775"}) {
    values.push_back(v);
  }
  std::string text;
  for (const auto& v : values) text += v + "," + v + "," + v + "\n";
  const int64_t rows = static_cast<int64_t>(values.size());
  for (CsvRecordPath path : {kSequential, kIndexed, kBest}) {
    for (DType t : {DType::kFloat32, DType::kFloat64}) {
      const Schema schema = Uniform(t, 3);
      Parse p = Run(text, rows, schema, path);
      INFO("path " << static_cast<int>(path) << " type " << DTypeName(t));
      REQUIRE(p.status.ok());
      int64_t mismatches = 0;
      for (int64_t i = 0; i < rows; ++i) {
        const std::string& v = values[static_cast<size_t>(i)];
        for (size_t c = 0; c < 3; ++c) {
          bool same;
          if (t == DType::kFloat32) {
            const float want = std::strtof(v.c_str(), nullptr);
            same = std::memcmp(&want, p.block.columns[c].As<float>() + i, sizeof want) == 0;
          } else {
            const double want = std::strtod(v.c_str(), nullptr);
            same = std::memcmp(&want, p.block.columns[c].As<double>() + i, sizeof want) == 0;
          }
          if (!same && ++mismatches <= 10) UNSCOPED_INFO(v << " column " << c);
        }
      }
      CHECK(mismatches == 0);
    }
  }
}
