// The store in a scratch file (what the daemon uses): bounded memory, snapshots that
// travel between file and memory stores both ways, a broken image refused.

#include <stdlib.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <new>
#include <string>

#include "daemon/state/state_store.h"

using traintl::JobRecord;
using traintl::StateStore;

namespace {

class ScratchDir {
 public:
  ScratchDir() {
    char tmpl[] = "/tmp/traintl-file-store-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path_ = tmpl;
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void InsertJobs(StateStore& store, int from, int to, size_t spec_bytes) {
  for (int i = from; i < to; ++i) {
    JobRecord j;
    char id[13];
    snprintf(id, sizeof(id), "%012x", i);
    j.id = id;
    j.name = "job" + std::to_string(i);
    j.spec = "{\"pad\": \"" + std::string(spec_bytes, 'x') + "\"}";
    j.state = "STOPPED";
    j.submitted_at = 1000 + i;
    store.Mutate([&](StateStore::Tx& tx) {
      tx.InsertJob(j, "sub" + std::to_string(i));
      return std::string();
    });
  }
}

StateStore::FileOptions InDir(const ScratchDir& dir, int cache_kib = 256) {
  StateStore::FileOptions o;
  o.path = dir.path() + "/state.sqlite3";
  o.cache_kib = cache_kib;
  return o;
}

}  // namespace

TEST_CASE("a file store keeps its pages in the file, not in memory") {
  ScratchDir dir;
  StateStore file_store;
  REQUIRE(file_store.UseFile(InDir(dir)).ok());
  StateStore memory_store;
  // 4000 jobs of 2 KiB specs: about 8 MiB of pages.
  InsertJobs(file_store, 0, 4000, 2048);
  InsertJobs(memory_store, 0, 4000, 2048);
  CHECK(memory_store.CacheUsedBytes() > 8 << 20);
  CHECK(file_store.CacheUsedBytes() <= 300 << 10);  // 256 KiB and a page or two over
  CHECK(std::filesystem::file_size(dir.path() + "/state.sqlite3") > 8 << 20);
  CHECK(file_store.CountJobs() == 4000);
  auto job = file_store.GetJob("000000000fa0");  // 4000
  CHECK(!job);
  job = file_store.GetJob("000000000f9f");
  REQUIRE(job);
  CHECK(job->name == "job3999");
  CHECK(job->spec.size() == 2048 + 11);
}

TEST_CASE("snapshots travel between file and memory stores, both ways") {
  ScratchDir a_dir, b_dir;
  StateStore a;
  REQUIRE(a.UseFile(InDir(a_dir)).ok());
  InsertJobs(a, 0, 300, 100);
  auto image = a.Serialize();
  REQUIRE(image.ok());

  StateStore in_memory;
  REQUIRE(in_memory.Restore(*image).ok());
  CHECK(in_memory.CountJobs() == 300);

  StateStore b;
  REQUIRE(b.UseFile(InDir(b_dir)).ok());
  InsertJobs(b, 1000, 1010, 10);  // replaced by the restore
  REQUIRE(b.Restore(*in_memory.Serialize()).ok());
  CHECK(b.CountJobs() == 300);
  CHECK(!b.GetJob("0000000003e8"));
  // It stays a file store, and writable after the restore.
  InsertJobs(b, 300, 4300, 1024);
  CHECK(b.CountJobs() == 4300);
  CHECK(b.CacheUsedBytes() <= 300 << 10);
  CHECK(std::filesystem::exists(b_dir.path() + "/state.sqlite3"));
  CHECK(!std::filesystem::exists(b_dir.path() + "/state.sqlite3.restoring"));
}

TEST_CASE("a file store refuses a broken image and keeps what it had, usable") {
  ScratchDir dir;
  StateStore store;
  REQUIRE(store.UseFile(InDir(dir)).ok());
  InsertJobs(store, 0, 10, 10);
  auto st = store.Restore(std::string(8192, 'z'));
  CHECK(!st.ok());
  CHECK_THAT(st.message(), Catch::Contains("cannot restore snapshot"));
  // Raft keeps its applied index when a snapshot is refused: the state must match it.
  CHECK(store.CountJobs() == 10);
  CHECK(!std::filesystem::exists(dir.path() + "/state.sqlite3.restoring"));
  InsertJobs(store, 10, 15, 10);
  CHECK(store.CountJobs() == 15);
}

TEST_CASE("UseFile replaces what a file held: the store starts empty") {
  ScratchDir dir;
  {
    std::ofstream stale(dir.path() + "/state.sqlite3");
    stale << "left over from a daemon that was killed";
  }
  StateStore store;
  REQUIRE(store.UseFile(InDir(dir)).ok());
  CHECK(store.CountJobs() == 0);
  InsertJobs(store, 0, 3, 10);
  CHECK(store.CountJobs() == 3);
  StateStore::FileOptions bad;
  bad.path = dir.path() + "/missing-dir/state.sqlite3";
  StateStore other;
  auto st = other.UseFile(bad);
  CHECK(!st.ok());
  CHECK_THAT(st.message(), Catch::Contains("missing-dir"));
  InsertJobs(other, 0, 2, 10);  // still usable, in memory
  CHECK(other.CountJobs() == 2);
}

TEST_CASE("a write that throws leaves nothing of its transaction, and the store usable") {
  ScratchDir dir;
  StateStore store;
  REQUIRE(store.UseFile(InDir(dir)).ok());
  InsertJobs(store, 0, 1, 10);
  JobRecord j;
  j.id = "0000000000ff";
  j.name = "half";
  j.spec = "{}";
  j.state = "PENDING";
  CHECK_THROWS_AS(store.Mutate([&](StateStore::Tx& tx) -> std::string {
    tx.InsertJob(j, "sub-half");
    throw std::bad_alloc();
  }),
                  std::bad_alloc);
  CHECK_FALSE(store.GetJob(j.id).has_value());  // rolled back
  InsertJobs(store, 1, 2, 10);                  // a new transaction begins
  CHECK(store.ListJobs().size() == 2);
}
