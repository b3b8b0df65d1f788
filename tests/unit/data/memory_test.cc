// Streaming: a file many times the prefetch window is read with bounded memory, and the
// first batch comes without reading the whole shard; the free lists that let the
// pipeline reuse its blocks' memory.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <fstream>
#include <string>
#include <vector>

#include "data_test_util.h"
#include "worker/data/free_list.h"

using namespace traintl::data;
using namespace traintl::data::testing;

namespace {

constexpr int64_t kRows = 400000;  // 8 columns: about 30 MB of CSV

std::string MakeBigCsv(const TempDir& dir) {
  const std::string path = dir / "big.csv";
  std::ofstream out(path);
  out << "id,a,b,c,d,e,f,g\n";
  char line[256];
  for (int64_t i = 0; i < kRows; ++i) {
    const double v = static_cast<double>(i % 1000) / 7.0;
    std::snprintf(line, sizeof line, "%lld,%.5f,%.5f,%.5f,%.5f,%.5f,%.5f,%.5f\n",
                  static_cast<long long>(i), v, v + 1, v + 2, v + 3, v + 4, v + 5, v + 6);
    out << line;
  }
  REQUIRE(out.good());
  return path;
}

// The same rows as JSON Lines.
std::string MakeBigJsonl(const TempDir& dir) {
  const std::string path = dir / "big.jsonl";
  std::ofstream out(path);
  char line[256];
  for (int64_t i = 0; i < kRows; ++i) {
    const double v = static_cast<double>(i % 1000) / 7.0;
    std::snprintf(line, sizeof line,
                  "{\"id\":%lld,\"a\":%.5f,\"b\":%.5f,\"c\":%.5f,\"d\":%.5f,\"e\":%.5f,"
                  "\"f\":%.5f,\"g\":%.5f}\n",
                  static_cast<long long>(i), v, v + 1, v + 2, v + 3, v + 4, v + 5, v + 6);
    out << line;
  }
  REQUIRE(out.good());
  return path;
}

int64_t FileSize(const std::string& path) {
  std::ifstream in(path, std::ios::ate | std::ios::binary);
  return static_cast<int64_t>(in.tellg());
}

// The peak resident set of this process so far (VmHWM), in bytes.
int64_t PeakRss() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "VmHWM:") {
      int64_t kb = 0;
      in >> kb;
      return kb * 1024;
    }
    std::string rest;
    std::getline(in, rest);
  }
  return -1;
}

IterOptions SmallWindow() {
  IterOptions o;
  o.batch_size = 1024;  // 1024 rows x 8 columns x 8 bytes = 64 KiB per batch
  o.prefetch_batches = 2;
  o.block_bytes = 128 << 10;
  o.num_threads = 2;
  return o;
}

// What the pipeline may hold with SmallWindow(): in-flight blocks (raw, or parsed into at
// most twice their size here), queued batches and the one being filled, with 2x slack.
int64_t WindowBound(const IterOptions& o) {
  const int64_t blocks = (o.num_threads + 2) * 3 * static_cast<int64_t>(o.block_bytes);
  const int64_t batches = (o.prefetch_batches + 2) * o.batch_size * 8 * 8;
  return 2 * (blocks + batches);
}

}  // namespace

TEST_CASE("memory stays bounded on a file many times the prefetch window") {
  TempDir dir;
  const std::string path = MakeBigCsv(dir);
  const int64_t size = FileSize(path);
  const IterOptions o = SmallWindow();
  const int64_t bound = WindowBound(o);
  INFO("file " << size << " bytes, window bound " << bound);
  REQUIRE(size > 5 * bound);  // the point of the test

  for (int world : {1, 2}) {
    INFO("world " << world);
    auto ds = OpenDataset("file://" + path, 0, world);
    auto reader = BatchReader::Start(ds, o);
    REQUIRE(reader.ok());
    // The first batch arrives long before the shard is read: the reader stops at the window.
    auto first = (*reader)->Next();
    REQUIRE(first.ok());
    REQUIRE(*first);
    CHECK((*reader)->stats().bytes_read <= bound);
    int64_t rows = (*first)->num_rows;
    for (;;) {
      auto b = (*reader)->Next();
      REQUIRE(b.ok());
      if (!*b) break;
      rows += (*b)->num_rows;
    }
    CHECK(rows == (world == 1 ? kRows : kRows / 2));
    const IterStats s = (*reader)->stats();
    CHECK(s.peak_buffered_bytes > 0);
    CHECK(s.peak_buffered_bytes <= bound);
    CHECK(s.buffered_bytes == 0);  // everything handed out or freed
  }
}

// AddressSanitizer keeps freed blocks resident in its quarantine, so resident memory says
// nothing about the reader there; the test above still checks the pipeline's accounting.
#if defined(__SANITIZE_ADDRESS__)
#define TRAINTL_RSS_MEANINGFUL 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TRAINTL_RSS_MEANINGFUL 0
#endif
#endif
#ifndef TRAINTL_RSS_MEANINGFUL
#define TRAINTL_RSS_MEANINGFUL 1
#endif

TEST_CASE("the resident memory of a reading process stays bounded") {
  if (!TRAINTL_RSS_MEANINGFUL) {
    WARN("skipped under AddressSanitizer");
    return;
  }
  TempDir dir;
  // Read in place, a shuffled epoch has a segment per index chunk, each with a read-ahead
  // past its last record (JSON Lines reads on to the end of a block): those pages must
  // leave the process too.
  const bool shuffled = GENERATE(false, true);
  const bool jsonl = GENERATE(false, true);
  INFO("shuffled " << shuffled << " jsonl " << jsonl);
  const std::string path = jsonl ? MakeBigJsonl(dir) : MakeBigCsv(dir);
  const int64_t size = FileSize(path);
  // In a child, so that nothing else this test binary did counts.
  const int64_t growth = testing::InChild(1, [&]() -> std::vector<int64_t> {
    DatasetConfig c;
    c.uri = "file://" + path;
    ShardOptions so;
    so.chunk_bytes = 256 << 10;  // many segments
    auto ds = Dataset::Open(c, so);
    if (!ds.ok()) return {};
    const int64_t before = PeakRss();
    IterOptions o = SmallWindow();
    o.shuffle = shuffled;
    auto reader = BatchReader::Start(*ds, o);
    if (!reader.ok()) return {};
    int64_t rows = 0;
    for (;;) {
      auto b = (*reader)->Next();
      if (!b.ok() || !*b) break;
      rows += (*b)->num_rows;
    }
    if (rows != kRows) return {};
    return {PeakRss() - before};
  })[0];
  INFO("peak RSS growth " << growth << " bytes reading a " << size << " byte file");
  REQUIRE(growth >= 0);
  CHECK(growth < size / 4);
}

TEST_CASE("FreeList: gives back the memory it was given, keeps at most max_idle") {
  FreeList<Buffer> list(2);
  Buffer fresh = list.Take();
  CHECK(fresh.capacity() == 0);
  fresh.Resize(1000);
  const char* memory = fresh.data();
  list.Give(std::move(fresh));
  Buffer again = list.Take();
  CHECK(again.data() == memory);
  CHECK(again.capacity() >= 1000);
  CHECK(list.Take().capacity() == 0);  // none idle: a new one

  for (int i = 0; i < 3; ++i) {
    Buffer b;
    b.Resize(10);
    list.Give(std::move(b));  // the third is dropped
  }
  CHECK(list.Take().capacity() == 10);
  CHECK(list.Take().capacity() == 10);
  CHECK(list.Take().capacity() == 0);
}

TEST_CASE("Buffer: capacities from 2 MiB up are 2 MiB-aligned mappings that keep their bytes") {
  // Rounded up to whole 4 KiB pages (not huge pages: see columns.h).
  Buffer b;
  b.Resize(1000);  // malloc'ed
  for (size_t i = 0; i < 1000; ++i) b.data()[i] = static_cast<char>(i * 7);
  b.Resize(kHugeBufferBytes + 5);  // copied into a mapping of its own
  CHECK(b.capacity() == kHugeBufferBytes + 4096);
  CHECK(reinterpret_cast<uintptr_t>(b.data()) % kHugeBufferBytes == 0);
  for (size_t i = 0; i < 1000; ++i) REQUIRE(b.data()[i] == static_cast<char>(i * 7));
  for (size_t i = 1000; i < b.size(); i += 4093) b.data()[i] = static_cast<char>(i);
  b.data()[b.capacity() - 1] = 'z';  // all of the capacity is writable
  b.Resize(7 * kHugeBufferBytes);    // grown by mremap
  CHECK(b.capacity() == 7 * kHugeBufferBytes);
  for (size_t i = 0; i < 1000; ++i) REQUIRE(b.data()[i] == static_cast<char>(i * 7));
  for (size_t i = 1000; i < kHugeBufferBytes + 5; i += 4093) {
    REQUIRE(b.data()[i] == static_cast<char>(i));
  }
  CHECK(b.data()[kHugeBufferBytes + 4095] == 'z');
  b.data()[b.capacity() - 1] = 'y';
  b.Resize(10);  // shrinking keeps the capacity
  CHECK(b.capacity() == 7 * kHugeBufferBytes);

  // Moves hand the mapping over; assignment and destruction unmap it.
  const char* memory = b.data();
  Buffer c(std::move(b));
  CHECK(c.data() == memory);
  CHECK(b.capacity() == 0);
  Buffer d;
  d.Resize(3 * kHugeBufferBytes);
  d = std::move(c);
  CHECK(d.data() == memory);
  CHECK(d.data()[0] == 0);
  Buffer e;
  e.Reserve(kHugeBufferBytes);  // exactly 2 MiB: one huge page's worth
  CHECK(e.capacity() == kHugeBufferBytes);
  e.Reserve(kHugeBufferBytes - 1);  // nothing to do
  CHECK(e.capacity() == kHugeBufferBytes);
  d = std::move(e);
  CHECK(d.capacity() == kHugeBufferBytes);
}

TEST_CASE("Buffer: a borrowed buffer uses the lender's memory until it must grow") {
  std::vector<char> storage(100, 'a');
  Buffer b;
  b.Resize(50);  // its own memory, freed by Borrow
  b.Borrow(storage.data(), storage.size());
  CHECK(b.borrowed());
  CHECK(b.size() == 0);
  CHECK(b.capacity() == 100);
  b.Append("xyz", 3);
  CHECK(storage[0] == 'x');
  b.Resize(100);  // within the loan
  CHECK(b.data() == storage.data());
  b.Resize(101);  // moves to memory of its own, with every borrowed byte
  CHECK(!b.borrowed());
  CHECK(b.data() != storage.data());
  CHECK(std::string(b.data(), 5) == "xyzaa");
  CHECK(b.data()[99] == 'a');
  // Moving a borrowed buffer moves the loan; destroying it frees nothing of the lender's.
  Buffer c;
  c.Borrow(storage.data() + 10, 20);
  Buffer d(std::move(c));
  CHECK(d.borrowed());
  CHECK(!c.borrowed());
  CHECK(d.data() == storage.data() + 10);
  Buffer e;
  e.Resize(kHugeBufferBytes);
  e = std::move(d);  // e's own mapping is unmapped, the loan taken over
  CHECK(e.borrowed());
}

TEST_CASE("RowBlock: numeric columns of 2 MiB and more share one arena, strings do not") {
  Schema schema = {{"a", DType::kFloat32, {}}, {"s", DType::kString, {}}, {"b", DType::kInt64, {}}};
  RowBlock block;
  block.Reset(schema, 1000);  // 12 KB: every column on its own
  CHECK(!block.columns[0].values.borrowed());
  CHECK(block.arena.capacity() == 0);
  const int64_t rows = 200000;  // 0.8 MB + 1.6 MB
  block.Reset(schema, rows);
  REQUIRE(block.columns[0].values.borrowed());
  REQUIRE(block.columns[2].values.borrowed());
  CHECK(!block.columns[1].values.borrowed());
  const char* arena = block.arena.data();
  CHECK(block.columns[0].values.data() == arena);
  CHECK(block.columns[2].values.data() == arena + 800000);  // a multiple of 64
  CHECK(block.columns[0].values.capacity() == 800000);
  CHECK(block.ByteSize() == block.arena.capacity() + block.columns[1].offsets.capacity() +
                                block.columns[1].values.capacity());
  for (int64_t r = 0; r < rows; ++r) {
    block.columns[0].As<float>()[r] = static_cast<float>(r);
    block.columns[2].As<int64_t>()[r] = -r;
  }
  // Moved as a whole (as the free lists and queues do), the columns still point into it.
  RowBlock moved = std::move(block);
  CHECK(moved.columns[0].values.data() == arena);
  CHECK(moved.columns[2].As<int64_t>()[rows - 1] == -(rows - 1));
  // A column that outgrows its share leaves the arena with its values.
  moved.columns[0].values.Resize(800000);
  moved.columns[0].values.Resize(800004);
  CHECK(!moved.columns[0].values.borrowed());
  CHECK(moved.columns[0].As<float>()[rows - 1] == static_cast<float>(rows - 1));
  // Reset again: back into the arena, which is reused, not grown.
  moved.Reset(schema, rows);
  CHECK(moved.arena.data() == arena);
  CHECK(moved.columns[0].values.data() == arena);
  RowBlock copy_target;
  Schema one = {{"a", DType::kFloat32, {}}};
  copy_target.Reset(one, rows);
  moved.num_rows = rows;
  AppendRows(one, moved, 0, rows, &copy_target);  // reads through the loan
  CHECK(copy_target.columns[0].As<float>()[7] == 7.0f);
}

TEST_CASE("RowBlock: a slice borrows its lender's rows and keeps it alive until Reset") {
  Schema schema = {{"a", DType::kInt64, {}}, {"v", DType::kFloat32, {2}}};
  auto block = std::make_shared<RowBlock>();
  block->Reset(schema, 10);
  for (int64_t r = 0; r < 10; ++r) {
    block->columns[0].values.Append(&r, sizeof r);
    const float v[2] = {static_cast<float>(r), -static_cast<float>(r)};
    block->columns[1].values.Append(v, sizeof v);
  }
  block->num_rows = 10;
  std::weak_ptr<RowBlock> watch = block;
  RowBlock slice;
  slice.Reset(schema, 4);  // own memory first: Borrow frees it
  SliceRows(schema, std::shared_ptr<const RowBlock>(block), 3, 7, &slice);
  block.reset();
  REQUIRE(!watch.expired());  // the slice holds it
  CHECK(slice.num_rows == 4);
  CHECK(slice.columns[0].As<int64_t>()[0] == 3);
  CHECK(slice.columns[0].values.size() == 4 * sizeof(int64_t));
  CHECK(slice.columns[1].As<float>()[7] == -6.0f);
  CHECK(slice.ByteSize() == 0);  // the memory is the lender's
  slice.Reset(schema, 4);
  CHECK(watch.expired());
  CHECK(!slice.columns[0].values.borrowed());
  CHECK(slice.columns[0].values.capacity() >= 4 * sizeof(int64_t));
  const int64_t x = 42;
  slice.columns[0].values.Append(&x, sizeof x);  // its own memory again
  CHECK(slice.columns[0].As<int64_t>()[0] == 42);
}

TEST_CASE("batches whole inside a parsed block are slices that outlive the reader") {
  TempDir dir;
  const int64_t rows = 20000;
  std::string text = "id,x\n";
  for (int64_t i = 0; i < rows; ++i) text += std::to_string(i) + "," + std::to_string(i) + ".5\n";
  Write(dir / "n.csv", text);
  std::string with_names = "id,x,name\n";
  for (int64_t i = 0; i < rows; ++i) {
    with_names += std::to_string(i) + "," + std::to_string(i) + ".5,row" + std::to_string(i) + "\n";
  }
  Write(dir / "s.csv", with_names);
  auto read = [&](const std::string& file, bool shuffle, int64_t* slices,
                  int64_t batch_size = 250) {
    IterOptions o;
    o.batch_size = batch_size;
    o.block_bytes = 64 << 10;  // ~5,000 rows a block: most batches lie inside one
    o.shuffle = shuffle;
    auto ds = OpenDataset("file://" + (dir / file));
    auto reader = BatchReader::Start(ds, o);
    REQUIRE(reader.ok());
    std::vector<std::unique_ptr<RowBlock>> kept;
    for (;;) {
      auto b = (*reader)->Next();
      REQUIRE(b.ok());
      if (!*b) break;
      kept.push_back(std::move(*b));
    }
    CHECK((*reader)->stats().buffered_bytes == 0);
    reader->reset();  // the reader and its threads are gone; the batches stay valid
    *slices = 0;
    std::vector<int64_t> ids;
    for (const auto& b : kept) {
      if (b->lender) ++*slices;
      for (int64_t r = 0; r < b->num_rows; ++r) {
        ids.push_back(b->columns[0].As<int64_t>()[r]);
        if (!shuffle)
          REQUIRE(b->columns[1].As<double>()[r] == static_cast<double>(ids.back()) + 0.5);
      }
    }
    if (shuffle) std::sort(ids.begin(), ids.end());
    REQUIRE(ids.size() == static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) REQUIRE(ids[static_cast<size_t>(i)] == i);
  };
  int64_t slices = 0;
  read("n.csv", false, &slices);
  CHECK(slices > 60);  // of 80 batches: all but those across a block's end
  CHECK(slices < 80);
  read("n.csv", false, &slices, 100);
  CHECK(slices == 0);  // blocks of more than kMaxSlicedBlockBatches batches are copied
  read("n.csv", true, &slices);
  CHECK(slices == 0);  // shuffled rows are copied
  read("s.csv", false, &slices);
  CHECK(slices == 0);  // strings are copied, and with them the whole batch
}

TEST_CASE("slices of arena blocks stay intact while later blocks reuse the freed ones") {
  // A .npy of 1.5M rows [id, id + 0.5] (float64), read in 4 MiB blocks (262,144 rows, whose
  // decoded rows are one arena) as batches of 16,384 rows (16 per block): every batch is a
  // slice. The consumer keeps a window of the last 6 batches and checks each when it
  // leaves the window, after the pipeline has gone on (and blocks whose slices were all
  // dropped came back to the parsers), so a block reused while a slice of it lives shows
  // as wrong values. Every other batch goes back through GiveBack, the others are
  // destroyed.
  TempDir dir;
  const int64_t rows = 1500000;
  std::string data(static_cast<size_t>(rows) * 16, '\0');
  for (int64_t i = 0; i < rows; ++i) {
    const double v[2] = {static_cast<double>(i), static_cast<double>(i) + 0.5};
    std::memcpy(&data[static_cast<size_t>(i) * 16], v, sizeof v);
  }
  std::string dict =
      "{'descr': '<f8', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", 2), }";
  while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::string npy = std::string("\x93NUMPY\x01\x00", 8);
  npy += static_cast<char>(dict.size() & 0xff);
  npy += static_cast<char>(dict.size() >> 8);
  Write(dir / "big.npy", npy + dict + data);
  IterOptions o;
  o.batch_size = 16384;
  o.block_bytes = 4 << 20;
  o.num_threads = 2;
  auto ds = OpenDataset("file://" + (dir / "big.npy"));
  auto reader = BatchReader::Start(ds, o);
  REQUIRE(reader.ok());
  const auto pool = (*reader)->batch_pool();  // usable after the reader is gone
  std::deque<std::unique_ptr<RowBlock>> window;
  int64_t next_id = 0, slices = 0, arena_slices = 0, seen = 0;
  auto check = [&](std::unique_ptr<RowBlock> b) {
    const double* v = b->columns[0].As<double>();
    for (int64_t r = 0; r < b->num_rows; ++r, ++next_id) {
      REQUIRE(v[2 * r] == static_cast<double>(next_id));
      REQUIRE(v[2 * r + 1] == static_cast<double>(next_id) + 0.5);
    }
    if (++seen % 2 == 0) BatchReader::GiveBack(pool.get(), std::move(*b));
  };
  for (;;) {
    auto b = (*reader)->Next();
    REQUIRE(b.ok());
    if (!*b) break;
    if ((*b)->lender) {
      ++slices;
      if ((*b)->lender->arena.capacity() > 0) ++arena_slices;
    }
    window.push_back(std::move(*b));
    if (window.size() > 6) {
      check(std::move(window.front()));
      window.pop_front();
    }
  }
  CHECK((*reader)->stats().buffered_bytes == 0);
  CHECK((*reader)->stats().peak_buffered_bytes > 4 << 20);  // queued slices count their block
  reader->reset();
  while (!window.empty()) {
    check(std::move(window.front()));
    window.pop_front();
  }
  CHECK(next_id == rows);
  const int64_t batches = (rows + o.batch_size - 1) / o.batch_size;
  CHECK(slices > batches * 3 / 4);
  CHECK(arena_slices == slices);
}
