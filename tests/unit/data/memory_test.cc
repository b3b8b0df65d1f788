// Streaming: a file many times the prefetch window is read with bounded memory, and the
// first batch comes without reading the whole shard; the free lists that let the
// pipeline reuse its blocks' memory.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

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
  const std::string path = MakeBigCsv(dir);
  const int64_t size = FileSize(path);
  // In a child, so that nothing else this test binary did counts.
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    DatasetConfig c;
    c.uri = "file://" + path;
    auto ds = Dataset::Open(c, {});
    int64_t growth = -1;
    if (ds.ok()) {
      const int64_t before = PeakRss();
      auto reader = BatchReader::Start(*ds, SmallWindow());
      if (reader.ok()) {
        int64_t rows = 0;
        for (;;) {
          auto b = (*reader)->Next();
          if (!b.ok() || !*b) break;
          rows += (*b)->num_rows;
        }
        if (rows == kRows) growth = PeakRss() - before;
      }
    }
    ssize_t ignored = ::write(fds[1], &growth, sizeof growth);
    (void)ignored;
    ::_exit(0);
  }
  ::close(fds[1]);
  int64_t growth = -1;
  REQUIRE(::read(fds[0], &growth, sizeof growth) == sizeof growth);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
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
  Buffer b;
  b.Resize(1000);  // malloc'ed
  for (size_t i = 0; i < 1000; ++i) b.data()[i] = static_cast<char>(i * 7);
  b.Resize(kHugeBufferBytes + 5);  // copied into a mapping of its own
  CHECK(b.capacity() == 2 * kHugeBufferBytes);
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
  CHECK(b.data()[2 * kHugeBufferBytes - 1] == 'z');
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
