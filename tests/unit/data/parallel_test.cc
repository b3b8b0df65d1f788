// Parallel parsing (IterOptions::num_threads): the reader cuts each segment into blocks of
// whole records, K parser threads turn blocks into columns, and the batcher takes them in
// file order. Whatever K and the block size, an epoch yields the same batches (values,
// row counts, order), the same error (file, line, byte offset) after the same rows, and
// stays within the prefetch window.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "data_test_util.h"
#include "worker/data/batch_reader_internal.h"

using namespace traintl::data;
using namespace traintl::data::testing;

namespace {

// One epoch, every column of every batch serialised to text, so that two epochs compare
// exactly (floats by their bits, NaN included).
struct Dump {
  std::vector<std::string> batches;
  std::string error;  // empty when the epoch ended cleanly
  IterStats stats;
};

std::string Serialise(const Schema& schema, const RowBlock& b) {
  std::string s = std::to_string(b.num_rows) + ":";
  for (size_t c = 0; c < schema.size(); ++c) {
    const ColumnData& col = b.columns[c];
    s += "|";
    if (schema[c].dtype == DType::kString) {
      const int64_t* o = col.Offsets();
      for (int64_t r = 0; r < b.num_rows; ++r) {
        s +=
            "[" + std::string(col.values.data() + o[r], static_cast<size_t>(o[r + 1] - o[r])) + "]";
      }
    } else {
      // Raw bytes, hex: exact for every numeric type.
      static const char kHex[] = "0123456789abcdef";
      const size_t n = schema[c].RowBytes() * static_cast<size_t>(b.num_rows);
      for (size_t i = 0; i < n; ++i) {
        const auto byte = static_cast<unsigned char>(col.values.data()[i]);
        s += kHex[byte >> 4];
        s += kHex[byte & 15];
      }
    }
  }
  return s;
}

Dump ReadAll(const std::shared_ptr<Dataset>& ds, IterOptions o) {
  Dump d;
  auto reader = BatchReader::Start(ds, o);
  INFO(reader.status().message());
  REQUIRE(reader.ok());
  for (;;) {
    auto b = (*reader)->Next();
    if (!b.ok()) {
      d.error = b.status().message();
      // Next() keeps returning the error.
      auto again = (*reader)->Next();
      CHECK(!again.ok());
      if (!again.ok()) CHECK(again.status().message() == d.error);
      break;
    }
    if (!*b) break;
    d.batches.push_back(Serialise((*reader)->schema(), **b));
  }
  d.stats = (*reader)->stats();
  return d;
}

// A CSV file with everything that makes record boundaries hard: CRLF and LF endings mixed,
// blank lines (CRLF ones too), quoted fields with commas, doubled quotes and newlines
// (LF and CRLF) inside, records longer than the smallest block (1024 bytes), empty float
// cells (NaN), and no newline after the last record.
std::string AwkwardCsv(int64_t rows) {
  std::string t = "id,x,note,y\r\n";
  for (int64_t i = 0; i < rows; ++i) {
    std::string note;
    switch (i % 7) {
      case 0:
        note = "plain" + std::to_string(i);
        break;
      case 1:
        note = "\"with, comma\"";
        break;
      case 2:
        note = "\"two\nlines " + std::to_string(i) + "\"";
        break;
      case 3:
        note = "\"say \"\"hi\"\"\r\nthen\nbye\"";
        break;
      case 4:
        note = "\"" +
               std::string(1500 + static_cast<size_t>(i % 300), static_cast<char>('a' + i % 26)) +
               "\"";
        break;
      case 5:
        note = "";
        break;
      default:
        note = std::string(1100, 'z');  // unquoted, longer than a block too
        break;
    }
    const std::string x = i % 11 == 0 ? "" : std::to_string(static_cast<double>(i) * 0.25);
    t += std::to_string(i) + "," + x + "," + note + "," + std::to_string(i % 13 - 6) + "e-1";
    t += i % 3 == 0 ? "\r\n" : "\n";
    if (i % 17 == 0) t += "\n";
    if (i % 19 == 0) t += "\r\n";
  }
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
  return t;
}

std::vector<IterOptions> Variants() {
  std::vector<IterOptions> out;
  for (size_t block : {size_t{1024}, size_t{4096}, size_t{1} << 20}) {
    for (int64_t batch : {int64_t{1}, int64_t{7}, int64_t{64}}) {
      for (bool drop_last : {false, true}) {
        IterOptions o;
        o.block_bytes = block;
        o.batch_size = batch;
        o.drop_last = drop_last;
        out.push_back(o);
      }
    }
  }
  return out;
}

void CheckSameForThreads(const std::shared_ptr<Dataset>& ds, IterOptions o) {
  o.num_threads = 1;
  const Dump one = ReadAll(ds, o);
  for (int k : {2, 3, 8}) {
    o.num_threads = k;
    INFO("num_threads " << k << ", block_bytes " << o.block_bytes << ", batch_size " << o.batch_size
                        << ", drop_last " << o.drop_last << ", shuffle " << o.shuffle);
    const Dump many = ReadAll(ds, o);
    CHECK(many.error == one.error);
    REQUIRE(many.batches.size() == one.batches.size());
    for (size_t i = 0; i < one.batches.size(); ++i) {
      INFO("batch " << i);
      CHECK(many.batches[i] == one.batches[i]);
    }
    CHECK(many.stats.rows == one.stats.rows);
  }
}

}  // namespace

TEST_CASE("parallel parse: K parser threads give the batches of one, on awkward CSV") {
  TempDir dir;
  const int64_t rows = 700;
  Write(dir / "a.csv", AwkwardCsv(rows));
  auto ds = OpenDataset("file://" + dir.path() + "/a.csv");
  {
    // Sanity: the file reads as intended with one parser.
    IterOptions o;
    o.num_threads = 1;
    o.block_bytes = 1024;
    Epoch e = ReadEpoch(ds, o);
    INFO(e.status.message());
    REQUIRE(e.status.ok());
    REQUIRE(static_cast<int64_t>(e.ids.size()) == rows);
    for (int64_t i = 0; i < rows; ++i) CHECK(e.ids[static_cast<size_t>(i)] == i);
  }
  for (IterOptions o : Variants()) CheckSameForThreads(ds, o);
  // Per-epoch types (float32 straight from the text) and a column subset.
  IterOptions o;
  o.block_bytes = 1024;
  o.batch_size = 5;
  o.columns = {"y", "note", "x"};
  o.column_types = {{"x", DType::kFloat32}, {"y", DType::kFloat32}};
  CheckSameForThreads(ds, o);
}

TEST_CASE("parallel parse: shuffled epochs and split shards are the same for any K") {
  TempDir dir;
  Write(dir / "a.csv", AwkwardCsv(500));
  WriteIdCsv(dir / "b.csv", 500, 3001);
  ShardOptions so;
  so.chunk_bytes = 4096;
  for (int world : {1, 3}) {
    for (int rank = 0; rank < world; ++rank) {
      auto a = OpenDataset("file://" + dir.path() + "/a.csv", rank, world, true, so);
      auto b = OpenDataset("file://" + dir.path() + "/b.csv", rank, world, true, so);
      for (bool shuffle : {false, true}) {
        IterOptions o;
        o.block_bytes = 1024;
        o.batch_size = 33;
        o.shuffle = shuffle;
        o.seed = 9;
        o.epoch = 2;
        o.shuffle_buffer_rows = 100;
        INFO("world " << world << ", rank " << rank);
        CheckSameForThreads(a, o);
        CheckSameForThreads(b, o);
      }
    }
  }
}

TEST_CASE("parallel parse: a bad row deep in the file fails alike, line number exact") {
  TempDir dir;
  // 20000 good rows (well past the inference sample), then a short row on line 20002, then
  // more good rows that must not be delivered. Quoted newlines before it make the line
  // number differ from the record number.
  std::string t = "id,x,s\n";
  int64_t line = 2;
  for (int64_t i = 0; i < 20000; ++i) {
    if (i % 1000 == 5) {
      t += std::to_string(i) + ",1.5,\"a\nb\"\n";
      line += 2;
    } else {
      t += std::to_string(i) + "," + std::to_string(i) + ".25,s\r\n";
      line += 1;
    }
  }
  const int64_t bad_line = line;
  const uint64_t bad_offset = t.size();
  t += "20000,7\n";
  for (int64_t i = 20001; i < 20500; ++i) t += std::to_string(i) + ",1,s\n";
  Write(dir / "bad.csv", t);
  // An unparsable number deep in a second file.
  std::string u = "id,x,s\n";
  for (int64_t i = 0; i < 15000; ++i) u += std::to_string(i) + ",2.5,s\n";
  const int64_t num_line = 15000 + 2;
  u += "15000,2.5x,s\n";
  for (int64_t i = 15001; i < 15100; ++i) u += std::to_string(i) + ",2.5,s\n";
  Write(dir / "num.csv", u);

  const std::string short_row = dir / "bad.csv:" + std::to_string(bad_line) +
                                ": expected 3 fields (as the header has), got 2 (byte offset " +
                                std::to_string(bad_offset) + ")";
  auto bad = OpenDataset("file://" + dir.path() + "/bad.csv");
  auto num = OpenDataset("file://" + dir.path() + "/num.csv");
  for (size_t block : {size_t{1024}, size_t{64} << 10}) {
    for (int64_t batch : {int64_t{1000}, int64_t{4096}}) {
      IterOptions o;
      o.block_bytes = block;
      o.batch_size = batch;
      for (int k : {1, 2, 3}) {
        o.num_threads = k;
        INFO("num_threads " << k << ", block_bytes " << block << ", batch_size " << batch);
        Epoch e = ReadEpoch(bad, o);
        CHECK(e.status.message() == short_row);
        // Every full batch before the bad row, in order, and none after it.
        const int64_t full = 20000 / batch;
        REQUIRE(static_cast<int64_t>(e.ids.size()) == full * batch);
        for (size_t i = 0; i < e.ids.size(); ++i) CHECK(e.ids[i] == static_cast<int64_t>(i));

        Epoch n = ReadEpoch(num, o);
        INFO(n.status.message());
        CHECK(n.status.message().rfind(dir / "num.csv:" + std::to_string(num_line) +
                                           ": column 'x': cannot parse '2.5x' as float64",
                                       0) == 0);
        CHECK(static_cast<int64_t>(n.ids.size()) == 15000 / batch * batch);
      }
      // And the whole dump (batches + message) matches across K.
      CheckSameForThreads(bad, o);
      CheckSameForThreads(num, o);
    }
  }
}

TEST_CASE("parallel parse: blocks cut without a row count keep rows, lines and errors exact") {
  // A segment read to the end of its file is cut at the last newline of each block that
  // has no quote, without counting its rows; the parsers count rows and lines and the
  // batcher works out each block's first line. Blank-line runs longer than a block, CRLF,
  // records longer than a block and one quoted block in the middle must not shift a line.
  TempDir dir;
  std::string t = "id,x,s\n";
  int64_t line = 2;
  const int64_t rows = 5000;
  for (int64_t i = 0; i < rows; ++i) {
    const std::string s = i % 500 == 7 ? std::string(3000, 'w') : i == 2500 ? "\"q\nq\"" : "s";
    t += std::to_string(i) + "," + std::to_string(i) + ".5," + s + (i % 2 ? "\r\n" : "\n");
    line += i == 2500 ? 2 : 1;
    if (i % 1000 == 3) {
      t += std::string(2500, '\n');
      line += 2500;
    }
    if (i % 333 == 0) {
      t += "\r\n\n";
      line += 2;
    }
  }
  Write(dir / "good.csv", t);
  const int64_t bad_line = line;
  const uint64_t bad_offset = t.size();
  Write(dir / "bad.csv", t + "5000,oops,s\n5001,1,s\n");
  // A quote left open at the end of the file, after uncounted blocks.
  std::string q = "id,x,s\n";
  for (int64_t i = 0; i < 3000; ++i) q += std::to_string(i) + ",1.5,s\n";
  const uint64_t open_offset = q.size();
  q += "3000,1.5,\"open\n3001,1,s\n";
  Write(dir / "open.csv", q);

  ShardOptions head_only;  // the type inference must not read as far as the bad rows
  head_only.infer_rows = 100;
  auto good = OpenDataset("file://" + dir.path() + "/good.csv");
  auto bad = OpenDataset("file://" + dir.path() + "/bad.csv", 0, 1, true, head_only);
  auto open = OpenDataset("file://" + dir.path() + "/open.csv", 0, 1, true, head_only);
  const std::string bad_message =
      dir / "bad.csv:" + std::to_string(bad_line) + ": column 'x': cannot parse 'oops' as float64";
  const std::string open_message =
      dir / "open.csv:3002: a quoted field is not closed before the end of the file (byte offset " +
      std::to_string(open_offset) + ")";
  for (size_t block : {size_t{1024}, size_t{4096}, size_t{64} << 10}) {
    for (int k : {1, 2, 3}) {
      IterOptions o;
      o.block_bytes = block;
      o.batch_size = 100;
      o.num_threads = k;
      INFO("num_threads " << k << ", block_bytes " << block);
      Epoch g = ReadEpoch(good, o);
      INFO(g.status.message());
      CHECK(g.status.ok());
      REQUIRE(static_cast<int64_t>(g.ids.size()) == rows);
      for (int64_t i = 0; i < rows; ++i) CHECK(g.ids[static_cast<size_t>(i)] == i);
      CHECK(g.stats.rows == rows);

      Epoch b = ReadEpoch(bad, o);
      CHECK(b.status.message().rfind(bad_message, 0) == 0);
      CHECK(b.status.message().find("(byte offset " + std::to_string(bad_offset) + ")") !=
            std::string::npos);
      CHECK(static_cast<int64_t>(b.ids.size()) == rows);

      Epoch e = ReadEpoch(open, o);
      CHECK(e.status.message() == open_message);
      CHECK(e.ids.size() == 3000);
    }
  }
}

TEST_CASE("parallel parse: JSON Lines are the same for any K") {
  TempDir dir;
  std::string t;
  for (int64_t i = 0; i < 3000; ++i) {
    t += "{\"id\": " + std::to_string(i) + ", \"v\": [" + std::to_string(i) + ".5, 1]" +
         ", \"s\": \"" + std::string(static_cast<size_t>(i % 50), 'q') + "\"}";
    t += i % 2 ? "\r\n" : "\n";
    if (i % 100 == 0) t += "\n";
  }
  t += "{\"id\": 3000, \"v\": [1, 2], \"s\": 5}\n{\"id\": 3001, \"v\": [1, 2], \"s\": \"x\"}";
  Write(dir / "a.jsonl", t);
  ShardOptions so;
  so.infer_rows = 100;  // the bad row is not in the inference sample
  auto ds = OpenDataset("file://" + dir.path() + "/a.jsonl", 0, 1, true, so);
  IterOptions o;
  o.block_bytes = 1024;
  o.batch_size = 50;
  CheckSameForThreads(ds, o);
  o.num_threads = 3;
  Epoch e = ReadEpoch(ds, o);
  CHECK(e.status.message().rfind(dir / "a.jsonl:3031: key 's': expected string", 0) == 0);
  CHECK(e.ids.size() == 3000);
}

TEST_CASE("parallel parse: the window bounds the blocks in flight for any K") {
  TempDir dir;
  std::string t = "id,a,b,c\n";
  for (int64_t i = 0; i < 200000; ++i) {
    t += std::to_string(i) + ",1.25,-3.5," + std::to_string(i % 97) + ".125\n";
  }
  Write(dir / "big.csv", t);
  auto ds = OpenDataset("file://" + dir.path() + "/big.csv");
  for (int k : {1, 2, 3, 6}) {
    IterOptions o;
    o.batch_size = 512;
    o.prefetch_batches = 2;
    o.block_bytes = 16 << 10;
    o.num_threads = k;
    Epoch e = ReadEpoch(ds, o);
    REQUIRE(e.status.ok());
    CHECK(e.ids.size() == 200000);
    // At most k + 2 blocks, raw (block_bytes plus a carried partial record) or parsed
    // (4 x 8 bytes per row of at least ~22 bytes of text: under 1.5x the block), plus the
    // queued batches and the one being filled; 2x slack for allocation rounding.
    const int64_t blocks = (k + 2) * 3 * static_cast<int64_t>(o.block_bytes);
    const int64_t batches = (o.prefetch_batches + 2) * o.batch_size * 4 * 8;
    INFO("num_threads " << k << ": peak " << e.stats.peak_buffered_bytes);
    CHECK(e.stats.peak_buffered_bytes <= 2 * (blocks + batches));
    CHECK(e.stats.peak_buffered_bytes < static_cast<int64_t>(t.size()) / 4);
    CHECK(e.stats.buffered_bytes == 0);
  }
}

TEST_CASE("split shards: the whole index chunks of a segment are read uncounted, rows exact") {
  TempDir dir;
  Write(dir / "a.csv", AwkwardCsv(700));
  // Quote-free: every whole chunk goes through the uncounted path.
  std::string plain = "id,x,note,y\n";
  for (int64_t i = 0; i < 4000; ++i) {
    plain += std::to_string(i) + "," + std::to_string(i * 0.5) + ",n" + std::to_string(i) + ",1\n";
    if (i % 97 == 0) plain += "\r\n";
  }
  Write(dir / "b.csv", plain);
  for (const char* name : {"a.csv", "b.csv"}) {
    for (size_t chunk : {size_t{3000}, size_t{20000}, size_t{1} << 20}) {
      ShardOptions so;
      so.chunk_bytes = chunk;
      IterOptions o;
      o.batch_size = 1;  // one row per batch: rows compare one by one
      auto whole = ReadAll(OpenDataset("file://" + dir.path() + "/" + name, 0, 1, true, so), o);
      REQUIRE(whole.error.empty());
      const size_t n = whole.batches.size();
      for (int world : {2, 3, 7}) {
        for (size_t block : {size_t{1024}, size_t{8192}}) {
          INFO(name << ", chunk_bytes " << chunk << ", world " << world << ", block " << block);
          o.block_bytes = block;
          // The ranks' rows in rank order: every row in file order, then the first rows again
          // (the last rank's padding).
          std::vector<std::string> rows;
          for (int r = 0; r < world; ++r) {
            auto ds = OpenDataset("file://" + dir.path() + "/" + name, r, world, true, so);
            for (int k : {1, 2}) {
              o.num_threads = k;
              auto d = ReadAll(ds, o);
              REQUIRE(d.error.empty());
              CHECK(d.batches.size() == (n + world - 1) / world);
              if (k == 1) rows.insert(rows.end(), d.batches.begin(), d.batches.end());
            }
          }
          REQUIRE(rows.size() == (n + world - 1) / world * world);
          for (size_t i = 0; i < rows.size(); ++i) {
            INFO("row " << i);
            REQUIRE(rows[i] == whole.batches[i % n]);
          }
        }
      }
    }
  }
}

TEST_CASE("split shards: a bad row inside a rank's whole chunks names its line") {
  TempDir dir;
  std::string t = "id,x\n";
  for (int64_t i = 0; i < 5000; ++i) {
    t += std::to_string(i) + "," + (i == 3777 ? std::string("oops") : std::to_string(i)) + "\n";
    if (i % 100 == 0) t += "\n";
  }
  Write(dir / "bad.csv", t);
  ShardOptions so;
  so.chunk_bytes = 2048;
  so.column_types = {{"x", DType::kInt64}};
  // Row 3777 is on line 3777 + 2 + 38 blank lines (after rows 0, 100, ..., 3700).
  auto ds = OpenDataset("file://" + dir.path() + "/bad.csv", 1, 2, true, so);
  IterOptions o;
  o.block_bytes = 1024;
  o.batch_size = 10;
  for (int k : {1, 2}) {
    o.num_threads = k;
    Epoch e = ReadEpoch(ds, o);
    CHECK_THAT(e.status.message(),
               Catch::StartsWith(dir / "bad.csv:3817: column 'x': cannot parse 'oops'"));
    CHECK(e.ids.size() == 1270);  // rows 2500..3769: the batches before the bad row
  }
}

TEST_CASE("SplitAtChunks: head, whole chunks, tail") {
  const std::vector<Chunk> index = {
      {0, 10, 2, 5}, {0, 100, 7, 5}, {0, 200, 12, 5}, {1, 5, 2, 4}, {1, 50, 6, 4}};
  using P = std::vector<SegmentPiece>;
  auto pieces = [&](Segment s) { return SplitAtChunks(s, index); };
  auto same = [](const P& a, const P& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!(a[i].seg == b[i].seg) || a[i].end != b[i].end) return false;
    }
    return true;
  };
  // Whole chunks 0 and 1 uncounted up to chunk 2, then 2 rows of chunk 2.
  CHECK(same(pieces({0, 10, 2, 0, 12}),
             P{{{0, 10, 2, 0, -1}, 200}, {{0, 200, 12, 0, 2}, UINT64_MAX}}));
  // From inside chunk 0 to the end of the file: a head, then the rest to the end.
  CHECK(same(pieces({0, 10, 2, 3, 12}),
             P{{{0, 10, 2, 3, 2}, UINT64_MAX}, {{0, 100, 7, 0, -1}, UINT64_MAX}}));
  // Inside one chunk only.
  CHECK(same(pieces({0, 100, 7, 1, 3}), P{{{0, 100, 7, 1, 3}, UINT64_MAX}}));
  CHECK(same(pieces({1, 5, 2, 0, 3}), P{{{1, 5, 2, 0, 3}, UINT64_MAX}}));
  // One whole chunk: up to the next one.
  CHECK(same(pieces({1, 5, 2, 0, 4}), P{{{1, 5, 2, 0, -1}, 50}}));
  // Not at a chunk, no row limit, or more rows than the file has: as it is.
  CHECK(same(pieces({0, 11, 2, 0, 3}), P{{{0, 11, 2, 0, 3}, UINT64_MAX}}));
  CHECK(same(pieces({0, 10, 2, 0, -1}), P{{{0, 10, 2, 0, -1}, UINT64_MAX}}));
  CHECK(same(pieces({1, 5, 2, 0, 9}), P{{{1, 5, 2, 0, 9}, UINT64_MAX}}));
}
