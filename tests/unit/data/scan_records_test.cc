// Record scanning for the text formats (ScanRecords): rows, blank lines, quoted newlines,
// and the vectorized line counting against a one-record-at-a-time reference.
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

ScanResult Scan(const std::string& text, int64_t max_rows, bool eof, bool csv = true) {
  auto r = ScanRecords(text.data(), text.size(), max_rows, eof, csv, {&kFile, 1, 0});
  INFO(r.status().message());
  REQUIRE(r.ok());
  return *r;
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
