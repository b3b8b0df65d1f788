// Parquet datasets: every fixture of tests/fixtures/parquet (written by parquet-wasm, the
// Rust writer, and hyparquet-writer, not by our code) read back exactly as its .json says;
// sharding by row groups over 2 and 3 ranks; column projection (only the selected column
// chunks are read); the null policy; unsupported features; the corrupt corpus and random
// corruption (errors, never crashes).
#include <catch2/catch.hpp>

#include <dirent.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "data_test_util.h"
#include "worker/data/parquet_format.h"
#include "worker/data/parquet_pages.h"
#include "worker/data/parquet_thrift.h"

using namespace traintl::data;
using namespace traintl::data::testing;
using nlohmann::json;
using traintl::Result;
using traintl::Status;

namespace {

const std::string kFixtures = PARQUET_FIXTURES;

std::vector<std::string> Files(const std::string& dir, const std::string& suffix) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  REQUIRE(d != nullptr);
  while (struct dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n.size() > suffix.size() &&
        n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) {
      out.push_back(n.substr(0, n.size() - suffix.size()));
    }
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

json Expected(const std::string& name) {
  auto text = traintl::ReadFile(kFixtures + "/" + name + ".json");
  REQUIRE(text.ok());
  return json::parse(*text);
}

// Every batch of an epoch, concatenated, column by column (as JSON values of the form the
// fixtures' .json files use).
struct Table {
  Schema schema;
  std::vector<std::vector<json>> columns;
  Status status;
  IterStats stats;
  int64_t rows = 0;
};

Table ReadAll(const std::shared_ptr<Dataset>& ds, IterOptions options = {}) {
  Table t;
  auto reader = BatchReader::Start(ds, options);
  if (!reader.ok()) {
    t.status = reader.status();
    return t;
  }
  t.schema = (*reader)->schema();
  t.columns.resize(t.schema.size());
  for (;;) {
    auto b = (*reader)->Next();
    if (!b.ok()) {
      t.status = b.status();
      break;
    }
    if (!*b) break;
    const RowBlock& block = **b;
    t.rows += block.num_rows;
    for (size_t c = 0; c < t.schema.size(); ++c) {
      const ColumnData& col = block.columns[c];
      for (int64_t r = 0; r < block.num_rows; ++r) {
        json v;
        switch (t.schema[c].dtype) {
          case DType::kInt64:
            v = std::to_string(col.As<int64_t>()[r]);
            break;
          case DType::kInt32:
            v = col.As<int32_t>()[r];
            break;
          case DType::kFloat32: {
            const float f = col.As<float>()[r];
            v = std::isnan(f) ? json(nullptr) : json(static_cast<double>(f));
            break;
          }
          case DType::kFloat64: {
            const double f = col.As<double>()[r];
            v = std::isnan(f) ? json(nullptr) : json(f);
            break;
          }
          case DType::kString: {
            const int64_t* o = col.Offsets();
            v = std::string(col.values.data() + o[r], static_cast<size_t>(o[r + 1] - o[r]));
            break;
          }
        }
        t.columns[c].push_back(std::move(v));
      }
    }
  }
  t.stats = (*reader)->stats();
  return t;
}

std::string Uri(const std::string& name) { return "file://" + kFixtures + "/" + name + ".parquet"; }

Result<std::shared_ptr<Dataset>> TryOpen(const std::string& uri, int rank = 0, int world = 1,
                                         const ShardOptions& options = {}) {
  DatasetConfig c;
  c.name = "test";
  c.uri = uri;
  c.rank = rank;
  c.world_size = world;
  return Dataset::Open(c, options);
}

// Opens and reads a whole file; the first error.
Status OpenAndRead(const std::string& uri) {
  auto ds = TryOpen(uri);
  if (!ds.ok()) return ds.status();
  IterOptions o;
  o.num_threads = 1;
  return ReadAll(*ds, o).status;
}

}  // namespace

TEST_CASE("parquet: every fixture reads back exactly as written") {
  int checked = 0;
  for (const auto& name : Files(kFixtures, ".parquet")) {
    INFO(name);
    // unsupported_*: no expected values; null_in_int: its own test case, below.
    if (name.rfind("unsupported_", 0) == 0 || name == "null_in_int") continue;
    ++checked;
    const json want = Expected(name);
    auto ds = OpenDataset(Uri(name));
    CHECK(ds->format() == Format::kParquet);
    REQUIRE(ds->TotalRows());
    CHECK(*ds->TotalRows() == want["rows"].get<int64_t>());
    auto index = ds->Index(nullptr);
    REQUIRE(index.ok());
    CHECK((*index)->size() == want["row_groups"].get<size_t>());
    for (int batch : {7, 1000}) {
      IterOptions o;
      o.batch_size = batch;
      Table t = ReadAll(ds, o);
      INFO(t.status.message());
      REQUIRE(t.status.ok());
      REQUIRE(t.schema.size() == want["columns"].size());
      CHECK(t.rows == want["rows"].get<int64_t>());
      for (size_t c = 0; c < t.schema.size(); ++c) {
        const std::string& col = t.schema[c].name;
        INFO("column " << col);
        REQUIRE(want["columns"].contains(col));
        const json& w = want["columns"][col];
        CHECK(DTypeName(t.schema[c].dtype) == w["dtype"].get<std::string>());
        REQUIRE(t.columns[c].size() == w["values"].size());
        for (size_t r = 0; r < t.columns[c].size(); ++r) {
          INFO("row " << r);
          if (t.schema[c].dtype == DType::kFloat32 && !w["values"][r].is_null()) {
            // Exact: the expected value is a float32 written as a double.
            CHECK(t.columns[c][r].get<double>() == w["values"][r].get<double>());
          } else {
            CHECK(t.columns[c][r] == w["values"][r]);
          }
        }
      }
    }
  }
  CHECK(checked == 18);  // 16 from the Rust writer, 2 from hyparquet-writer
}

TEST_CASE("parquet: bloom filters are read past") {
  // hyparquet-writer put one on column 's' of these (as DuckDB does by default on
  // dictionary-encoded columns); the test above read them exactly.
  for (const char* name : {"hyparquet_snappy", "hyparquet_gzip"}) {
    INFO(name);
    auto ds = OpenDataset(Uri(name));
    const auto& layout = *ds->files()[0].parquet;
    int filtered = 0;
    for (const auto& rg : layout.meta.row_groups) {
      for (size_t c = 0; c < layout.columns.size(); ++c) {
        const bool bloom = rg.columns[c].meta_data.bloom_filter_offset.has_value();
        CHECK(bloom == (layout.columns[c].name == "s"));
        filtered += bloom;
      }
    }
    CHECK(filtered == static_cast<int>(layout.meta.row_groups.size()));
    IterOptions o;
    CHECK(ReadAll(ds, o).status.ok());
  }
}

TEST_CASE("parquet: numeric batches inside a row group are slices of it, with its values") {
  // The fixtures' row groups hold 20 rows: batches of 3 are mostly slices when no string
  // column is selected (strings are copied, and their batches with them). Their bytes are
  // compared with a read in one copied batch, after the reader is gone.
  auto read = [](const std::shared_ptr<Dataset>& ds, const IterOptions& o, int64_t* slices) {
    std::vector<std::unique_ptr<RowBlock>> kept;
    auto reader = BatchReader::Start(ds, o);
    REQUIRE(reader.ok());
    for (;;) {
      auto b = (*reader)->Next();
      REQUIRE(b.ok());
      if (!*b) break;
      if ((*b)->lender) ++*slices;
      kept.push_back(std::move(*b));
    }
    return kept;
  };
  auto bytes = [](const std::vector<std::unique_ptr<RowBlock>>& blocks, size_t column) {
    std::string out;
    for (const auto& b : blocks) {
      out.append(b->columns[column].values.data(), b->columns[column].values.size());
    }
    return out;
  };
  int checked = 0;
  for (const auto& name : Files(kFixtures, ".parquet")) {
    if (name.rfind("types_", 0) != 0) continue;
    INFO(name);
    auto ds = OpenDataset(Uri(name));
    IterOptions o;
    o.batch_size = 3;
    for (const auto& c : ds->schema()) {
      if (c.dtype != DType::kString) o.columns.push_back(c.name);
    }
    REQUIRE(o.columns.size() >= 3);
    int64_t slices = 0;
    const auto kept = read(ds, o, &slices);
    CHECK(slices > static_cast<int64_t>(kept.size()) / 2);
    IterOptions whole = o;
    whole.batch_size = 1000;
    int64_t none = 0;
    const auto reference = read(ds, whole, &none);
    CHECK(none == 0);
    REQUIRE(reference.size() == 1);
    for (size_t c = 0; c < o.columns.size(); ++c) {
      INFO("column " << o.columns[c]);
      CHECK(bytes(kept, c) == bytes(reference, c));
      CHECK(!bytes(kept, c).empty());
    }
    ++checked;
  }
  CHECK(checked == 16);
}

TEST_CASE("parquet: 2 and 3 ranks get equal row counts over row groups and read every row") {
  // One file of 3 row groups (25, 25, 10), and a glob of all 16 Rust-written files.
  for (const std::string& uri :
       {Uri("types_snappy_dict_v1"), "file://" + kFixtures + "/types_*.parquet"}) {
    auto whole = OpenDataset(uri);
    const int64_t total = *whole->TotalRows();
    for (int world : {2, 3}) {
      for (bool shuffle : {false, true}) {
        INFO(uri << " world " << world << " shuffle " << shuffle);
        std::multiset<int64_t> seen;
        std::vector<int64_t> counts;
        for (int rank = 0; rank < world; ++rank) {
          auto ds = OpenDataset(uri, rank, world);
          IterOptions o;
          o.batch_size = 8;
          o.shuffle = shuffle;
          o.seed = 5;
          o.epoch = 2;
          o.columns = {"id", "i32"};
          Table t = ReadAll(ds, o);
          REQUIRE(t.status.ok());
          counts.push_back(t.rows);
          for (size_t r = 0; r < t.columns[0].size(); ++r) {
            // Row ids repeat across files: tell rows apart by (id, i32) pairs per file is
            // not needed, the count per id is what matters.
            seen.insert(std::stoll(t.columns[0][r].get<std::string>()));
          }
        }
        const int64_t per = (total + world - 1) / world;
        for (int64_t c : counts) CHECK(c == per);
        // Every row is read: each id appears at least as often as the files hold it.
        auto all = ReadAll(whole, {});
        std::multiset<int64_t> ids;
        for (const auto& v : all.columns[0]) ids.insert(std::stoll(v.get<std::string>()));
        for (int64_t id : std::set<int64_t>(ids.begin(), ids.end())) {
          CHECK(seen.count(id) >= ids.count(id));
        }
        CHECK(static_cast<int64_t>(seen.size()) == per * world);
        CHECK(static_cast<int64_t>(seen.size()) - total < world);
      }
    }
  }
}

TEST_CASE("parquet: a split dataset's index comes from the footer, never the shared index") {
  // The shared row index (index_cache.h) saves the text formats' scans; a Parquet index is
  // the footer every rank reads anyway, so nothing is locked, scanned or stored for it.
  TempDir dir;
  ShardOptions so;
  so.index_dir = dir.path() + "/.data_index";
  for (int rank = 0; rank < 2; ++rank) {
    auto ds = OpenDataset(Uri("types_snappy_dict_v1"), rank, 2, true, so);
    auto index = ds->Index(nullptr);
    REQUIRE(index.ok());
    CHECK((*index)->size() == 3);  // its row groups
    CHECK(ds->index_stats().files_stored == 0);
    CHECK(ds->index_stats().files_loaded == 0);
  }
  auto left = traintl::ListFilesRecursive(so.index_dir);
  CHECK((!left.ok() || left->empty()));
}

TEST_CASE("parquet: a rank's plan starts and stops inside row groups") {
  // 60 rows in row groups of 25, 25, 10 over 4 ranks: 15 rows each, so rank 1 reads rows
  // 15..29 (the end of row group 0 and the start of row group 1).
  auto ds = OpenDataset(Uri("types_zstd_plain_v2"), 1, 4);
  IterOptions o;
  o.columns = {"id"};
  Table t = ReadAll(ds, o);
  REQUIRE(t.status.ok());
  std::vector<json> want;
  for (int i = 15; i < 30; ++i) want.push_back(std::to_string(i));
  CHECK(t.columns[0] == want);
}

TEST_CASE("parquet: only the selected columns' chunks are read") {
  const std::string name = "types_uncompressed_plain_v1";
  auto ds = OpenDataset(Uri(name));
  const json want = Expected(name);
  IterOptions all;
  const int64_t all_bytes = ReadAll(ds, all).stats.bytes_read;
  IterOptions o;
  o.columns = {"f64", "id"};
  Table t = ReadAll(ds, o);
  REQUIRE(t.status.ok());
  REQUIRE(t.schema.size() == 2);
  CHECK(t.schema[0].name == "f64");
  CHECK(t.schema[1].name == "id");
  CHECK(t.columns[0] == want["columns"]["f64"]["values"].get<std::vector<json>>());
  CHECK(t.columns[1] == want["columns"]["id"]["values"].get<std::vector<json>>());
  // Exactly the two columns' chunks, from the footer's sizes.
  const ParquetLayout& layout = *ds->files()[0].parquet;
  int64_t expect = 0;
  for (const auto& rg : layout.meta.row_groups) {
    for (size_t c = 0; c < layout.columns.size(); ++c) {
      if (layout.columns[c].name == "f64" || layout.columns[c].name == "id") {
        expect += static_cast<int64_t>(ColumnChunkRange(rg.columns[c].meta_data).size);
      }
    }
  }
  CHECK(t.stats.bytes_read == expect);
  CHECK(t.stats.bytes_read * 3 < all_bytes);
}

TEST_CASE("parquet: column_types convert numbers, strings stay strings") {
  ShardOptions so;
  so.column_types = {{"f64", DType::kFloat32}, {"i32", DType::kInt64}};
  auto ds = OpenDataset(Uri("types_snappy_plain_v1"), 0, 1, true, so);
  IterOptions o;
  o.columns = {"f64", "i32"};
  o.column_types = {{"f64", DType::kFloat64}};  // per epoch, back to float64
  Table t = ReadAll(ds, o);
  REQUIRE(t.status.ok());
  const json want = Expected("types_snappy_plain_v1");
  CHECK(t.schema[1].dtype == DType::kInt64);
  for (size_t r = 0; r < t.columns[1].size(); ++r) {
    CHECK(t.columns[1][r] == std::to_string(want["columns"]["i32"]["values"][r].get<int>()));
  }
  // Floats read as ints must be whole and in range, ints read as int32 in range: an error
  // naming the row otherwise (as CSV refuses "2.5" in an int column), never a wrapped value.
  for (const auto& [col, type, words] : std::vector<std::tuple<std::string, DType, std::string>>{
           {"f32", DType::kInt64, "which is not a int64 value"},
           {"f64", DType::kInt32, "which is not a int32 value"},
           {"i64", DType::kInt32,
            "row 0 of the row group holds 9007199254740993, which is not a "
            "int32 value"}}) {
    INFO(col);
    IterOptions conv;
    conv.columns = {col};
    conv.column_types = {{col, type}};
    Table c = ReadAll(ds, conv);
    REQUIRE_FALSE(c.status.ok());
    CHECK_THAT(c.status.message(), Catch::Contains("column '" + col + "': row "));
    CHECK_THAT(c.status.message(), Catch::Contains(words));
  }
  ShardOptions bad;
  bad.column_types = {{"s", DType::kFloat32}};
  auto refused = TryOpen(Uri("types_snappy_plain_v1"), 0, 1, bad);
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.status().message(), Catch::Contains("column 's' holds BYTE_ARRAY values"));
}

TEST_CASE(
    "parquet: a null is NaN in a float column, an error naming file, row group and "
    "column in an int one") {
  const std::string uri = Uri("null_in_int");
  auto ds = OpenDataset(uri);
  IterOptions o;
  o.batch_size = 4;
  Table t = ReadAll(ds, o);
  REQUIRE_FALSE(t.status.ok());
  CHECK(t.status.code() == traintl::Status::Code::kInvalidArgument);
  INFO(t.status.message());
  // Row 37 is null: row group 1 (rows 20..39), its row 17.
  CHECK_THAT(t.status.message(),
             Catch::Contains(kFixtures + "/null_in_int.parquet: row group 1, column 'v': row 17 "
                                         "of the row group is null"));
  CHECK_THAT(t.status.message(), Catch::Contains("only in a float column (as NaN)"));
  CHECK(t.rows == 20);  // the rows before the bad row group are delivered
  // Read as float64: NaN.
  ShardOptions so;
  so.column_types = {{"v", DType::kFloat64}};
  auto f = OpenDataset(uri, 0, 1, true, so);
  Table ok = ReadAll(f, o);
  REQUIRE(ok.status.ok());
  for (int64_t r = 0; r < 50; ++r) {
    CHECK(ok.columns[1][r] == (r == 37 ? json(nullptr) : json(static_cast<double>(r))));
  }
  // Projection: the rows without the column read fine.
  IterOptions ids;
  ids.columns = {"id"};
  CHECK(ReadAll(ds, ids).status.ok());
}

TEST_CASE(
    "parquet: nested columns, unsupported codecs and encodings are refused, naming the column") {
  auto nested = TryOpen(Uri("unsupported_nested"));
  REQUIRE_FALSE(nested.ok());
  CHECK_THAT(nested.status().message(),
             Catch::Contains("unsupported_nested.parquet: column 'xs' is a nested type"));
  for (const auto& [name, codec] : std::map<std::string, std::string>{
           {"unsupported_brotli", "BROTLI"}, {"unsupported_lz4", "LZ4_RAW"}}) {
    auto r = TryOpen(Uri(name));
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.status().message(),
               Catch::Contains(name + ".parquet: row group 0, column 'id' is compressed with " +
                               codec + ", which is not supported"));
  }
  auto delta = TryOpen(Uri("unsupported_delta"));
  REQUIRE_FALSE(delta.ok());
  CHECK_THAT(delta.status().message(), Catch::Contains("row group 0, column 'id' uses the "
                                                       "DELTA_BINARY_PACKED encoding, which is "
                                                       "not supported"));
}

TEST_CASE("parquet: the corrupt corpus gives InvalidArgument naming the file, never a crash") {
  const std::string dir = kFixtures + "/corrupt";
  const std::map<std::string, std::string> why = {
      {"truncated_footer", "bad file metadata (footer): the metadata ends in the middle"},
      {"cut_in_half", "does not end with the magic number PAR1"},
      {"too_short", "not a Parquet file: 8 bytes, too short"},
      {"wrong_magic", "does not end with the magic number PAR1"},
      {"encrypted_magic", "encrypted"},
      {"footer_length_lies", "footer length"},
      {"bad_page_header", "row group 0, column 'id': bad page header"},
      {"page_size_lies", "row group 0, column 'id': a page of"},
      {"scrambled_pages", "row group 0, column"},
      {"uncompressed_size_lies", "row group 0, column 'id': an uncompressed page of"},
      {"overlapping_chunks", "row group 0: the byte ranges of columns 'id' and 'f64' overlap"},
  };
  const auto names = Files(dir, ".parquet");
  CHECK(names.size() == why.size());
  for (const auto& name : names) {
    INFO(name);
    const std::string path = dir + "/" + name + ".parquet";
    Status st = OpenAndRead("file://" + path);
    INFO(st.message());
    REQUIRE_FALSE(st.ok());
    CHECK(st.code() == traintl::Status::Code::kInvalidArgument);
    CHECK_THAT(st.message(), Catch::StartsWith(path + ": "));
    auto w = why.find(name);
    REQUIRE(w != why.end());
    CHECK_THAT(st.message(), Catch::Contains(w->second));
  }
}

TEST_CASE("parquet: randomly corrupted files fail cleanly") {
  TempDir dir;
  for (const char* name :
       {"types_snappy_dict_v1", "types_gzip_plain_v2", "hyparquet_snappy", "types_zstd_dict_v2"}) {
    auto text = traintl::ReadFile(kFixtures + "/" + std::string(name) + ".parquet");
    REQUIRE(text.ok());
    SplitMix rng{std::hash<std::string>{}(std::string(name))};
    for (int i = 0; i < 150; ++i) {
      std::string bytes = *text;
      const int flips = 1 + static_cast<int>(rng.Below(4));
      for (int f = 0; f < flips; ++f) {
        bytes[rng.Below(bytes.size())] = static_cast<char>(rng.Below(256));
      }
      if (i % 10 == 0) bytes.resize(rng.Below(bytes.size()));
      Write(dir / "x.parquet", bytes);
      Status st = OpenAndRead("file://" + (dir / "x.parquet"));
      if (!st.ok()) {
        INFO(st.message());
        CHECK(st.code() == traintl::Status::Code::kInvalidArgument);
      }
    }
  }
}

TEST_CASE("parquet: a local file changed after Open is an error naming it, not a crash") {
  // Local files are read in place (mapped); a size other than the footer's is refused
  // before any page of it is touched, whether the file shrank (even to nothing) or grew.
  TempDir dir;
  auto text = traintl::ReadFile(kFixtures + "/types_zstd_plain_v1.parquet");
  REQUIRE(text.ok());
  for (size_t size : {text->size() / 2, text->size() + 100, size_t{0}}) {
    INFO("changed to " << size << " bytes");
    Write(dir / "x.parquet", *text);
    auto ds = OpenDataset("file://" + (dir / "x.parquet"));
    std::string changed = *text;
    changed.resize(size, '\0');
    Write(dir / "x.parquet", changed);
    Table t = ReadAll(ds);
    REQUIRE(!t.status.ok());
    CHECK_THAT(
        t.status.message(),
        Catch::Contains(dir / "x.parquet: the file has " + std::to_string(size) + " bytes, " +
                        std::to_string(text->size()) + " when the job started"));
  }
  // Rewritten with the same size, it is read in place and decodes what it holds now.
  Write(dir / "x.parquet", *text);
  auto ds = OpenDataset("file://" + (dir / "x.parquet"));
  CHECK(ReadAll(ds).status.ok());
}

TEST_CASE("parquet: files of a dataset must have the same columns") {
  TempDir dir;
  auto a = traintl::ReadFile(kFixtures + "/types_snappy_dict_v1.parquet");
  auto b = traintl::ReadFile(kFixtures + "/null_in_int.parquet");
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  Write(dir / "a.parquet", *a);
  Write(dir / "b.parquet", *b);
  auto ds = TryOpen("file://" + dir.path());
  REQUIRE_FALSE(ds.ok());
  CHECK_THAT(ds.status().message(), Catch::Contains(dir / "b.parquet"));
  // The same file twice: 120 rows.
  Write(dir / "b.parquet", *a);
  CHECK(*OpenDataset("file://" + dir.path())->TotalRows() == 120);
}

TEST_CASE("parquet: the thrift decoder bounds lists and nesting") {
  using namespace traintl::data::parquet;
  // A list of 2^31 structs in 3 bytes.
  const uint8_t huge_list[] = {0x29, 0xfc, 0xff, 0xff, 0xff, 0x07, 0x00};
  auto r = DecodeFileMetaData(huge_list, sizeof huge_list);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("elements in"));
  // Structs nested 1000 deep in an unknown field.
  std::vector<uint8_t> deep(1000, 0x1c);  // field delta 1, type struct
  deep.resize(2000, 0x00);
  r = DecodeFileMetaData(deep.data(), deep.size());
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("deeper than 32"));
  size_t used = 0;
  CHECK_FALSE(DecodePageHeader(nullptr, 0, &used).ok());
}

namespace {

// A compact-protocol i32 field (zigzag varint) after a field header with delta 1.
void I32Field(std::string* out, int32_t v) {
  out->push_back(0x15);
  uint32_t z = (static_cast<uint32_t>(v) << 1) ^ static_cast<uint32_t>(v >> 31);
  while (z >= 0x80) {
    out->push_back(static_cast<char>((z & 0x7f) | 0x80));
    z >>= 7;
  }
  out->push_back(static_cast<char>(z));
}

// A PageHeader: type, sizes, then a dictionary (field 7) or data page (field 5) header.
std::string PageHeaderBytes(int32_t type, int32_t size, int32_t num_values, int32_t encoding) {
  std::string h;
  I32Field(&h, type);
  I32Field(&h, size);
  I32Field(&h, size);
  h.push_back(type == 2 ? 0x4c : 0x2c);  // field 7 (delta 4) or 5 (delta 2), a struct
  I32Field(&h, num_values);
  I32Field(&h, encoding);
  if (type == 0) {
    I32Field(&h, 3);  // definition levels: RLE
    I32Field(&h, 3);  // repetition levels: RLE
  }
  h.push_back(0);  // the inner struct's end
  h.push_back(0);  // the page header's end
  return h;
}

}  // namespace

TEST_CASE("parquet: PLAIN_DICTIONARY pages (the v1 name) with bit-packed and RLE indices") {
  using namespace traintl::data::parquet;
  // Dictionary {10, 20, 30} (int64); a data page of 5 values, indices [2, 0, 1, 1, 2]
  // bit-packed (width 2); a second of 4 values, index 1 as one RLE run.
  std::string dict;
  for (int64_t v : {10, 20, 30}) dict.append(reinterpret_cast<const char*>(&v), 8);
  const std::string page1 = std::string("\x02\x03\x52\x02", 4);
  const std::string page2 = std::string("\x02\x08\x01", 3);
  const std::string chunk = PageHeaderBytes(2, 24, 3, 2) + dict + PageHeaderBytes(0, 4, 5, 2) +
                            page1 + PageHeaderBytes(0, 3, 4, 2) + page2;
  ChunkDesc desc;
  desc.type = static_cast<int32_t>(PhysicalType::kInt64);
  desc.num_values = 9;
  auto decode = [&](int64_t skip, int64_t take, DType dtype) {
    ColumnData out;
    Status st = DecodeColumnChunk(reinterpret_cast<const uint8_t*>(chunk.data()), chunk.size(),
                                  desc, skip, take, dtype, &out);
    INFO(st.message());
    REQUIRE(st.ok());
    return out;
  };
  ColumnData all = decode(0, 9, DType::kInt64);
  REQUIRE(all.values.size() == 9 * 8);
  CHECK(std::vector<int64_t>(all.As<int64_t>(), all.As<int64_t>() + 9) ==
        std::vector<int64_t>{30, 10, 20, 20, 30, 20, 20, 20, 20});
  ColumnData part = decode(3, 4, DType::kFloat32);  // across the two pages, as float32
  CHECK(std::vector<float>(part.As<float>(), part.As<float>() + 4) ==
        std::vector<float>{20, 30, 20, 20});
  // Past the chunk's values: an error, not a read past the bytes.
  ColumnData out;
  Status st = DecodeColumnChunk(reinterpret_cast<const uint8_t*>(chunk.data()), chunk.size(), desc,
                                0, 10, DType::kInt64, &out);
  CHECK_THAT(st.message(), Catch::Contains("the column chunk ends after 9 rows"));
  // An index past the dictionary.
  std::string bad = chunk;
  bad[bad.size() - 1] = 0x07;  // the RLE run's value: 7
  st = DecodeColumnChunk(reinterpret_cast<const uint8_t*>(bad.data()), bad.size(), desc, 0, 9,
                         DType::kInt64, &out);
  CHECK_FALSE(st.ok());
}

TEST_CASE("parquet: NarrowDoubles gives static_cast<float>'s bits for every kind of double") {
  // Specials, float rounding midpoints and their neighbours, overflow to infinity,
  // subnormals of both types, NaNs with payloads (quieted the same way), then random bits.
  std::vector<double> v = {0.0,
                           -0.0,
                           1.0,
                           -1.5,
                           0.1,
                           3.4028235677973366e38,
                           3.4028234663852886e38,
                           -3.5e38,
                           1e300,
                           1.401298464324817e-45,
                           7.006492321624085e-46,
                           7.0064923216240862e-46,
                           1e-320,
                           -1e-310,
                           std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::quiet_NaN(),
                           std::numeric_limits<double>::signaling_NaN()};
  for (uint64_t bits : {0x7ff0000000000001ull, 0xfff8000000000123ull, 0x7ff4000000000000ull}) {
    double d;
    std::memcpy(&d, &bits, sizeof d);
    v.push_back(d);
  }
  for (float f : {1.0f, 16777216.0f, 1e-38f, 3.0e38f}) {
    const double next = std::nextafter(static_cast<double>(f), 1e300);
    const double mid = (static_cast<double>(f) + static_cast<double>(std::nextafter(f, 1e30f))) / 2;
    for (double d : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, 1e300), next}) {
      v.push_back(d);
      v.push_back(-d);
    }
  }
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 20000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t bits = state ^ (state >> 29);
    if (i % 2 == 0) bits = (bits & 0x800fffffffffffffull) | ((0x360ull + (bits >> 55)) << 52);
    double d;
    std::memcpy(&d, &bits, sizeof d);
    v.push_back(d);
  }
  // Every length up to 40 at every byte offset modulo 8 (the page's values need not be
  // aligned), and the whole vector.
  std::vector<uint8_t> bytes(v.size() * sizeof(double) + 8);
  for (size_t offset = 0; offset < 8; ++offset) {
    std::memcpy(bytes.data() + offset, v.data(), v.size() * sizeof(double));
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{15}, size_t{16},
                     size_t{17}, size_t{33}, size_t{40}, v.size()}) {
      for (size_t start = 0; start + n <= v.size() && start < 24; start += 5) {
        std::vector<float> got(n + 1, 42.0f);
        parquet::NarrowDoubles(bytes.data() + offset + start * sizeof(double), n, got.data());
        for (size_t i = 0; i < n; ++i) {
          const float want = static_cast<float>(v[start + i]);
          INFO("offset " << offset << " start " << start << " n " << n << " i " << i);
          REQUIRE(std::memcmp(&got[i], &want, sizeof want) == 0);
        }
        REQUIRE(got[n] == 42.0f);  // nothing written past the n values
        if (n == v.size()) break;
      }
    }
  }
}
