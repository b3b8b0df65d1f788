// The shared row index (worker/data/index_cache.h): the ranks of a split dataset on one
// node scan each file once between them; a changed file, a corrupt or truncated entry and
// an unusable directory fall back to scanning; concurrent builders are safe.
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <set>
#include <thread>
#include <vector>

#include "common/file_util.h"
#include "tests/unit/data/data_test_util.h"
#include "worker/data/dataset_service.h"
#include "worker/data/index_cache.h"

namespace traintl {
namespace data {
namespace {

using testing::Epoch;
using testing::OpenDataset;
using testing::ReadEpoch;
using testing::TempDir;
using testing::Write;
using testing::WriteAwkwardCsv;
using testing::WriteIdCsv;

ShardOptions Shared(const std::string& dir, size_t chunk_bytes = 256) {
  ShardOptions o;
  o.index_dir = dir;
  o.chunk_bytes = chunk_bytes;  // many chunks per file
  return o;
}

std::vector<Chunk> IndexOf(const std::shared_ptr<Dataset>& ds) {
  auto index = ds->Index(nullptr);
  INFO(index.status().message());
  REQUIRE(index.ok());
  return **index;
}

bool SameChunks(const std::vector<Chunk>& a, const std::vector<Chunk>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].file != b[i].file || a[i].offset != b[i].offset || a[i].line != b[i].line ||
        a[i].rows != b[i].rows) {
      return false;
    }
  }
  return true;
}

std::vector<std::string> EntryFiles(const std::string& dir) {
  std::vector<std::string> out;
  auto files = ListFilesRecursive(dir);
  if (!files.ok()) return out;
  for (const auto& f : *files) {
    if (f.size() > 4 && f.substr(f.size() - 4) == ".idx") out.push_back(dir + "/" + f);
  }
  return out;
}

std::vector<int64_t> ReadIds(const std::shared_ptr<Dataset>& ds, bool shuffle = false) {
  IterOptions o;
  o.batch_size = 7;
  o.block_bytes = 1024;
  o.shuffle = shuffle;
  o.seed = 5;
  Epoch e = ReadEpoch(ds, o);
  INFO(e.status.message());
  REQUIRE(e.status.ok());
  return e.ids;
}

// The tests read files they have just written: let entries of those be stored.
struct NoRacyWindow {
  NoRacyWindow() { index_cache_internal::SetRacyWindowNanosForTesting(0); }
  ~NoRacyWindow() { index_cache_internal::SetRacyWindowNanosForTesting(2'000'000'000); }
};

// The shard_info of dataset "train" opened through a DatasetService with `context`.
std::string ShardInfo(const nlohmann::json& context) {
  DatasetService service(context);
  const traintl_dataset_api* api = service.api();
  char err[1024] = {};
  traintl_dataset_shard* shard = nullptr;
  REQUIRE(api->shard_open(api->ctx, "train", nullptr, &shard, err, sizeof err) == TRAINTL_DATA_OK);
  std::string info = api->shard_info(api->ctx, shard);
  api->shard_close(api->ctx, shard);
  return info;
}

// Sets how many entries a directory keeps, for one test.
struct MaxEntries {
  explicit MaxEntries(size_t n) { index_cache_internal::SetMaxEntriesForTesting(n); }
  ~MaxEntries() {
    index_cache_internal::SetMaxEntriesForTesting(index_cache_internal::kDefaultMaxEntries);
  }
};

// Returns once a file written now gets a later change time than `path` has: a change made
// after that is seen (the file system's clock ticks in jiffies, not nanoseconds).
void WaitForTimestampTick(const std::string& path) {
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  const std::string probe = path + ".probe";
  for (;;) {
    Write(probe, "x");
    struct stat p;
    REQUIRE(::stat(probe.c_str(), &p) == 0);
    if (p.st_ctim.tv_sec != st.st_ctim.tv_sec || p.st_ctim.tv_nsec != st.st_ctim.tv_nsec) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::unlink(probe.c_str());
}

}  // namespace

TEST_CASE("Shared index: the second rank of a node loads the first's index, scans nothing") {
  NoRacyWindow no_racy_window;
  TempDir dir;
  WriteAwkwardCsv(dir / "a.csv", 1000);
  WriteIdCsv(dir / "b.csv", 1000, 333);
  const std::string uri = "file://" + dir.path() + "/*.csv";
  const std::string cache = dir / "cache/.data_index";

  // What every rank computes without sharing.
  auto plain0 = OpenDataset(uri, 0, 2, true, Shared(""));
  auto plain1 = OpenDataset(uri, 1, 2, true, Shared(""));
  CHECK(plain0->index_stats().files_scanned == 2);
  CHECK(plain0->index_stats().files_loaded == 0);

  auto rank0 = OpenDataset(uri, 0, 2, true, Shared(cache));
  CHECK(rank0->index_stats().files_scanned == 2);
  CHECK(rank0->index_stats().files_stored == 2);
  CHECK(rank0->index_stats().files_loaded == 0);
  CHECK(EntryFiles(cache).size() == 2);

  auto rank1 = OpenDataset(uri, 1, 2, true, Shared(cache));
  CHECK(rank1->index_stats().files_scanned == 0);
  CHECK(rank1->index_stats().files_loaded == 2);
  CHECK(rank1->index_stats().entries_rejected == 0);

  CHECK(SameChunks(IndexOf(rank0), IndexOf(plain0)));
  CHECK(SameChunks(IndexOf(rank1), IndexOf(plain1)));
  CHECK(rank1->TotalRows() == std::optional<int64_t>(1333));
  // The same rows per rank, plain and shuffled, as without sharing.
  CHECK(ReadIds(rank0) == ReadIds(plain0));
  CHECK(ReadIds(rank1) == ReadIds(plain1));
  CHECK(ReadIds(rank1, true) == ReadIds(plain1, true));
  const auto ids0 = ReadIds(rank0), ids1 = ReadIds(rank1);
  CHECK(ids0.size() == ids1.size());
  std::set<int64_t> all(ids0.begin(), ids0.end());
  all.insert(ids1.begin(), ids1.end());
  CHECK(all.size() == 1333);

  SECTION("another chunk size or another header (column_names) is another entry") {
    auto other = OpenDataset(uri, 1, 2, true, Shared(cache, 512));
    CHECK(other->index_stats().files_scanned == 2);
    ShardOptions named = Shared(cache);
    named.column_names = {"id", "x", "name"};       // the header line is then a data row... of
    named.column_types = {{"id", DType::kString}};  // strings: its offset differs
    auto renamed = OpenDataset(uri, 1, 2, true, named);
    CHECK(renamed->index_stats().files_scanned == 2);
    CHECK(renamed->TotalRows() == std::optional<int64_t>(1335));
  }
}

TEST_CASE("Shared index: a changed file is scanned again, never read with a stale index") {
  NoRacyWindow no_racy_window;
  TempDir dir;
  const std::string cache = dir / "idx";
  WriteIdCsv(dir / "a.csv", 0, 500);
  const std::string uri = "file://" + dir.path() + "/a.csv";
  auto first = OpenDataset(uri, 0, 2, true, Shared(cache));
  CHECK(first->index_stats().files_stored == 1);

  WaitForTimestampTick(dir / "a.csv");
  // The same size, other rows: every '1' of the ids a '2' (and blank lines among them).
  auto text = ReadFile(dir / "a.csv");
  REQUIRE(text.ok());
  std::string changed = *text;
  std::replace(changed.begin(), changed.end(), '1', '2');
  for (size_t at = changed.find("\n2"); at < changed.size() / 2;
       at = changed.find("\n2", at + 200)) {
    changed[at + 1] = '\n';  // a blank line for the digit: other lines, same size
  }
  SECTION("rewritten in place, same size") { Write(dir / "a.csv", changed); }
  SECTION("same size, mtime set back after the change") {
    struct stat before;
    REQUIRE(::stat((dir / "a.csv").c_str(), &before) == 0);
    Write(dir / "a.csv", changed);
    const struct timespec times[2] = {before.st_atim, before.st_mtim};
    REQUIRE(::utimensat(AT_FDCWD, (dir / "a.csv").c_str(), times, 0) == 0);
  }
  SECTION("replaced by rename") {
    Write(dir / "a.csv.new", changed);
    REQUIRE(::rename((dir / "a.csv.new").c_str(), (dir / "a.csv").c_str()) == 0);
  }
  SECTION("appended to") { WriteIdCsv(dir / "a.csv", 0, 800); }
  auto again = OpenDataset(uri, 1, 2, true, Shared(cache));
  CHECK(again->index_stats().files_loaded == 0);
  CHECK(again->index_stats().files_scanned == 1);
  auto plain = OpenDataset(uri, 1, 2, true, Shared(""));
  CHECK(SameChunks(IndexOf(again), IndexOf(plain)));
}

TEST_CASE("Shared index: a corrupt or truncated entry is ignored and rebuilt") {
  NoRacyWindow no_racy_window;
  TempDir dir;
  const std::string cache = dir / "idx";
  WriteIdCsv(dir / "a.csv", 0, 2000);
  const std::string uri = "file://" + dir.path() + "/a.csv";
  auto first = OpenDataset(uri, 0, 2, true, Shared(cache));
  const auto entries = EntryFiles(cache);
  REQUIRE(entries.size() == 1);
  auto good = ReadFile(entries[0]);
  REQUIRE(good.ok());
  REQUIRE(good->size() > 64);

  std::string bad;
  SECTION("truncated") { bad = good->substr(0, good->size() - 30); }
  SECTION("empty") { bad = ""; }
  SECTION("a flipped byte in the chunks") {
    bad = *good;
    bad[bad.size() - 20] ^= 0x40;
  }
  SECTION("garbage") { bad = std::string(good->size(), 'x'); }
  Write(entries[0], bad);

  auto second = OpenDataset(uri, 1, 2, true, Shared(cache));
  CHECK(second->index_stats().files_scanned == 1);
  CHECK(second->index_stats().files_stored == 1);
  CHECK(second->index_stats().entries_rejected == 1);
  auto plain = OpenDataset(uri, 1, 2, true, Shared(""));
  CHECK(SameChunks(IndexOf(second), IndexOf(plain)));
  // Rebuilt: the next rank loads it.
  auto third = OpenDataset(uri, 0, 2, true, Shared(cache));
  CHECK(third->index_stats().files_loaded == 1);
  CHECK(third->index_stats().files_scanned == 0);
}

TEST_CASE("Shared index: entries are checked (unit)") {
  using index_cache_internal::DecodeEntry;
  using index_cache_internal::EncodeEntry;
  const std::vector<Chunk> chunks = {{0, 10, 2, 5}, {0, 300, 9, 7}, {0, 700, 20, 1}};
  const std::string e = EncodeEntry("key", chunks);
  std::vector<Chunk> out;
  REQUIRE(DecodeEntry(e, "key", 3, 10, 1000, &out));
  REQUIRE(out.size() == 3);
  CHECK(out[1].offset == 300);
  CHECK(out[1].line == 9);
  CHECK(out[1].rows == 7);
  CHECK(out[2].file == 3);
  CHECK_FALSE(DecodeEntry(e, "other key", 0, 10, 1000, &out));
  CHECK_FALSE(DecodeEntry(e, "key", 0, 10, 700, &out));   // a chunk beyond the file's end
  CHECK_FALSE(DecodeEntry(e, "key", 0, 11, 1000, &out));  // before the data starts
  for (size_t n = 0; n < e.size(); ++n)
    CHECK_FALSE(DecodeEntry(e.substr(0, n), "key", 0, 10, 0, &out));
  CHECK_FALSE(DecodeEntry(e + "x", "key", 0, 10, 0, &out));
  // Out of order, or without rows, even with a right checksum.
  CHECK_FALSE(
      DecodeEntry(EncodeEntry("key", {{0, 300, 9, 7}, {0, 10, 2, 5}}), "key", 0, 10, 0, &out));
  CHECK_FALSE(DecodeEntry(EncodeEntry("key", {{0, 10, 2, 0}}), "key", 0, 10, 0, &out));
  CHECK(DecodeEntry(EncodeEntry("key", {}), "key", 0, 10, 0, &out));
  CHECK(out.empty());
}

TEST_CASE("Shared index: ranks building at once scan each file once between them") {
  NoRacyWindow no_racy_window;
  TempDir dir;
  const std::string cache = dir / "idx";
  for (int f = 0; f < 6; ++f) {
    WriteAwkwardCsv(dir / ("part-" + std::to_string(f) + ".csv"), 300 + 97 * f);
  }
  const std::string uri = "file://" + dir.path() + "/part-*.csv";
  const int world = 4;
  std::vector<std::vector<Chunk>> plain;
  for (int r = 0; r < world; ++r)
    plain.push_back(IndexOf(OpenDataset(uri, r, world, true, Shared(""))));

  for (int round = 0; round < 3; ++round) {
    INFO("round " << round);
    const std::string round_cache = cache + std::to_string(round);
    std::vector<std::shared_ptr<Dataset>> ds(world);
    std::vector<Status> status(world);
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        ++ready;
        while (ready.load() < world) {
        }
        DatasetConfig c;
        c.name = "test";
        c.uri = uri;
        c.rank = r;
        c.world_size = world;
        auto opened = Dataset::Open(c, Shared(round_cache));
        status[r] = opened.status();
        if (opened.ok()) ds[r] = *opened;
      });
    }
    for (auto& t : threads) t.join();
    int64_t scanned = 0, loaded = 0;
    for (int r = 0; r < world; ++r) {
      INFO(status[r].message());
      REQUIRE(status[r].ok());
      scanned += ds[r]->index_stats().files_scanned;
      loaded += ds[r]->index_stats().files_loaded;
      CHECK(ds[r]->index_stats().entries_rejected == 0);
      CHECK(SameChunks(IndexOf(ds[r]), plain[static_cast<size_t>(r)]));
    }
    CHECK(scanned == 6);  // each file once, by whichever rank took its lock
    CHECK(loaded == 6 * (world - 1));
    CHECK(EntryFiles(round_cache).size() == 6);
  }
}

TEST_CASE("Shared index: an unusable directory falls back to scanning") {
  NoRacyWindow no_racy_window;
  TempDir dir;
  WriteIdCsv(dir / "a.csv", 0, 100);
  Write(dir / "not-a-dir", "x");
  const std::string uri = "file://" + dir.path() + "/a.csv";
  auto ds = OpenDataset(uri, 0, 2, true, Shared(dir / "not-a-dir/idx"));
  CHECK(ds->index_stats().files_scanned == 1);
  CHECK(ds->index_stats().files_stored == 0);
  CHECK(ds->TotalRows() == std::optional<int64_t>(100));
}

TEST_CASE("Shared index: files under /proc (inline items) are not cached") {
  NoRacyWindow no_racy_window;
  TempDir dir;
  WriteIdCsv(dir / "a.csv", 0, 10);
  // A /proc path to the same file: read, but never shared.
  const int fd = ::open((dir / "a.csv").c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  DatasetConfig c;
  c.name = "test";
  c.uri = "file:///proc/self/fd/" + std::to_string(fd);
  c.format = "csv";
  c.world_size = 2;
  auto opened = Dataset::Open(c, Shared(dir / "idx"));
  ::close(fd);
  INFO(opened.status().message());
  REQUIRE(opened.ok());
  auto ds = *opened;
  CHECK(ds->index_stats().files_scanned == 1);
  CHECK(ds->index_stats().files_stored == 0);
  CHECK(EntryFiles(dir / "idx").empty());
}

TEST_CASE("Shared index: the worker's ranks share it in <trial_dir>/.data_index") {
  NoRacyWindow no_racy_window;
  TempDir dir;
  WriteIdCsv(dir / "train.csv", 0, 1000);
  REQUIRE(MakeDirs(dir / "trial").ok());
  std::vector<std::string> infos;
  ino_t entry_inode = 0;
  for (int rank = 0; rank < 2; ++rank) {
    infos.push_back(
        ShardInfo({{"world_rank", rank},
                   {"world_size", 2},
                   {"local_world_size", 2},
                   {"trial_dir", dir / "trial"},
                   {"datasets", {{"train", {{"uri", "file://" + (dir / "train.csv")}}}}}}));
    const auto entries = EntryFiles(dir / "trial/.data_index");
    REQUIRE(entries.size() == 1);
    struct stat st;
    REQUIRE(::stat(entries[0].c_str(), &st) == 0);
    // Rank 1 loaded rank 0's entry: a scan would have stored a new one (another inode).
    if (rank == 0) entry_inode = st.st_ino;
    CHECK(st.st_ino == entry_inode);
  }
  CHECK_THAT(infos[1], Catch::Contains("\"num_rows\":500"));
  CHECK_THAT(infos[1], Catch::Contains("\"rank\":1"));
}

TEST_CASE("Shared index: the context's data_index_dir is shared across jobs (trial dirs)") {
  NoRacyWindow no_racy_window;
  TempDir dir;
  WriteIdCsv(dir / "train.csv", 0, 500);
  // Two jobs, each with its own trial dir, on a node whose agent names one index dir.
  std::vector<ino_t> inodes;
  for (const char* trial : {"trial-a", "trial-b"}) {
    CHECK_THAT(ShardInfo({{"world_rank", 1},
                          {"world_size", 2},
                          {"local_world_size", 2},
                          {"trial_dir", dir / trial},
                          {"data_index_dir", dir / "node-index"},
                          {"datasets", {{"train", {{"uri", "file://" + (dir / "train.csv")}}}}}}),
               Catch::Contains("\"num_rows\":250"));
    CHECK_FALSE(PathExists(dir / (std::string(trial) + "/.data_index")));
    const auto entries = EntryFiles(dir / "node-index");
    REQUIRE(entries.size() == 1);
    struct stat st;
    REQUIRE(::stat(entries[0].c_str(), &st) == 0);
    inodes.push_back(st.st_ino);
  }
  // The second job loaded the first one's entry: a scan would have stored another inode.
  CHECK(inodes[0] == inodes[1]);
}

TEST_CASE("Shared index: the directory keeps the most recently used entries") {
  NoRacyWindow no_racy_window;
  TempDir dir;
  const std::string cache = dir / "idx";
  for (int f = 0; f < 4; ++f) WriteIdCsv(dir / ("f" + std::to_string(f) + ".csv"), 0, 300);
  auto uri = [&](int f) { return "file://" + dir.path() + "/f" + std::to_string(f) + ".csv"; };
  // Reads file f split (so that it needs the index) and returns its new entry.
  auto entry_of = [&](int f) {
    auto before = EntryFiles(cache);
    auto ds = OpenDataset(uri(f), 0, 2, true, Shared(cache));
    CHECK(ds->index_stats().files_stored == 1);
    for (const auto& e : EntryFiles(cache)) {
      if (std::find(before.begin(), before.end(), e) == before.end()) return e;
    }
    return std::string();
  };
  auto set_mtime = [](const std::string& path, time_t sec) {
    const struct timespec times[2] = {{sec, 0}, {sec, 0}};
    REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
  };
  auto sorted = [](std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  std::vector<std::string> e;
  for (int f = 0; f < 3; ++f) e.push_back(entry_of(f));
  REQUIRE(EntryFiles(cache).size() == 3);
  set_mtime(e[0], 1000);
  set_mtime(e[1], 3000);
  set_mtime(e[2], 2000);
  // Loading an entry marks its use: f0's is then the newest.
  auto again = OpenDataset(uri(0), 1, 2, true, Shared(cache));
  REQUIRE(again->index_stats().files_loaded == 1);
  struct stat st;
  REQUIRE(::stat(e[0].c_str(), &st) == 0);
  CHECK(st.st_mtime > 3000);

  SECTION("a build that stores prunes to the limit, least recently used first") {
    MaxEntries two(2);
    const std::string e3 = entry_of(3);
    CHECK(sorted(EntryFiles(cache)) == sorted({e[0], e3}));
    // The pruned entries' locks went with them.
    for (const auto& gone : {e[1], e[2]}) {
      CHECK_FALSE(PathExists(gone.substr(0, gone.size() - 4) + ".lock"));
    }
  }
  SECTION("a build of more files than the limit keeps its own entries") {
    MaxEntries one(1);
    auto all = OpenDataset("file://" + dir.path() + "/f*.csv", 0, 2, true, Shared(cache));
    CHECK(all->index_stats().files_loaded == 3);
    CHECK(all->index_stats().files_stored == 1);  // f3
    // The three it loaded and the one it stored stay, though the limit is 1.
    CHECK(EntryFiles(cache).size() == 4);
  }
  SECTION("the entries a build names stay whatever their times (a coarse or skewed clock)") {
    // All three look unused for an hour, as on a file system whose clock lags the node's.
    for (const auto& path : e) set_mtime(path, 1000);
    auto name = [](const std::string& path) {
      const size_t slash = path.rfind('/');
      return path.substr(slash + 1, path.size() - slash - 1 - 4);
    };
    CHECK(index_cache_internal::PruneEntries(cache, 1, {name(e[0]), name(e[2])}) == 1);
    CHECK(sorted(EntryFiles(cache)) == sorted({e[0], e[2]}));
  }
  SECTION("an entry whose lock is held stays; a lock without an entry goes") {
    const std::string held = e[2].substr(0, e[2].size() - 4) + ".lock";
    const int fd = ::open(held.c_str(), O_RDWR | O_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(::flock(fd, LOCK_EX) == 0);
    const std::string orphan = cache + "/0123456789abcdef0123456789abcdef.lock";
    Write(orphan, "");
    CHECK(index_cache_internal::PruneEntries(cache, 1) == 1);  // e[1]; e[2] is locked
    ::close(fd);
    CHECK(sorted(EntryFiles(cache)) == sorted({e[0], e[2]}));
    CHECK_FALSE(PathExists(orphan));
    CHECK(PathExists(held));
  }
}

TEST_CASE("Shared index: entries and locks another account left are replaced, not scanned around") {
  // The node ran its workers as root (or as itself) before, then with --worker-user: the
  // agent hands the directory to the new account, not the 0600 files in it.
  if (::geteuid() != 0) {
    WARN("skipped: needs root");
    return;
  }
  struct passwd* nobody = ::getpwnam("nobody");
  REQUIRE(nobody != nullptr);
  NoRacyWindow no_racy_window;
  TempDir dir;
  REQUIRE(::chmod(dir.path().c_str(), 0755) == 0);
  WriteIdCsv(dir / "a.csv", 0, 400);
  const std::string uri = "file://" + dir.path() + "/a.csv";
  const std::string cache = dir / "idx";
  auto root_built = OpenDataset(uri, 0, 2, true, Shared(cache));
  REQUIRE(root_built->index_stats().files_stored == 1);
  const std::vector<std::string> entries = EntryFiles(cache);
  REQUIRE(entries.size() == 1);
  const std::string lock = entries[0].substr(0, entries[0].size() - 4) + ".lock";
  REQUIRE(PathExists(lock));
  REQUIRE(::chown(cache.c_str(), nobody->pw_uid, nobody->pw_gid) == 0);
  // Rank `rank` as nobody, in a child: its stats as (stored, loaded, scanned), or -1.
  auto as_nobody = [&](int rank) {
    return testing::InChild(3, [&]() -> std::vector<int64_t> {
      if (::setgroups(0, nullptr) != 0 || ::setgid(nobody->pw_gid) != 0 ||
          ::setuid(nobody->pw_uid) != 0) {
        return {};
      }
      DatasetConfig c;
      c.name = "train";
      c.uri = uri;
      c.rank = rank;
      c.world_size = 2;
      auto ds = Dataset::Open(c, Shared(cache));  // a split shard: it takes the index
      if (!ds.ok()) return {};
      const IndexStats st = (*ds)->index_stats();
      return {st.files_stored, st.files_loaded, st.files_scanned};
    });
  };
  // The first rank replaces the lock, scans and stores; the next one loads its entry.
  CHECK(as_nobody(0) == std::vector<int64_t>{1, 0, 1});
  CHECK(as_nobody(1) == std::vector<int64_t>{0, 1, 0});
  struct stat st;
  REQUIRE(::stat(lock.c_str(), &st) == 0);
  CHECK(st.st_uid == nobody->pw_uid);
}

}  // namespace data
}  // namespace traintl
