// CSV / JSON Lines / .npy reading: headers, type inference, values and error messages.
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

TEST_CASE("CSV type inference: int64, float64 (with empties as NaN), string, overrides") {
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

TEST_CASE("CSV rows parse into typed columns, quoted fields, CRLF, signs, nan") {
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

TEST_CASE("JSON Lines: inference keeps key order, numbers, strings, bools, arrays, nulls") {
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
