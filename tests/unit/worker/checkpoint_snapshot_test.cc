// CheckpointSnapshot (worker/checkpoint_snapshot.h): clone or memory copy per file, the
// copy's independence from later changes, the bound on memory, and that nothing is left
// behind - after Persist, on error, and when the process dies with a snapshot held.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "worker/checkpoint_snapshot.h"

using namespace traintl;
using traintl::worker::CheckpointSnapshot;
using traintl::worker::SnapshotOptions;

namespace {

std::string TempDir() {
  char tmpl[] = "/tmp/traintl-snapshot-test-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  return tmpl;
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (struct dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") out.push_back(n);
    }
    ::closedir(d);
  }
  return out;
}

std::string Read(const std::string& path) {
  auto text = ReadFile(path);
  REQUIRE(text.ok());
  return *text;
}

// A checkpoint: a.bin (3 MiB + 5 bytes, crossing chunk sizes), sub/b.txt, empty.txt.
void WriteCheckpoint(const std::string& src, char fill) {
  REQUIRE(MakeDirs(src + "/sub").ok());
  REQUIRE(WriteFileAtomic(src + "/a.bin", std::string((3 << 20) + 5, fill)).ok());
  REQUIRE(WriteFileAtomic(src + "/sub/b.txt", std::string("b-") + fill).ok());
  REQUIRE(WriteFileAtomic(src + "/empty.txt", "").ok());
}

struct Dirs {
  Dirs()
      : root(TempDir()),
        src(root + "/src"),
        dst(root + "/staging/seq_3/rank_1"),
        mem(root + "/mem") {
    REQUIRE(MakeDirs(mem).ok());
  }
  ~Dirs() { (void)RemoveAll(root); }
  std::string root, src, dst, mem;
};

}  // namespace

TEST_CASE("without a clone the files go to memory, and Persist writes them as they were") {
  Dirs d;
  WriteCheckpoint(d.src, 'x');
  SnapshotOptions options;
  options.memory_dir = d.mem;
  options.memory_reserve_bytes = 0;
  // The default FICLONE: /tmp here is ext4 or tmpfs, neither clones; a forced failure
  // makes the test the same on a file system that does.
  options.clone = [](int, int) {
    errno = EOPNOTSUPP;
    return -1;
  };
  auto snap = CheckpointSnapshot::Take(d.src, d.dst, options);
  REQUIRE(snap.ok());
  CHECK((*snap)->files() == 3);
  CHECK((*snap)->cloned_bytes() == 0);
  CHECK((*snap)->memory_bytes() == (3u << 20) + 5 + 3);
  // Unlinked: the memory dir shows no names, even while the snapshot holds the data.
  CHECK(Entries(d.mem).empty());
  // The loop may change its files at once; the snapshot keeps what they were.
  WriteCheckpoint(d.src, 'y');
  REQUIRE((*snap)->Persist().ok());
  CHECK(Read(d.dst + "/a.bin") == std::string((3 << 20) + 5, 'x'));
  CHECK(Read(d.dst + "/sub/b.txt") == "b-x");
  CHECK(Read(d.dst + "/empty.txt").empty());
  auto files = ListFilesRecursive(d.dst);
  REQUIRE(files.ok());
  CHECK(*files == std::vector<std::string>{"a.bin", "empty.txt", "sub/b.txt"});
}

TEST_CASE("the default FICLONE falls back to memory where the file system cannot clone") {
  Dirs d;
  WriteCheckpoint(d.src, 'q');
  SnapshotOptions options;
  options.memory_dir = d.mem;
  options.memory_reserve_bytes = 0;
  auto snap = CheckpointSnapshot::Take(d.src, d.dst, options);
  REQUIRE(snap.ok());
  // Either path is right; together they account for every byte.
  CHECK((*snap)->cloned_bytes() + (*snap)->memory_bytes() == (3u << 20) + 5 + 3);
  REQUIRE((*snap)->Persist().ok());
  CHECK(Read(d.dst + "/a.bin") == std::string((3 << 20) + 5, 'q'));
}

TEST_CASE("a clone puts the file in the staging dir at once, with nothing in memory") {
  Dirs d;
  WriteCheckpoint(d.src, 'c');
  SnapshotOptions options;
  options.memory_dir = d.mem;
  // A stand-in for a reflink: the data is in dst when Take returns.
  options.clone = [](int dst, int src) {
    struct stat st;
    if (::fstat(src, &st) != 0) return -1;
    return worker::CopyFileContents(src, dst, static_cast<uint64_t>(st.st_size)).ok() ? 0 : -1;
  };
  auto snap = CheckpointSnapshot::Take(d.src, d.dst, options);
  REQUIRE(snap.ok());
  CHECK((*snap)->memory_bytes() == 0);
  CHECK((*snap)->cloned_bytes() == (3u << 20) + 5 + 3);
  CHECK(Read(d.dst + "/a.bin") == std::string((3 << 20) + 5, 'c'));
  REQUIRE((*snap)->Persist().ok());
  CHECK(Read(d.dst + "/sub/b.txt") == "b-c");
}

TEST_CASE("no room in memory: ResourceExhausted, saying why, and nothing left behind") {
  Dirs d;
  WriteCheckpoint(d.src, 'n');
  SnapshotOptions options;
  options.memory_dir = d.mem;
  options.memory_reserve_bytes = uint64_t{1} << 62;  // no file system has that much free
  options.clone = [](int, int) {
    errno = EOPNOTSUPP;
    return -1;
  };
  auto snap = CheckpointSnapshot::Take(d.src, d.dst, options);
  REQUIRE_FALSE(snap.ok());
  CHECK(snap.status().code() == Status::Code::kResourceExhausted);
  CHECK(snap.status().message().find(d.mem + " has ") != std::string::npos);
  CHECK(snap.status().message().find("MiB free") != std::string::npos);
  CHECK_FALSE(PathExists(d.dst));
  CHECK(Entries(d.mem).empty());
}

TEST_CASE("a missing source is InvalidArgument, a leftover in dst is replaced") {
  Dirs d;
  SnapshotOptions options;
  options.memory_dir = d.mem;
  auto missing = CheckpointSnapshot::Take(d.root + "/none", d.dst, options);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == Status::Code::kInvalidArgument);

  WriteCheckpoint(d.src, 'l');
  REQUIRE(MakeDirs(d.dst).ok());
  REQUIRE(WriteFileAtomic(d.dst + "/stale.bin", "from a crashed copy").ok());
  options.memory_reserve_bytes = 0;
  auto snap = CheckpointSnapshot::Take(d.src, d.dst, options);
  REQUIRE(snap.ok());
  REQUIRE((*snap)->Persist().ok());
  CHECK_FALSE(PathExists(d.dst + "/stale.bin"));
}

TEST_CASE("a process killed while it holds a snapshot leaves nothing in the memory dir") {
  Dirs d;
  WriteCheckpoint(d.src, 'k');
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    SnapshotOptions options;
    options.memory_dir = d.mem;
    options.memory_reserve_bytes = 0;
    options.clone = [](int, int) {
      errno = EOPNOTSUPP;
      return -1;
    };
    auto snap = CheckpointSnapshot::Take(d.src, d.dst, options);
    const char ok = snap.ok() && (*snap)->memory_bytes() > 0 ? '1' : '0';
    if (::write(ready[1], &ok, 1) != 1) ::_exit(1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char ok = 0;
  REQUIRE(::read(ready[0], &ok, 1) == 1);
  ::close(ready[0]);
  CHECK(ok == '1');
  CHECK(Entries(d.mem).empty());  // unlinked from the start
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(Entries(d.mem).empty());
}

TEST_CASE("CopyFileContents copies across file systems and stops when told") {
  Dirs d;
  REQUIRE(WriteFileAtomic(d.root + "/in", std::string(20 << 20, 'z')).ok());
  const int in = ::open((d.root + "/in").c_str(), O_RDONLY);
  const int out = ::open("/dev/shm", O_TMPFILE | O_RDWR, 0600);
  REQUIRE(in >= 0);
  if (out < 0) {
    ::close(in);
    WARN("no O_TMPFILE on /dev/shm here");
    return;
  }
  REQUIRE(worker::CopyFileContents(in, out, 20 << 20).ok());
  CHECK(::lseek(out, 0, SEEK_END) == (20 << 20));
  REQUIRE(::ftruncate(out, 0) == 0);
  REQUIRE(::lseek(out, 0, SEEK_SET) == 0);
  int chunks = 0;
  Status st = worker::CopyFileContents(
      in, out, 20 << 20, [&](uint64_t) { return ++chunks < 2; }, uint64_t{1} << 20);
  CHECK(st.code() == Status::Code::kUnavailable);
  CHECK(chunks == 2);
  ::close(in);
  ::close(out);
}
