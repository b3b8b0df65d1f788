// Row-balanced sharding, identical batch counts per rank, deterministic shuffling.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "data_test_util.h"

using namespace traintl::data;
using namespace traintl::data::testing;

namespace {

// The global row numbers (positions in file order) a plan covers.
std::vector<int64_t> PlanRows(const std::vector<Chunk>& chunks, const std::vector<Segment>& plan) {
  // First row number of each chunk, by (file, offset).
  std::map<std::pair<int, uint64_t>, int64_t> first;
  int64_t n = 0;
  for (const auto& c : chunks) {
    first[{c.file, c.offset}] = n;
    n += c.rows;
  }
  std::vector<int64_t> rows;
  for (const auto& s : plan) {
    const int64_t start = first.at({s.file, s.offset}) + s.skip_rows;
    for (int64_t i = 0; i < s.rows; ++i) rows.push_back(start + i);
  }
  return rows;
}

// Checks the sharding invariants over all ranks: equal counts, every row read, and rows read
// twice only as padding (W * ceil(N / W) - N of them).
void CheckShards(const std::vector<std::vector<int64_t>>& per_rank, int64_t total) {
  const int world = static_cast<int>(per_rank.size());
  const int64_t each = (total + world - 1) / world;
  std::map<int64_t, int> seen;
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r);
    CHECK(static_cast<int64_t>(per_rank[r].size()) == each);
    for (int64_t id : per_rank[r]) ++seen[id];
  }
  CHECK(static_cast<int64_t>(seen.size()) == total);
  int64_t extra = 0;
  for (const auto& [id, count] : seen) extra += count - 1;
  CHECK(extra == each * world - total);
  if (total >= world) {
    for (const auto& [id, count] : seen) CHECK(count <= 2);
  }
}

std::vector<Chunk> Chunks(const std::vector<std::vector<int64_t>>& files) {
  std::vector<Chunk> out;
  for (size_t f = 0; f < files.size(); ++f) {
    uint64_t offset = 0;
    for (int64_t rows : files[f]) {
      out.push_back({static_cast<int>(f), offset, 1, rows});
      offset += static_cast<uint64_t>(rows) * 10;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("PlanEpoch: balanced, complete shards for awkward sizes") {
  const std::vector<std::vector<std::vector<int64_t>>> layouts = {
      {{10}},              // one file, rows not divisible by ranks
      {{1}, {1000}, {7}},  // very different file sizes
      {{5}, {5}},          // more ranks than files
      {{3, 3, 1}, {2}, {4, 4}},
      {{1}},  // one row
  };
  for (const auto& layout : layouts) {
    const auto chunks = Chunks(layout);
    int64_t total = 0;
    for (const auto& c : chunks) total += c.rows;
    for (int world : {1, 2, 3, 4, 7, 16}) {
      for (bool shuffle : {false, true}) {
        INFO("total " << total << " world " << world << " shuffle " << shuffle);
        std::vector<std::vector<int64_t>> per_rank;
        for (int r = 0; r < world; ++r) {
          per_rank.push_back(PlanRows(chunks, PlanEpoch(chunks, r, world, true, shuffle, 7, 3)));
        }
        CheckShards(per_rank, total);
        if (!shuffle) {
          // Without shuffling a rank reads a contiguous run (wrapping around at the end).
          for (const auto& rows : per_rank) {
            for (size_t i = 1; i < rows.size(); ++i) {
              CHECK((rows[i] == rows[i - 1] + 1 || rows[i] == 0));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("PlanEpoch: adjacent chunks of a file merge, split=false reads everything") {
  const auto chunks = Chunks({{4, 4, 4}, {6}});
  auto plan = PlanEpoch(chunks, 0, 1, true, false, 0, 0);
  REQUIRE(plan.size() == 2);
  CHECK(plan[0] == Segment{0, 0, 1, 0, 12});
  CHECK(plan[1] == Segment{1, 0, 1, 0, 6});
  // Rank 1 of 2 starts in the middle of the first file's last chunk.
  auto r1 = PlanEpoch(chunks, 1, 2, true, false, 0, 0);
  REQUIRE(r1.size() == 2);
  CHECK(r1[0] == Segment{0, 80, 1, 1, 3});
  CHECK(r1[1] == Segment{1, 0, 1, 0, 6});
  for (int r = 0; r < 3; ++r) {
    CHECK(PlanRows(chunks, PlanEpoch(chunks, r, 3, false, false, 0, 0)).size() == 18);
  }
}

TEST_CASE("Shards over files: awkward sizes, identical batch counts per rank") {
  TempDir dir;
  // Files of very different sizes: 1, 997 and 13 rows (1011 rows in all).
  WriteIdCsv(dir / "part-0.csv", 0, 1);
  WriteIdCsv(dir / "part-1.csv", 1, 997);
  WriteIdCsv(dir / "part-2.csv", 998, 13);
  const std::string uri = "file://" + dir.path() + "/part-*.csv";
  for (int world : {1, 2, 3, 4, 5, 8}) {
    for (size_t chunk_bytes : {size_t{1} << 20, size_t{200}}) {  // small chunks: mid-chunk starts
      INFO("world " << world << " chunk_bytes " << chunk_bytes);
      ShardOptions so;
      so.chunk_bytes = chunk_bytes;
      std::vector<std::vector<int64_t>> per_rank;
      std::set<size_t> batch_counts, dropped_counts;
      for (int r = 0; r < world; ++r) {
        auto ds = OpenDataset(uri, r, world, true, so);
        IterOptions o;
        o.batch_size = 10;
        o.block_bytes = 1024;  // many blocks per file
        o.num_threads = 2;
        Epoch e = ReadEpoch(ds, o);
        INFO(e.status.message());
        REQUIRE(e.status.ok());
        per_rank.push_back(e.ids);
        batch_counts.insert(e.batch_rows.size());
        o.drop_last = true;
        Epoch d = ReadEpoch(ds, o);
        REQUIRE(d.status.ok());
        dropped_counts.insert(d.batch_rows.size());
        for (int64_t n : d.batch_rows) CHECK(n == 10);
        if (world > 1) CHECK(ds->TotalRows() == std::optional<int64_t>(1011));  // counted to split
      }
      CHECK(batch_counts.size() == 1);
      CHECK(dropped_counts.size() == 1);
      CheckShards(per_rank, 1011);
    }
  }
}

TEST_CASE("More ranks than files, and more ranks than rows") {
  TempDir dir;
  WriteIdCsv(dir / "a.csv", 0, 2);
  WriteIdCsv(dir / "b.csv", 2, 1);
  const std::string uri = "file://" + dir.path();  // a directory
  for (int world : {2, 3, 5}) {
    std::vector<std::vector<int64_t>> per_rank;
    for (int r = 0; r < world; ++r) {
      auto ds = OpenDataset(uri, r, world);
      IterOptions o;
      o.batch_size = 4;
      Epoch e = ReadEpoch(ds, o);
      REQUIRE(e.status.ok());
      CHECK(e.batch_rows.size() == 1);
      per_rank.push_back(e.ids);
    }
    CheckShards(per_rank, 3);
  }
}

TEST_CASE("split=false: every rank reads every row, in file order") {
  TempDir dir;
  WriteIdCsv(dir / "a.csv", 0, 50);
  for (int r = 0; r < 3; ++r) {
    auto ds = OpenDataset("file://" + dir.path() + "/a.csv", r, 3, /*split=*/false);
    IterOptions o;
    o.batch_size = 16;
    Epoch e = ReadEpoch(ds, o);
    REQUIRE(e.status.ok());
    std::vector<int64_t> want(50);
    std::iota(want.begin(), want.end(), 0);
    CHECK(e.ids == want);
    CHECK(e.batch_rows == std::vector<int64_t>{16, 16, 16, 2});
  }
}

TEST_CASE("Shuffle is deterministic per (seed, epoch), differs across epochs, keeps shards") {
  TempDir dir;
  WriteIdCsv(dir / "a.csv", 0, 3000);
  WriteIdCsv(dir / "b.csv", 3000, 1001);
  const std::string uri = "file://" + dir.path() + "/*.csv";
  ShardOptions so;
  so.chunk_bytes = 4096;  // many chunks, so that the chunk order matters
  const int world = 3;
  auto read = [&](int rank, uint64_t seed, int64_t epoch, int threads) {
    auto ds = OpenDataset(uri, rank, world, true, so);
    IterOptions o;
    o.batch_size = 64;
    o.shuffle = true;
    o.seed = seed;
    o.epoch = epoch;
    o.shuffle_buffer_rows = 500;
    o.num_threads = threads;
    o.block_bytes = 2048;
    Epoch e = ReadEpoch(ds, o);
    INFO(e.status.message());
    REQUIRE(e.status.ok());
    return e.ids;
  };
  std::vector<std::vector<int64_t>> epoch0;
  for (int r = 0; r < world; ++r) {
    auto a = read(r, 42, 0, 1);
    auto b = read(r, 42, 0, 3);  // the parser count does not change the order
    CHECK(a == b);
    epoch0.push_back(a);
  }
  CheckShards(epoch0, 4001);
  // Rows are really mixed: not in file order.
  std::vector<int64_t> sorted = epoch0[0];
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted != epoch0[0]);

  std::vector<std::vector<int64_t>> epoch1;
  for (int r = 0; r < world; ++r) epoch1.push_back(read(r, 42, 1, 2));
  CheckShards(epoch1, 4001);
  CHECK(epoch1[0] != epoch0[0]);
  // Another epoch hands ranks other rows, not only another order.
  std::set<int64_t> s0(epoch0[0].begin(), epoch0[0].end());
  std::set<int64_t> s1(epoch1[0].begin(), epoch1[0].end());
  CHECK(s0 != s1);
  CHECK(read(0, 7, 0, 2) != epoch0[0]);  // another seed
}

TEST_CASE("Column selection, order, and unknown columns") {
  TempDir dir;
  WriteIdCsv(dir / "a.csv", 0, 5);
  auto ds = OpenDataset("file://" + dir.path() + "/a.csv");
  IterOptions o;
  o.columns = {"name", "id"};
  auto reader = BatchReader::Start(ds, o);
  REQUIRE(reader.ok());
  REQUIRE((*reader)->schema().size() == 2);
  CHECK((*reader)->schema()[0].name == "name");
  CHECK((*reader)->schema()[0].dtype == DType::kString);
  CHECK((*reader)->schema()[1].dtype == DType::kInt64);
  auto b = (*reader)->Next();
  REQUIRE(b.ok());
  REQUIRE(*b);
  const auto& names = (*b)->columns[0];
  CHECK(std::string(names.values.data() + names.Offsets()[4],
                    names.values.data() + names.Offsets()[5]) == "row4");
  CHECK((*b)->columns[1].As<int64_t>()[4] == 4);
  IterOptions bad;
  bad.columns = {"nope"};
  auto r2 = BatchReader::Start(ds, bad);
  REQUIRE_FALSE(r2.ok());
  CHECK_THAT(r2.status().message(), Catch::Contains("no column 'nope'"));
  CHECK_THAT(r2.status().message(), Catch::Contains("'id', 'x', 'name'"));
}

TEST_CASE("Per-epoch column types: parsed straight into the requested type") {
  TempDir dir;
  WriteIdCsv(dir / "a.csv", 0, 5);
  auto ds = OpenDataset("file://" + dir.path() + "/a.csv");
  IterOptions o;
  o.column_types = {{"x", DType::kFloat32}, {"id", DType::kInt32}};
  auto reader = BatchReader::Start(ds, o);
  REQUIRE(reader.ok());
  CHECK((*reader)->schema()[0].dtype == DType::kInt32);
  CHECK((*reader)->schema()[1].dtype == DType::kFloat32);
  auto b = (*reader)->Next();
  REQUIRE(b.ok());
  REQUIRE(*b);
  CHECK((*b)->columns[0].As<int32_t>()[4] == 4);
  CHECK((*b)->columns[1].As<float>()[3] == 1.5f);
  CHECK(ds->schema()[1].dtype == DType::kFloat64);  // the shard's own types stay

  IterOptions unknown;
  unknown.columns = {"id"};
  unknown.column_types = {{"x", DType::kFloat32}};  // not read
  CHECK_THAT(BatchReader::Start(ds, unknown).status().message(),
             Catch::Contains("column_types names 'x'"));
  TempDir jdir;
  Write(jdir / "a.jsonl", "{\"id\": 1, \"s\": \"x\"}\n");
  auto jds = OpenDataset("file://" + jdir.path() + "/a.jsonl");
  IterOptions to_number;
  to_number.column_types = {{"s", DType::kFloat64}};
  CHECK_THAT(BatchReader::Start(jds, to_number).status().message(),
             Catch::Contains("column 's' is string and cannot be read as float64"));
}
