// CSV / JSON Lines / .npy reading: record scanning, headers, type inference, values.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "data_test_util.h"
#include "worker/data/npy.h"
#include "worker/data/text_formats.h"

using traintl::Status;
using namespace traintl::data;
using namespace traintl::data::testing;

namespace {

const std::string kFile = "f.csv";

ScanResult Scan(const std::string& text, int64_t max_rows, bool eof, bool csv = true) {
  auto r = ScanRecords(text.data(), text.size(), max_rows, eof, csv, {&kFile, 1, 0});
  INFO(r.status().message());
  REQUIRE(r.ok());
  return *r;
}

// A minimal .npy (version 1.0) file.
std::string Npy(const std::string& descr, const std::string& shape, const std::string& data,
                bool fortran = false) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
                     ", 'shape': " + shape + ", }";
  while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict + data;
}

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

}  // namespace

TEST_CASE("ScanRecords counts rows, skips blank lines, keeps quoted newlines in a record") {
  const std::string text = "a,b\n\n\"x\ny\",2\r\n\r\n3,4";
  ScanResult all = Scan(text, 100, /*eof=*/true);
  CHECK(all.consumed == text.size());
  CHECK(all.rows == 3);
  CHECK(all.lines == 6);  // the last record has no newline but is a line

  // Without EOF, the unterminated last record is left for later.
  ScanResult partial = Scan(text, 100, /*eof=*/false);
  CHECK(partial.rows == 2);
  CHECK(partial.consumed == text.size() - 3);

  ScanResult one = Scan(text, 1, true);
  CHECK(one.rows == 1);
  CHECK(one.consumed == 4);

  // A quote inside an unquoted field is an ordinary character.
  ScanResult literal = Scan("ab\"c,1\nd,2\n", 100, true);
  CHECK(literal.rows == 2);

  // JSON Lines: no quote handling.
  ScanResult jsonl = Scan("{\"a\": \"\\\"\"}\n{\"a\": 1}\n", 100, true, /*csv=*/false);
  CHECK(jsonl.rows == 2);
}

TEST_CASE("ScanRecords refuses a quoted field left open at the end of the file") {
  const std::string text = "a,b\n1,\"open\n2,3\n";
  auto r = ScanRecords(text.data(), text.size(), 100, true, true, {&kFile, 1, 0});
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("f.csv:2:"));
  CHECK_THAT(r.status().message(), Catch::Contains("not closed"));
  // Not at EOF it is just incomplete.
  auto partial = ScanRecords(text.data(), text.size(), 100, false, true, {&kFile, 1, 0});
  REQUIRE(partial.ok());
  CHECK(partial->rows == 1);
}

TEST_CASE("CSV header: BOM, blank lines, quoted names, unnamed and duplicate columns") {
  const std::string text = "\xEF\xBB\xBF\n\"a,1\",,c\n1,2,3\n";
  auto h = ParseCsvHeader(text.data(), text.size(), true, {}, {&kFile, 1, 0});
  REQUIRE(h.ok());
  CHECK(h->names == std::vector<std::string>{"a,1", "Unnamed: 1", "c"});
  CHECK(h->data_line == 3);
  CHECK(text.substr(h->data_offset) == "1,2,3\n");

  const std::string dup = "a,b,a\n";
  auto d = ParseCsvHeader(dup.data(), dup.size(), true, {}, {&kFile, 1, 0});
  REQUIRE_FALSE(d.ok());
  CHECK_THAT(d.status().message(), Catch::Contains("'a' appears twice"));

  // column_names: no header row.
  auto named =
      ParseCsvHeader(text.data() + 4, text.size() - 4, true, {"x", "y", "z"}, {&kFile, 1, 0});
  REQUIRE(named.ok());
  CHECK(named->names == std::vector<std::string>{"x", "y", "z"});
  CHECK(named->data_offset == 0);

  const std::string empty;
  auto e = ParseCsvHeader(empty.data(), 0, true, {}, {&kFile, 1, 0});
  REQUIRE_FALSE(e.ok());
  CHECK_THAT(e.status().message(), Catch::Contains("no header row"));
}

TEST_CASE("CSV type inference: int64, float64 (with empties as NaN), string; overrides") {
  const std::string rows = "1,1.5,x,,1\n2,,y,,2\n-3,1e3,3,,3.0\n";
  auto s = InferCsvSchema({"i", "f", "s", "e", "m"}, rows.data(), rows.size(), 100,
                          {{"s", DType::kString}}, {&kFile, 2, 0});
  REQUIRE(s.ok());
  CHECK((*s)[0].dtype == DType::kInt64);
  CHECK((*s)[1].dtype == DType::kFloat64);
  CHECK((*s)[2].dtype == DType::kString);
  CHECK((*s)[3].dtype == DType::kString);   // all empty
  CHECK((*s)[4].dtype == DType::kFloat64);  // ints and a float
}

TEST_CASE("CSV rows parse into typed columns; quoted fields, CRLF, signs, nan") {
  const std::string text =
      "1,+2.5,\"he said \"\"hi\"\"\",7\r\n-2,nan,\"multi\nline\",8\r\n3, -1e-2 ,plain,9";
  Schema out = {{"i", DType::kInt64, {}}, {"f", DType::kFloat32, {}}, {"s", DType::kString, {}}};
  std::vector<FieldPlan> plan = {{0, false}, {1, false}, {2, false}, {-1, false}};
  RowBlock block;
  block.Reset(out, 3);
  Status st = ParseCsvRows(text.data(), text.size(), 3, plan, out, {&kFile, 2, 10}, &block);
  INFO(st.message());
  REQUIRE(st.ok());
  REQUIRE(block.num_rows == 3);
  const int64_t* i = block.columns[0].As<int64_t>();
  CHECK(i[0] == 1);
  CHECK(i[1] == -2);
  CHECK(i[2] == 3);
  const float* f = block.columns[1].As<float>();
  CHECK(f[0] == 2.5f);
  CHECK(std::isnan(f[1]));
  CHECK(f[2] == Approx(-0.01f));
  const int64_t* o = block.columns[2].Offsets();
  const char* sv = block.columns[2].values.data();
  CHECK(std::string(sv + o[0], sv + o[1]) == "he said \"hi\"");
  CHECK(std::string(sv + o[1], sv + o[2]) == "multi\nline");
  CHECK(std::string(sv + o[2], sv + o[3]) == "plain");
}

TEST_CASE("CSV parse errors name the file, the line and the byte offset") {
  Schema out = {{"a", DType::kInt64, {}}, {"b", DType::kFloat64, {}}};
  std::vector<FieldPlan> plan = {{0, true}, {1, false}};
  auto parse = [&](const std::string& text, int64_t rows) {
    RowBlock block;
    block.Reset(out, rows);
    return ParseCsvRows(text.data(), text.size(), rows, plan, out, {&kFile, 5, 100}, &block);
  };
  Status few = parse("1,2\n3\n", 2);
  CHECK_THAT(few.message(), Catch::Contains("f.csv:6: expected 2 fields"));
  CHECK_THAT(few.message(), Catch::Contains("got 1"));
  CHECK_THAT(few.message(), Catch::Contains("byte offset 104"));
  Status many = parse("1,2,3\n", 1);
  CHECK_THAT(many.message(), Catch::Contains("f.csv:5: expected 2 fields"));
  Status type = parse("1,2\n\n2.5,3\n", 2);
  CHECK_THAT(type.message(), Catch::Contains("f.csv:7: column 'a': cannot parse '2.5' as int64"));
  CHECK_THAT(type.message(), Catch::Contains("set column_types"));  // inferred: says how to fix
  Status word = parse("1,abc\n", 1);
  CHECK_THAT(word.message(), Catch::Contains("column 'b': cannot parse 'abc' as float64"));
  CHECK_THAT(word.message(), !Catch::Contains("column_types"));
  Status range = parse("99999999999999999999,1\n", 1);
  CHECK_THAT(range.message(), Catch::Contains("out of range"));
  Status quote = parse("\"1\"x,2\n", 1);
  CHECK_THAT(quote.message(), Catch::Contains("after the closing quote"));
  Status empty_int = parse(",2\n", 1);
  CHECK_THAT(empty_int.message(), Catch::Contains("cannot parse '' as int64"));
}

TEST_CASE("JSON Lines: inference keeps key order; numbers, strings, bools, arrays, nulls") {
  const std::string text =
      "{\"z\": 1, \"a\": [1, 2], \"s\": \"x\", \"b\": true, \"f\": null, \"m\": [[1], [2]]}\n"
      "\n"
      "{\"z\": 2, \"a\": [3.5, 4], \"s\": \"y\", \"b\": false, \"f\": 2, \"m\": [[3], [4]], "
      "\"extra\": {}}\n";
  const std::string file = "f.jsonl";
  auto s = InferJsonlSchema(text.data(), text.size(), 100, {}, {&file, 1, 0});
  INFO(s.status().message());
  REQUIRE(s.ok());
  REQUIRE(s->size() == 6);
  CHECK((*s)[0].name == "z");
  CHECK((*s)[0].dtype == DType::kInt64);
  CHECK((*s)[1].name == "a");
  CHECK((*s)[1].dtype == DType::kFloat64);
  CHECK((*s)[1].shape == std::vector<int64_t>{2});
  CHECK((*s)[2].dtype == DType::kString);
  CHECK((*s)[3].dtype == DType::kInt64);
  CHECK((*s)[4].dtype == DType::kFloat64);
  CHECK((*s)[5].shape == std::vector<int64_t>{2, 1});
  CHECK((*s)[5].dtype == DType::kInt64);

  RowBlock block;
  block.Reset(*s, 2);
  Status st = ParseJsonlRows(text.data(), text.size(), 2, *s, std::vector<bool>(6, true),
                             {&file, 1, 0}, &block);
  INFO(st.message());
  REQUIRE(st.ok());
  const double* a = block.columns[1].As<double>();
  CHECK(a[0] == 1);
  CHECK(a[3] == 4);
  CHECK(std::isnan(block.columns[4].As<double>()[0]));
  CHECK(block.columns[5].As<int64_t>()[3] == 4);

  const std::string missing = "{\"z\": 1}\n";
  Schema one = {{"z", DType::kInt64, {}}, {"q", DType::kInt64, {}}};
  RowBlock b2;
  b2.Reset(one, 1);
  Status m =
      ParseJsonlRows(missing.data(), missing.size(), 1, one, {true, true}, {&file, 9, 50}, &b2);
  CHECK_THAT(m.message(), Catch::Contains("f.jsonl:9: the row has no key 'q'"));
  const std::string bad = "{\"z\": 1,}\n";
  RowBlock b3;
  b3.Reset(one, 1);
  Status j = ParseJsonlRows(bad.data(), bad.size(), 1, one, {true, true}, {&file, 3, 0}, &b3);
  CHECK_THAT(j.message(), Catch::Contains("f.jsonl:3: invalid JSON at column"));
  const std::string wrong = "{\"z\": \"one\", \"q\": 1}\n";
  RowBlock b4;
  b4.Reset(one, 1);
  Status w = ParseJsonlRows(wrong.data(), wrong.size(), 1, one, {true, true}, {&file, 1, 0}, &b4);
  CHECK_THAT(w.message(), Catch::Contains("key 'z': expected int64"));
}

TEST_CASE(".npy: header, conversions, big-endian, refusals") {
  const std::string file = "a.npy";
  std::vector<double> v = {1, 2, 3, 4, 5, 6};
  std::string f8 = Npy("<f8", "(3, 2)", Bytes(v));
  auto h = ParseNpyHeader(f8.data(), f8.size(), file);
  REQUIRE(h.ok());
  CHECK(h->rows() == 3);
  CHECK(h->row_elements() == 2);
  CHECK(h->natural_dtype() == DType::kFloat64);
  CHECK(h->data_offset % 64 == 0);

  ColumnData col;
  ColumnSpec as_f32{"data", DType::kFloat32, {2}};
  REQUIRE(AppendNpyRows(*h, f8.data() + h->data_offset, 3, as_f32, file, 0, &col).ok());
  CHECK(col.As<float>()[5] == 6.0f);

  // Big-endian int16, widened to int64.
  std::string be = {'\x00', '\x01', '\xff', '\xfe'};  // 1, -2
  std::string i2 = Npy(">i2", "(2,)", be);
  auto h2 = ParseNpyHeader(i2.data(), i2.size(), file);
  REQUIRE(h2.ok());
  CHECK(h2->natural_dtype() == DType::kInt64);
  ColumnData c2;
  REQUIRE(
      AppendNpyRows(*h2, i2.data() + h2->data_offset, 2, {"data", DType::kInt64, {}}, file, 0, &c2)
          .ok());
  CHECK(c2.As<int64_t>()[0] == 1);
  CHECK(c2.As<int64_t>()[1] == -2);

  std::string fortran = Npy("<f8", "(3, 2)", Bytes(v), true);
  auto hf = ParseNpyHeader(fortran.data(), fortran.size(), file);
  REQUIRE_FALSE(hf.ok());
  CHECK_THAT(hf.status().message(), Catch::Contains("Fortran order"));
  std::string complex = Npy("<c16", "(3,)", std::string(48, '\0'));
  CHECK_THAT(ParseNpyHeader(complex.data(), complex.size(), file).status().message(),
             Catch::Contains("unsupported .npy dtype '<c16'"));
  const std::string junk = "PK\x03\x04 not an npy";
  CHECK_THAT(ParseNpyHeader(junk.data(), junk.size(), file).status().message(),
             Catch::Contains("a.npy: not a valid .npy file"));
}

TEST_CASE("CSV numbers: the one-pass fast path and the general path agree") {
  const std::vector<std::string> values = {"0",
                                           "-0",
                                           "1",
                                           "+3",
                                           "-7.312715",
                                           ".5",
                                           "5.",
                                           "1e5",
                                           "1E-5",
                                           "-2.5e+3",
                                           "123456789012345678",
                                           "1234567890123456789012",
                                           "0.1",
                                           "3.14159265358979323846",
                                           "1e400",
                                           "-1e-400",
                                           "4e-320",
                                           "9007199254740993",
                                           "16777217",
                                           " 2.5 ",
                                           "nan",
                                           "-inf",
                                           "Infinity",
                                           "1e22",
                                           "1e23",
                                           "0.000001",
                                           "99999999999999999999e-5"};
  std::string text;
  for (const auto& v : values) text += v + "," + v + "\n";
  const size_t rows = values.size();
  Schema out = {{"d", DType::kFloat64, {}}, {"f", DType::kFloat32, {}}};
  std::vector<FieldPlan> plan = {{0, false}, {1, false}};
  RowBlock block;
  block.Reset(out, static_cast<int64_t>(rows));
  Status st = ParseCsvRows(text.data(), text.size(), static_cast<int64_t>(rows), plan, out,
                           {&kFile, 1, 0}, &block);
  INFO(st.message());
  REQUIRE(st.ok());
  for (size_t i = 0; i < rows; ++i) {
    INFO(values[i]);
    std::string v = values[i];
    v.erase(0, v.find_first_not_of(' '));
    v.erase(v.find_last_not_of(' ') + 1);
    const double want = std::strtod(v.c_str(), nullptr);
    const float want_f = std::strtof(v.c_str(), nullptr);
    const double got = block.columns[0].As<double>()[i];
    const float got_f = block.columns[1].As<float>()[i];
    if (std::isnan(want)) {
      CHECK(std::isnan(got));
      CHECK(std::isnan(got_f));
    } else {
      CHECK(got == want);  // bit-exact: correctly rounded
      CHECK(got_f == want_f);
      CHECK(std::signbit(got) == std::signbit(want));
    }
  }

  Schema ints = {{"i", DType::kInt64, {}}, {"j", DType::kInt32, {}}};
  const std::string itext = "9223372036854775807,2147483647\n-9223372036854775808,-2147483648\n";
  RowBlock ib;
  ib.Reset(ints, 2);
  REQUIRE(ParseCsvRows(itext.data(), itext.size(), 2, plan, ints, {&kFile, 1, 0}, &ib).ok());
  CHECK(ib.columns[0].As<int64_t>()[0] == INT64_MAX);
  CHECK(ib.columns[0].As<int64_t>()[1] == INT64_MIN);
  CHECK(ib.columns[1].As<int32_t>()[1] == INT32_MIN);
  const std::string over = "1,2147483648\n";
  RowBlock ob;
  ob.Reset(ints, 1);
  Status o = ParseCsvRows(over.data(), over.size(), 1, plan, ints, {&kFile, 1, 0}, &ob);
  CHECK_THAT(o.message(), Catch::Contains("'2147483648' as int32 (out of range)"));
  for (const std::string bad : {"1e", "1.5e+", "0x10", "1-2", "--1", "+-1", "."}) {
    const std::string t = bad + ",1\n";
    RowBlock b;
    b.Reset(out, 1);
    INFO(bad);
    CHECK_FALSE(ParseCsvRows(t.data(), t.size(), 1, plan, out, {&kFile, 1, 0}, &b).ok());
  }
}

namespace {

// What ScanRecords returns, one record at a time: the definition that counting whole
// windows of lines must agree with. `csv`: quotes (RFC 4180) keep newlines in a record.
// *open: the text ended inside a quoted field (ScanRecords refuses that at the end of a file).
ScanResult ScanOneByOne(const std::string& text, int64_t max_rows, bool eof, bool csv,
                        bool* open = nullptr) {
  ScanResult r;
  if (open != nullptr) *open = false;
  size_t p = 0;
  while (r.rows < max_rows && p < text.size()) {
    size_t q = p;
    int64_t lines = 1;
    bool in_quotes = false, field_start = true, found = false;
    while (q < text.size()) {
      const char c = text[q++];
      if (in_quotes) {
        if (c == '"') {
          if (q < text.size() && text[q] == '"') {
            ++q;
          } else {
            in_quotes = false;
          }
        } else if (c == '\n') {
          ++lines;
        }
      } else if (c == '\n') {
        found = true;
        break;
      } else if (csv && c == '"' && field_start) {
        in_quotes = true;
        field_start = false;
      } else {
        field_start = c == ',';
      }
    }
    if (!found && !eof) break;
    if (!found && in_quotes && open != nullptr) *open = true;
    const size_t end = q;
    size_t content = end;
    if (content > p && text[content - 1] == '\n') --content;
    if (content > p && text[content - 1] == '\r') --content;
    if (content > p) ++r.rows;
    r.lines += lines;
    p = end;
  }
  r.consumed = p;
  return r;
}

}  // namespace

TEST_CASE("ScanRecords: counting whole windows of lines agrees with one record at a time") {
  // Lines of varied lengths over several 64 KiB windows, with blank lines, CRLF, a lone
  // '\r' line, a record longer than a window and quotes at chosen places.
  SplitMix rng(7);
  for (int variant = 0; variant < 8; ++variant) {
    std::string text;
    int64_t line = 0;
    while (text.size() < 300000) {
      ++line;
      if (variant >= 1 && line % 997 == 0) {
        text += variant == 2 ? "\r\n" : "\n";  // blank
        continue;
      }
      if (variant == 3 && line == 1500) text += "\r";  // "\r\n" alone is blank too
      if (variant == 4 && line == 700) text += std::string(70000, 'x');
      // Quoted fields with newlines, "" inside them, and a quote inside an unquoted field.
      if (variant == 6 && line % 1500 == 0) text += "\"a\n\"\"b\n\",";
      if (variant == 7 && line % 800 == 0) text += "x\"y,";
      text += std::to_string(rng.Next() % 100000) + "," + std::string(rng.Below(40), 'a');
      text += variant == 5 && line % 3 == 0 ? "\r\n" : "\n";
    }
    text += "tail,no,newline";
    const std::vector<std::string> prefixes = {
        text,        text.substr(0, 65536),         text.substr(0, 65537), text.substr(0, 200001),
        "\n" + text, "\r\n" + text.substr(0, 70000)};
    for (const std::string& t : prefixes) {
      for (int64_t max_rows : {int64_t{1}, int64_t{100}, int64_t{5000}, int64_t{5001},
                               int64_t{9999}, int64_t{100000}, INT64_MAX}) {
        for (bool eof : {false, true}) {
          INFO("variant " << variant << ", " << t.size() << " bytes, max_rows " << max_rows
                          << ", eof " << eof);
          bool open = false;
          const ScanResult want = ScanOneByOne(t, max_rows, eof, /*csv=*/true, &open);
          if (open) {
            CHECK_FALSE(ScanRecords(t.data(), t.size(), max_rows, eof, true, {&kFile, 1, 0}).ok());
          } else {
            const ScanResult got = Scan(t, max_rows, eof);
            CHECK(got.consumed == want.consumed);
            CHECK(got.rows == want.rows);
            CHECK(got.lines == want.lines);
          }
          const ScanResult want_jsonl = ScanOneByOne(t, max_rows, eof, /*csv=*/false);
          const ScanResult jsonl = Scan(t, max_rows, eof, /*csv=*/false);
          CHECK(jsonl.consumed == want_jsonl.consumed);
          CHECK(jsonl.rows == want_jsonl.rows);
          CHECK(jsonl.lines == want_jsonl.lines);
        }
      }
    }
  }
}

TEST_CASE("CSV numbers: the fast parser is bit-identical to strtod/strtof on random values") {
  // Decimals of 1..25 significant digits with the point anywhere (or none), leading zeros,
  // signs and exponents: most take the fast path, the rest the exact fallback; every one
  // must give exactly strtod's double and strtof's float.
  SplitMix rng(20261129);
  std::vector<std::string> values;
  for (int i = 0; i < 200000; ++i) {
    std::string v;
    switch (rng.Below(4)) {
      case 0:
        v += '-';
        break;
      case 1:
        if (rng.Below(4) == 0) v += '+';
        break;
      default:
        break;
    }
    const int digits = 1 + static_cast<int>(rng.Below(i % 3 == 0 ? 25 : 9));
    const int zeros = rng.Below(8) == 0 ? static_cast<int>(rng.Below(4)) : 0;
    std::string d(static_cast<size_t>(zeros), '0');
    for (int k = 0; k < digits; ++k) d += static_cast<char>('0' + rng.Below(10));
    const size_t point = rng.Below(d.size() + 2);  // d.size() + 1: no point
    if (point <= d.size()) d.insert(point, ".");
    v += d;
    if (rng.Below(5) == 0) {
      v += rng.Below(2) ? 'e' : 'E';
      const uint64_t sign = rng.Below(3);
      if (sign == 1) v += '-';
      if (sign == 2) v += '+';
      v += std::to_string(rng.Below(rng.Below(4) == 0 ? 400 : 30));
    }
    values.push_back(v);
  }
  // Edge cases: powers of ten at the fast path's limits, 2^24 / 2^53 neighbours, halfway
  // cases, subnormals, overflow, zeros, many digits.
  for (const std::string v : {"0",
                              "-0",
                              "+0",
                              "-0.0",
                              "0e0",
                              "-0e-5",
                              "1e22",
                              "1e-22",
                              "1e23",
                              "1e-23",
                              "9e22",
                              "1e10",
                              "1e-10",
                              "1e11",
                              "1e-11",
                              "16777216",
                              "16777217",
                              "16777218",
                              "-16777217",
                              "9007199254740992",
                              "9007199254740993",
                              "9007199254740994",
                              "0.30000000000000004",
                              "2.2250738585072014e-308",
                              "4.9e-324",
                              "2.4703282292062327e-324",
                              "1.7976931348623157e308",
                              "1.7976931348623159e308",
                              "3.4028235e38",
                              "3.4028236e38",
                              "1.17549435e-38",
                              "1.4e-45",
                              "7e-46",
                              "123456789012345678901234567890",
                              "0.000000000000000000000000000001",
                              "00000000000000000000000000000001.5",
                              "1.00000000000000011102230246251565404236316680908203125",
                              "8.589973e9",
                              "5e-1",
                              "12345678.9",
                              "0.1234567",
                              "-9.999999",
                              "10.000000"}) {
    values.push_back(v);
  }
  // Decimals next to the midpoint between two floats, where rounding to double first and
  // then to float would go wrong if it ever could.
  char buf[64];
  for (int i = 0; i < 20000; ++i) {
    const float lo = static_cast<float>(
        std::ldexp(1.0 + rng.Below(1 << 23) / 8388608.0, static_cast<int>(rng.Below(34)) - 10));
    const double mid =
        (static_cast<double>(lo) + static_cast<double>(std::nextafter(lo, 1e30f))) / 2;
    const int decimals = 1 + static_cast<int>(rng.Below(7));
    std::snprintf(buf, sizeof buf, "%.*f", decimals, mid);
    values.push_back(buf);
  }
  std::string text;
  for (const auto& v : values) text += v + "," + v + "\n";
  const int64_t rows = static_cast<int64_t>(values.size());
  Schema out = {{"d", DType::kFloat64, {}}, {"f", DType::kFloat32, {}}};
  std::vector<FieldPlan> plan = {{0, false}, {1, false}};
  RowBlock block;
  block.Reset(out, rows);
  Status st = ParseCsvRows(text.data(), text.size(), rows, plan, out, {&kFile, 1, 0}, &block);
  INFO(st.message());
  REQUIRE(st.ok());
  const double* d = block.columns[0].As<double>();
  const float* f = block.columns[1].As<float>();
  int64_t mismatches = 0;
  for (int64_t i = 0; i < rows; ++i) {
    const std::string& v = values[static_cast<size_t>(i)];
    const double want = std::strtod(v.c_str(), nullptr);
    const float want_f = std::strtof(v.c_str(), nullptr);
    if (std::memcmp(&want, d + i, sizeof want) != 0 ||
        std::memcmp(&want_f, f + i, sizeof want_f) != 0) {
      if (++mismatches <= 20) {
        UNSCOPED_INFO(v << ": double " << d[i] << " (strtod " << want << "), float " << f[i]
                        << " (strtof " << want_f << ")");
      }
    }
  }
  CHECK(mismatches == 0);
}

TEST_CASE("CSV numbers: inf, nan and empty cells read as before") {
  const std::vector<std::string> values = {"inf", "-inf", "+inf", "Infinity", "-INFINITY",
                                           "nan", "NaN",  "-nan", "",         "  "};
  std::string text;
  for (const auto& v : values) text += v + "," + v + "\n";
  const int64_t rows = static_cast<int64_t>(values.size());
  Schema out = {{"d", DType::kFloat64, {}}, {"f", DType::kFloat32, {}}};
  std::vector<FieldPlan> plan = {{0, false}, {1, false}};
  RowBlock block;
  block.Reset(out, rows);
  Status st = ParseCsvRows(text.data(), text.size(), rows, plan, out, {&kFile, 1, 0}, &block);
  INFO(st.message());
  REQUIRE(st.ok());
  for (int64_t i = 0; i < rows; ++i) {
    const std::string& v = values[static_cast<size_t>(i)];
    INFO("'" << v << "'");
    const double got = block.columns[0].As<double>()[i];
    const float got_f = block.columns[1].As<float>()[i];
    if (v.find_first_of("iI") != std::string::npos) {
      CHECK(std::isinf(got));
      CHECK(std::isinf(got_f));
      CHECK(std::signbit(got) == (v[0] == '-'));
    } else {
      CHECK(std::isnan(got));
      CHECK(std::isnan(got_f));
    }
  }
  for (const std::string bad : {"0x10", "1e", "infx", "nanx", "1.2.3", "- 1"}) {
    const std::string t = bad + "\n";
    Schema one = {{"d", DType::kFloat64, {}}};
    std::vector<FieldPlan> p1 = {{0, false}};
    RowBlock b;
    b.Reset(one, 1);
    INFO(bad);
    CHECK_FALSE(ParseCsvRows(t.data(), t.size(), 1, p1, one, {&kFile, 1, 0}, &b).ok());
  }
}

TEST_CASE("CSV rows: whole-record fast path for one numeric type agrees with the general path") {
  // Plain rows (the fast path), rows it gives up on part way (an exponent, a quoted
  // number, spaces, an empty cell, CRLF), and enough of them that block ends fall inside.
  std::string text;
  SplitMix rng(5);
  for (int i = 0; i < 3000; ++i) {
    std::vector<std::string> cells;
    for (int c = 0; c < 4; ++c) {
      cells.push_back((rng.Below(2) ? "-" : "") + std::to_string(rng.Below(100)) + "." +
                      std::to_string(rng.Below(1000000)));
    }
    if (i % 97 == 0) cells[3] = "1.5e3";
    if (i % 89 == 0) cells[1] = "\"2.25\"";
    if (i % 83 == 0) cells[2] = " 7 ";
    if (i % 79 == 0) cells[0] = "";
    text += cells[0] + "," + cells[1] + "," + cells[2] + "," + cells[3] + (i % 5 ? "\n" : "\r\n");
  }
  const int64_t rows = 3000;
  std::vector<FieldPlan> plan = {{0, false}, {1, false}, {2, false}, {3, false}};
  auto parse = [&](const Schema& schema) {
    RowBlock block;
    block.Reset(schema, rows);
    Status st = ParseCsvRows(text.data(), text.size(), rows, plan, schema, {&kFile, 1, 0}, &block);
    INFO(st.message());
    REQUIRE(st.ok());
    REQUIRE(block.num_rows == rows);
    return block;
  };
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    // All of one type takes the whole-record path; with one column of another type (not
    // compared) every field goes through the per-field path.
    const Schema uniform = {{"a", t, {}}, {"b", t, {}}, {"c", t, {}}, {"d", t, {}}};
    const DType other = t == DType::kFloat32 ? DType::kFloat64 : DType::kFloat32;
    const Schema mixed = {{"a", t, {}}, {"b", t, {}}, {"c", t, {}}, {"d", other, {}}};
    RowBlock u = parse(uniform);
    RowBlock m = parse(mixed);
    for (size_t c = 0; c < 3; ++c) {
      INFO("column " << c);
      CHECK(std::memcmp(u.columns[c].values.data(), m.columns[c].values.data(),
                        DTypeSize(t) * static_cast<size_t>(rows)) == 0);
    }
    CHECK(std::isnan(t == DType::kFloat32 ? u.columns[0].As<float>()[0]
                                          : u.columns[0].As<double>()[0]));
  }

  // Errors in the middle of plain rows are found and named as by the general path.
  const Schema f32 = {{"a", DType::kFloat32, {}}, {"b", DType::kFloat32, {}}};
  const std::vector<FieldPlan> two = {{0, false}, {1, false}};
  std::string plain;
  for (int i = 0; i < 50; ++i) plain += std::to_string(i) + ".5," + std::to_string(i) + ".25\n";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"1.5,2.5,3.5\n", "expected 2 fields (as the header has), got 3"},
      {"1.5\n", "expected 2 fields (as the header has), got 1"},
      {"1.5,x\n", "column 'b': cannot parse 'x' as float32"},
      {"1.5,2.5.5\n", "column 'b': cannot parse '2.5.5' as float32"}};
  for (const auto& [row, message] : bad) {
    const std::string t = plain + row + plain;
    RowBlock b;
    b.Reset(f32, 101);
    Status st = ParseCsvRows(t.data(), t.size(), 101, two, f32, {&kFile, 2, 100}, &b);
    INFO(row);
    CHECK_THAT(st.message(), Catch::Contains("f.csv:52: " + message));
    CHECK(b.num_rows == 50);  // the rows before the bad one are kept
  }
}
