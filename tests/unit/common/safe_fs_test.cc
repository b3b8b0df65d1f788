// common/safe_fs.h and the file_util functions built on it: a symlink planted at a path the
// daemon creates, chowns, moves, opens or deletes never makes it act on the link's target.
// Each case plants a link to a victim directory (mode 0700, a secret inside) and checks
// the operation refuses (or removes only the link) and the victim is unchanged: mode,
// owner and contents. Each of these cases fails with the path-based code this replaced
// (mkdir -p, chown(2), open(O_CREAT), rename(2), the old RemoveAll's opendir of a path).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "common/file_util.h"
#include "common/safe_fs.h"
#include "tests/unit/common/tree_snapshot.h"

using namespace traintl;
using namespace traintl::testing;

namespace {

bool Mentions(const Status& st, const std::string& what) {
  return st.message().find(what) != std::string::npos;
}

}  // namespace

TEST_CASE("MakeDirs refuses a symlink planted in a directory others can write") {
  const std::string victim = MakeVictim();
  const std::string before = Snapshot(victim);
  const std::string shared = MakeSharedDir("shared");  // like /tmp
  REQUIRE(::symlink(victim.c_str(), (shared + "/job-1").c_str()) == 0);

  Status st = MakeDirs(shared + "/job-1/.staging/attempt_1");
  CHECK(st.code() == Status::Code::kPermissionDenied);
  CHECK(Mentions(st, "refusing to follow a symlink at " + shared + "/job-1"));
  CHECK(Snapshot(victim) == before);

  // MakeJobDir refuses it too, and as the job's own directory.
  auto job = MakeJobDir(shared + "/job-1", 0755, OwnerPolicy{});
  CHECK(job.status().code() == Status::Code::kPermissionDenied);
  CHECK(Snapshot(victim) == before);
  RemoveAll(shared).IgnoreError();
  RemoveAll(victim).IgnoreError();
}

TEST_CASE("the trusted prefix follows symlinks that only root or this user can have made") {
  const std::string top = MakeTempDir("trusted", 0755);  // ours, not writable by others
  REQUIRE(MakeDirs(top + "/real").ok());
  REQUIRE(::symlink("real", (top + "/alias").c_str()) == 0);
  REQUIRE(::symlink((top + "/real").c_str(), (top + "/abs").c_str()) == 0);
  // As /tmp -> /private/tmp or a data dir moved to another disk: configuration.
  REQUIRE(MakeDirs(top + "/alias/a/b").ok());
  CHECK(IsDirectory(top + "/real/a/b"));
  auto dir = OpenTrustedDir(top + "/abs/a");
  REQUIRE(dir.ok());
  // A job's own directory below it is never a symlink, even in a trusted directory.
  auto job = MakeJobDir(top + "/alias", 0755, OwnerPolicy{});
  CHECK(job.status().code() == Status::Code::kPermissionDenied);
  auto below = MakeDirsBelow(*dir, "b/c", 0755, OwnerPolicy{});
  REQUIRE(below.ok());
  CHECK(below->path == top + "/abs/a/b/c");
  CHECK(IsDirectory(top + "/real/a/b/c"));
  CHECK(MakeDirsBelow(*dir, "../x", 0755, OwnerPolicy{}).status().code() ==
        Status::Code::kInvalidArgument);
  RemoveAll(top).IgnoreError();
}

TEST_CASE("MakeDirsBelow refuses a symlink at any component and keeps the victim") {
  const std::string victim = MakeVictim();
  const std::string before = Snapshot(victim);
  const std::string top = MakeTempDir("below", 0755);
  REQUIRE(MakeDirs(top + "/trial").ok());
  REQUIRE(::symlink(victim.c_str(), (top + "/trial/.staging").c_str()) == 0);
  auto root = OpenTrustedDir(top);
  REQUIRE(root.ok());
  auto made = MakeDirsBelow(*root, "trial/.staging/attempt_1", 0755, OwnerPolicy{});
  CHECK(made.status().code() == Status::Code::kPermissionDenied);
  CHECK(Mentions(made.status(), "refusing to follow a symlink at " + top + "/trial/.staging"));
  CHECK(OpenDirBelow(*root, "trial/.staging", OwnerPolicy{}).status().code() ==
        Status::Code::kPermissionDenied);
  CHECK(Snapshot(victim) == before);
  RemoveAll(top).IgnoreError();
  RemoveAll(victim).IgnoreError();
}

TEST_CASE("components owned by a stranger are refused, the worker user's are accepted") {
  if (::geteuid() != 0) {
    WARN("skipped: the ownership part needs root (chown to nobody)");
    return;
  }
  const std::string shared = MakeSharedDir("owners");
  // What a local user could leave at a pending job's trial dir path.
  REQUIRE(MakeDirs(shared + "/job-1").ok());
  REQUIRE(::chown((shared + "/job-1").c_str(), kNobodyUid, kNogroupGid) == 0);
  auto refused = MakeJobDir(shared + "/job-1", 0755, OwnerPolicy{});
  CHECK(refused.status().code() == Status::Code::kPermissionDenied);
  CHECK(Mentions(refused.status(), "owned by uid 65534"));
  OwnerPolicy worker;
  worker.also_allowed.push_back(kNobodyUid);
  CHECK(MakeJobDir(shared + "/job-1", 0755, worker).ok());
  RemoveAll(shared).IgnoreError();
}

TEST_CASE("RemoveAll never follows a symlink above, at or below the path") {
  const std::string victim = MakeVictim();
  const std::string before = Snapshot(victim);
  const std::string shared = MakeSharedDir("rm");
  // Above: the trial dir in a world-writable directory is a planted link; the old
  // RemoveAll opened <link>/checkpoint_x and deleted the victim's files.
  REQUIRE(MakeDirs(victim + "/checkpoint_x", 0700).ok());
  REQUIRE(WriteFileAtomic(victim + "/checkpoint_x/model.pt", "root's").ok());
  const std::string before_ckpt = Snapshot(victim);
  REQUIRE(::symlink(victim.c_str(), (shared + "/job-1").c_str()) == 0);
  Status st = RemoveAll(shared + "/job-1/checkpoint_x");
  CHECK(st.code() == Status::Code::kPermissionDenied);
  CHECK(Mentions(st, "refusing to follow a symlink at " + shared + "/job-1"));
  CHECK(Snapshot(victim) == before_ckpt);

  // At: the link itself goes, its target stays.
  const std::string top = MakeTempDir("rm-at", 0755);
  REQUIRE(::symlink(victim.c_str(), (top + "/link").c_str()) == 0);
  CHECK(RemoveAll(top + "/link").ok());
  CHECK(!PathExists(top + "/link"));
  // Below: a link inside the removed tree is removed as an entry.
  REQUIRE(MakeDirs(top + "/tree/a").ok());
  REQUIRE(::symlink(victim.c_str(), (top + "/tree/a/loot").c_str()) == 0);
  REQUIRE(::symlink((victim + "/id_rsa").c_str(), (top + "/tree/file").c_str()) == 0);
  CHECK(RemoveAll(top + "/tree").ok());
  CHECK(!PathExists(top + "/tree"));
  CHECK(Snapshot(victim) == before_ckpt);
  CHECK(RemoveAll(top + "/missing/deeper").ok());
  RemoveAll(top).IgnoreError();
  RemoveAll(shared).IgnoreError();
  REQUIRE(RemoveAll(victim + "/checkpoint_x").ok());
  CHECK(Snapshot(victim) == before);
  RemoveAll(victim).IgnoreError();
}

TEST_CASE("ChownNoFollow refuses symlinks and hard-linked files, the victim keeps its owner") {
  const std::string victim = MakeVictim();
  const std::string before = Snapshot(victim);
  const std::string top = MakeTempDir("chown", 0755);
  REQUIRE(::symlink(victim.c_str(), (top + "/trial").c_str()) == 0);
  REQUIRE(::symlink((victim + "/id_rsa").c_str(), (top + "/ctx.json").c_str()) == 0);
  const uid_t to_uid = ::geteuid() == 0 ? kNobodyUid : ::geteuid();
  const gid_t to_gid = ::geteuid() == 0 ? kNogroupGid : ::getegid();
  OwnerPolicy owners;
  owners.also_allowed.push_back(to_uid);
  Status dir = ChownNoFollow(top + "/trial", to_uid, to_gid, owners);
  CHECK(dir.code() == Status::Code::kPermissionDenied);
  CHECK(Mentions(dir, "refusing to follow a symlink at " + top + "/trial"));
  CHECK(ChownNoFollow(top + "/ctx.json", to_uid, to_gid, owners).code() ==
        Status::Code::kPermissionDenied);
  // A hard link to the victim's file (possible where protected_hardlinks is off).
  if (::link((victim + "/id_rsa").c_str(), (top + "/hard").c_str()) == 0) {
    Status hard = ChownNoFollow(top + "/hard", to_uid, to_gid, owners);
    CHECK(hard.code() == Status::Code::kPermissionDenied);
    CHECK(Mentions(hard, "links"));
    ::unlink((top + "/hard").c_str());
  }
  CHECK(Snapshot(victim) == before);
  // A real directory and file are given away.
  REQUIRE(MakeDirs(top + "/real").ok());
  REQUIRE(WriteFileAtomic(top + "/real/ctx", "{}", 0600).ok());
  CHECK(ChownNoFollow(top + "/real", to_uid, to_gid, owners).ok());
  CHECK(ChownNoFollow(top + "/real/ctx", to_uid, to_gid, owners).ok());
  struct stat st;
  REQUIRE(::stat((top + "/real/ctx").c_str(), &st) == 0);
  CHECK(st.st_uid == to_uid);
  RemoveAll(top).IgnoreError();
  RemoveAll(victim).IgnoreError();
}

TEST_CASE("RenameFileNoFollow moves regular files only, never onto a symlink") {
  const std::string victim = MakeVictim();
  const std::string before = Snapshot(victim);
  const std::string top = MakeTempDir("rename", 0755);
  REQUIRE(MakeDirs(top + "/from").ok());
  REQUIRE(MakeDirs(top + "/to").ok());
  REQUIRE(::symlink((victim + "/id_rsa").c_str(), (top + "/from/loot").c_str()) == 0);
  REQUIRE(WriteFileAtomic(top + "/from/model.pt", "weights").ok());
  REQUIRE(::symlink((victim + "/id_rsa").c_str(), (top + "/to/model.pt").c_str()) == 0);
  auto from = OpenTrustedDir(top + "/from");
  auto to = OpenTrustedDir(top + "/to");
  REQUIRE(from.ok());
  REQUIRE(to.ok());
  Status src = RenameFileNoFollow(*from, "loot", *to, "loot");
  CHECK(src.code() == Status::Code::kPermissionDenied);
  CHECK(Mentions(src, "refusing to follow a symlink at " + top + "/from/loot"));
  Status dst = RenameFileNoFollow(*from, "model.pt", *to, "model.pt");
  CHECK(dst.code() == Status::Code::kPermissionDenied);
  CHECK(Mentions(dst, "refusing to replace a symlink at " + top + "/to/model.pt"));
  REQUIRE(::unlink((top + "/to/model.pt").c_str()) == 0);
  int64_t size = 0;
  CHECK(RenameFileNoFollow(*from, "model.pt", *to, "model.pt", &size).ok());
  CHECK(size == 7);
  CHECK(*ReadFile(top + "/to/model.pt") == "weights");
  CHECK(Snapshot(victim) == before);
  RemoveAll(top).IgnoreError();
  RemoveAll(victim).IgnoreError();
}

TEST_CASE("OpenAppendNoFollow refuses a planted link, FIFO or hard link at a log path") {
  const std::string victim = MakeVictim();
  const std::string before = Snapshot(victim);
  const std::string top = MakeTempDir("log", 0755);
  REQUIRE(::symlink((victim + "/id_rsa").c_str(), (top + "/rank_0.log").c_str()) == 0);
  auto linked = OpenAppendNoFollow(top + "/rank_0.log", 0640);
  CHECK(linked.status().code() == Status::Code::kPermissionDenied);
  CHECK(Mentions(linked.status(), "refusing to follow a symlink at " + top + "/rank_0.log"));
  // A FIFO without a reader would block open(O_WRONLY) for ever.
  REQUIRE(::mkfifo((top + "/rank_1.log").c_str(), 0600) == 0);
  CHECK(OpenAppendNoFollow(top + "/rank_1.log", 0640).status().code() ==
        Status::Code::kFailedPrecondition);
  if (::link((victim + "/id_rsa").c_str(), (top + "/rank_2.log").c_str()) == 0) {
    CHECK(OpenAppendNoFollow(top + "/rank_2.log", 0640).status().code() ==
          Status::Code::kPermissionDenied);
  }
  CHECK(Snapshot(victim) == before);
  // A log in a directory reached through a planted link is refused as well.
  const std::string shared = MakeSharedDir("log-shared");
  REQUIRE(::symlink(victim.c_str(), (shared + "/attempt_1").c_str()) == 0);
  CHECK(OpenAppendNoFollow(shared + "/attempt_1/rank_0.log", 0640).status().code() ==
        Status::Code::kPermissionDenied);
  CHECK(Snapshot(victim) == before);
  // An ordinary log is created, then appended to.
  for (const char* line : {"one\n", "two\n"}) {
    auto fd = OpenAppendNoFollow(top + "/rank_3.log", 0640);
    REQUIRE(fd.ok());
    REQUIRE(::write(fd->get(), line, 4) == 4);
  }
  CHECK(*ReadFile(top + "/rank_3.log") == "one\ntwo\n");
  RemoveAll(top).IgnoreError();
  RemoveAll(shared).IgnoreError();
  RemoveAll(victim).IgnoreError();
}

TEST_CASE("WriteFileAtomicAt replaces a symlink at the name and never writes through it") {
  const std::string victim = MakeVictim();
  const std::string before = Snapshot(victim);
  const std::string top = MakeTempDir("atomic", 0755);
  REQUIRE(::symlink((victim + "/id_rsa").c_str(), (top + "/manifest.json").c_str()) == 0);
  auto dir = OpenTrustedDir(top);
  REQUIRE(dir.ok());
  REQUIRE(WriteFileAtomicAt(*dir, "manifest.json", "{}", 0644).ok());
  struct stat st;
  REQUIRE(::lstat((top + "/manifest.json").c_str(), &st) == 0);
  CHECK(S_ISREG(st.st_mode));
  CHECK(*ReadFile(top + "/manifest.json") == "{}");
  CHECK(Snapshot(victim) == before);
  RemoveAll(top).IgnoreError();
  RemoveAll(victim).IgnoreError();
}

TEST_CASE("ListFilesNoFollow lists regular files and refuses a symlink anywhere below") {
  const std::string victim = MakeVictim();
  const std::string top = MakeTempDir("list", 0755);
  REQUIRE(MakeDirs(top + "/a/b").ok());
  REQUIRE(WriteFileAtomic(top + "/a/b/f", "1").ok());
  REQUIRE(WriteFileAtomic(top + "/g", "2").ok());
  REQUIRE(::mkfifo((top + "/fifo").c_str(), 0600) == 0);
  auto dir = OpenTrustedDir(top);
  REQUIRE(dir.ok());
  auto files = ListFilesNoFollow(*dir);
  REQUIRE(files.ok());
  CHECK(*files == std::vector<std::string>{"a/b/f", "g"});
  REQUIRE(::symlink(victim.c_str(), (top + "/a/loot").c_str()) == 0);
  auto refused = ListFilesNoFollow(*dir);
  CHECK(refused.status().code() == Status::Code::kPermissionDenied);
  CHECK(Mentions(refused.status(), top + "/a/loot"));
  RemoveAll(top).IgnoreError();
  RemoveAll(victim).IgnoreError();
}

TEST_CASE("a tree deeper than the walks go is refused, not a stack overflow") {
  // What a worker can make in its staging dir in a second: 30,000 levels need more stack
  // than the daemon's threads have when each level recurses.
  const std::string top = MakeTempDir("deep", 0755);
  int fd = ::open(top.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  for (int i = 0; i < 30000; ++i) {
    REQUIRE(::mkdirat(fd, "d", 0755) == 0);
    int next = ::openat(fd, "d", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    ::close(fd);
    REQUIRE(next >= 0);
    fd = next;
  }
  REQUIRE(::close(::openat(fd, "f", O_WRONLY | O_CREAT | O_CLOEXEC, 0644)) == 0);
  ::close(fd);
  auto dir = OpenTrustedDir(top);
  REQUIRE(dir.ok());
  auto listed = ListFilesNoFollow(*dir);
  CHECK(!listed.ok());
  CHECK(Mentions(listed.status(), "levels deep"));
  // Beside it, what can go goes.
  REQUIRE(WriteFileAtomic(top + "/d/a_file", "x").ok());
  REQUIRE(MakeDirs(top + "/d/z_dir/sub").ok());
  Status removed = RemoveAllAt(*dir, "d");
  CHECK(!removed.ok());
  CHECK(Mentions(removed, "levels deep"));
  CHECK(!PathExists(top + "/d/a_file"));
  CHECK(!PathExists(top + "/d/z_dir"));
  // rm walks with a bounded stack.
  REQUIRE(std::system(("rm -rf " + top).c_str()) == 0);
}

TEST_CASE("CopyTreeDurably does not write through a symlink planted at a destination file") {
  const std::string victim = MakeVictim();
  const std::string before = Snapshot(victim);
  const std::string top = MakeTempDir("copy", 0755);
  REQUIRE(MakeDirs(top + "/src").ok());
  REQUIRE(WriteFileAtomic(top + "/src/id_rsa", "overwritten").ok());
  REQUIRE(MakeDirs(top + "/dst").ok());
  REQUIRE(::symlink((victim + "/id_rsa").c_str(), (top + "/dst/id_rsa").c_str()) == 0);
  CHECK(!CopyTreeDurably(top + "/src", top + "/dst").ok());
  CHECK(Snapshot(victim) == before);
  RemoveAll(top).IgnoreError();
  RemoveAll(victim).IgnoreError();
}
