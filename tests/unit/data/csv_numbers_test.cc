// CSV numbers and rows: the fast paths (one-pass, word-at-a-time, whole-record) agree
// with the general path and with strtod/strtof.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "data_test_util.h"
#include "worker/data/text_formats.h"

using traintl::Status;
using namespace traintl::data;
using namespace traintl::data::testing;

namespace {

const std::string kFile = "f.csv";

}  // namespace

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
