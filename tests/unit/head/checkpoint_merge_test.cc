#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "common/fs_identity.h"
#include "daemon/head/checkpoint_merge.h"
#include "tests/unit/common/tree_snapshot.h"

using namespace traintl;

namespace {

std::string TempDir() {
  char tmpl[] = "/tmp/traintl-merge-XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  return tmpl;
}

// The identity of the unprivileged account "nobody".
FsIdentity Nobody() {
  const struct passwd* nobody = ::getpwnam("nobody");
  REQUIRE(nobody != nullptr);
  return FsIdentity{nobody->pw_uid, nobody->pw_gid, {}};
}

}  // namespace

TEST_CASE("ranks' files merge, rank 0 wins a clash, manifest lists them") {
  const std::string trial = TempDir();
  const std::string r0 = trial + "/.staging/attempt_1/seq_3/rank_0";
  const std::string r1 = trial + "/.staging/attempt_1/seq_3/rank_1";
  REQUIRE(MakeDirs(r0 + "/sub").ok());
  REQUIRE(MakeDirs(r1).ok());
  REQUIRE(WriteFileAtomic(r0 + "/model.pt", "rank0-model").ok());
  REQUIRE(WriteFileAtomic(r0 + "/sub/opt.pt", "opt").ok());
  REQUIRE(WriteFileAtomic(r1 + "/model.pt", "rank1-model").ok());
  REQUIRE(WriteFileAtomic(r1 + "/shard_1.pt", "shard").ok());

  auto dir = MergeCheckpoint(trial, 1, 3, {{0, r0}, {1, r1}}, {{"loss", 0.5}});
  REQUIRE(dir.ok());
  CHECK(*dir == trial + "/checkpoint_a001_s000003");
  CHECK(*ReadFile(*dir + "/model.pt") == "rank0-model");
  CHECK(*ReadFile(*dir + "/shard_1.pt") == "shard");
  CHECK(*ReadFile(*dir + "/sub/opt.pt") == "opt");
  auto manifest = nlohmann::json::parse(*ReadFile(*dir + "/manifest.json"));
  CHECK(manifest["files"]["model.pt"]["rank"] == 0);
  CHECK(manifest["files"]["shard_1.pt"]["rank"] == 1);
  CHECK(manifest["metrics"]["loss"] == 0.5);
  CHECK(!PathExists(*dir + ".tmp"));
  RemoveAll(trial).IgnoreError();
}

TEST_CASE("a merge interrupted before its rename leaves only a .tmp that cleanup removes") {
  const std::string trial = TempDir();
  // What a crash between writing and renaming leaves behind.
  REQUIRE(MakeDirs(trial + "/checkpoint_a002_s000001.tmp").ok());
  REQUIRE(WriteFileAtomic(trial + "/checkpoint_a002_s000001.tmp/model.pt", "half").ok());
  REQUIRE(MakeDirs(trial + "/checkpoint_a001_s000000").ok());
  CleanupUncommitted(trial);
  CHECK(!PathExists(trial + "/checkpoint_a002_s000001.tmp"));
  CHECK(PathExists(trial + "/checkpoint_a001_s000000"));
  RemoveAll(trial).IgnoreError();
}

TEST_CASE("a missing staged directory fails the merge without a final directory") {
  const std::string trial = TempDir();
  auto dir = MergeCheckpoint(trial, 1, 0, {{0, trial + "/nope"}}, nlohmann::json::object());
  CHECK(!dir.ok());
  CHECK(!PathExists(trial + "/checkpoint_a001_s000000"));
  RemoveAll(trial).IgnoreError();
}

TEST_CASE("a worker's planted symlink cannot make a root daemon move root's files") {
  if (::geteuid() != 0) {
    WARN("skipped: needs root");
    return;
  }
  const FsIdentity worker = Nobody();
  // A root-only directory with a secret, as /root/.ssh would be.
  const std::string secret_dir = TempDir();
  REQUIRE(::chmod(secret_dir.c_str(), 0700) == 0);
  REQUIRE(WriteFileAtomic(secret_dir + "/id_rsa", "secret").ok());
  // The worker's trial dir, where it planted a link to that directory as its "checkpoint".
  const std::string trial = TempDir();
  const std::string rank0 = trial + "/.staging/attempt_1/seq_1/rank_0";
  REQUIRE(MakeDirs(rank0).ok());
  REQUIRE(::symlink(secret_dir.c_str(), (rank0 + "/loot").c_str()) == 0);
  for (const std::string& d : {trial, trial + "/.staging", trial + "/.staging/attempt_1",
                               trial + "/.staging/attempt_1/seq_1", rank0})
    REQUIRE(::chown(d.c_str(), worker.uid, worker.gid) == 0);
  REQUIRE(::lchown((rank0 + "/loot").c_str(), worker.uid, worker.gid) == 0);

  Result<std::string> merged = Status::Internal("not run");
  {
    ScopedFsIdentity as_worker(&worker);
    REQUIRE(as_worker.active());
    merged = MergeCheckpoint(trial, 1, 1, {{0, rank0}}, nlohmann::json::object());
  }
  CHECK_FALSE(merged.ok());  // the worker cannot read the linked directory
  CHECK(*ReadFile(secret_dir + "/id_rsa") == "secret");
  CHECK_FALSE(PathExists(trial + "/checkpoint_a001_s000001"));
  // Root's access is back after the scope.
  CHECK(ReadFile(secret_dir + "/id_rsa").ok());
  RemoveAll(trial).IgnoreError();
  RemoveAll(secret_dir).IgnoreError();
}

TEST_CASE("ScopedFsIdentity checks file access as the worker, then restores root's") {
  if (::geteuid() != 0) {
    WARN("skipped: needs root");
    return;
  }
  const FsIdentity worker = Nobody();
  const std::string dir = TempDir();
  REQUIRE(::chmod(dir.c_str(), 0755) == 0);
  REQUIRE(WriteFileAtomic(dir + "/root_only", "x", 0600).ok());
  {
    ScopedFsIdentity as_worker(&worker);
    // (not access(2): it checks the real uid, which stays root)
    int fd = ::open((dir + "/root_only").c_str(), O_RDONLY);
    CHECK(fd < 0);
    if (fd >= 0) ::close(fd);
    CHECK_FALSE(WriteFileAtomic(dir + "/new", "y").ok());  // dir is root's, 0755
  }
  int fd = ::open((dir + "/root_only").c_str(), O_RDONLY);
  CHECK(fd >= 0);
  if (fd >= 0) ::close(fd);
  CHECK(WriteFileAtomic(dir + "/new", "y").ok());
  std::string why;
  CHECK(ScopedFsIdentity::Supported(worker, &why));
  CHECK(why.empty());
  // A null identity (no --worker-user) changes nothing.
  ScopedFsIdentity none(nullptr);
  CHECK_FALSE(none.active());
  RemoveAll(dir).IgnoreError();
}

// A planted symlink at each path the head creates, moves or deletes on behalf of a job:
// the merge and the deletions refuse (or remove the link alone), the victim is unchanged.
// These run without root: the links sit in a world-writable directory (the storage path,
// like /tmp) or below the trial dir, where no symlink is ever followed.
namespace {

struct Planted {
  Planted()
      : storage(testing::MakeSharedDir("merge-storage")),
        victim(testing::MakeVictim()),
        trial(storage + "/mnist-j1") {}
  ~Planted() {
    RemoveAll(storage).IgnoreError();
    RemoveAll(victim).IgnoreError();
  }
  // A staged checkpoint of rank 0 for attempt 1, seq 1 in `base`.
  std::string Stage(const std::string& base) {
    const std::string rank0 = base + "/.staging/attempt_1/seq_1/rank_0";
    REQUIRE(MakeDirs(rank0).ok());
    REQUIRE(WriteFileAtomic(rank0 + "/model.pt", "weights").ok());
    return rank0;
  }
  std::string storage;
  std::string victim;
  std::string trial;
};

bool Refused(const Status& st, const std::string& path) {
  return st.code() == Status::Code::kPermissionDenied &&
         st.message().find("refusing to follow a symlink at " + path) != std::string::npos;
}

}  // namespace

TEST_CASE("a merge refuses a trial dir that is a planted symlink") {
  Planted p;
  // The victim holds what looks like a staged checkpoint, so that the old code would have
  // moved its files and written a checkpoint into it.
  const std::string staged_in_victim = p.Stage(p.victim);
  const std::string before = testing::Snapshot(p.victim);
  REQUIRE(::symlink(p.victim.c_str(), p.trial.c_str()) == 0);
  auto merged = MergeCheckpoint(p.trial, 1, 1, {{0, p.trial + "/.staging/attempt_1/seq_1/rank_0"}},
                                nlohmann::json::object());
  CHECK(Refused(merged.status(), p.trial));
  CHECK(testing::Snapshot(p.victim) == before);
  (void)staged_in_victim;
}

TEST_CASE("a merge refuses a staging dir that is a planted symlink") {
  Planted p;
  p.Stage(p.victim);
  const std::string before = testing::Snapshot(p.victim);
  REQUIRE(MakeDirs(p.trial).ok());
  REQUIRE(::symlink((p.victim + "/.staging").c_str(), (p.trial + "/.staging").c_str()) == 0);
  auto merged = MergeCheckpoint(p.trial, 1, 1, {{0, p.trial + "/.staging/attempt_1/seq_1/rank_0"}},
                                nlohmann::json::object());
  CHECK(Refused(merged.status(), p.trial + "/.staging"));
  CHECK(testing::Snapshot(p.victim) == before);
  CHECK_FALSE(PathExists(p.trial + "/checkpoint_a001_s000001"));
}

TEST_CASE("a merge refuses a symlink inside a staged checkpoint, without root") {
  Planted p;
  const std::string before = testing::Snapshot(p.victim);
  REQUIRE(MakeDirs(p.trial).ok());
  const std::string rank0 = p.Stage(p.trial);
  REQUIRE(::symlink(p.victim.c_str(), (rank0 + "/loot").c_str()) == 0);
  auto merged = MergeCheckpoint(p.trial, 1, 1, {{0, rank0}}, nlohmann::json::object());
  CHECK(Refused(merged.status(), rank0 + "/loot"));
  CHECK(testing::Snapshot(p.victim) == before);
  CHECK_FALSE(PathExists(p.trial + "/checkpoint_a001_s000001"));
  // Nothing was moved out of the staged directory before the refusal.
  CHECK(*ReadFile(rank0 + "/model.pt") == "weights");
}

TEST_CASE("a merge refuses a symlink planted at the final or the .tmp checkpoint dir") {
  Planted p;
  const std::string before = testing::Snapshot(p.victim);
  REQUIRE(MakeDirs(p.trial).ok());
  const std::string rank0 = p.Stage(p.trial);
  // At the final name: the old code took the link for a checkpoint merged before a crash.
  const std::string final_dir = p.trial + "/checkpoint_a001_s000001";
  REQUIRE(::symlink(p.victim.c_str(), final_dir.c_str()) == 0);
  auto merged = MergeCheckpoint(p.trial, 1, 1, {{0, rank0}}, nlohmann::json::object());
  CHECK(Refused(merged.status(), final_dir));
  CHECK(testing::Snapshot(p.victim) == before);
  REQUIRE(::unlink(final_dir.c_str()) == 0);
  // At the .tmp name: removed as a link (never emptied through it), then merged normally.
  REQUIRE(::symlink(p.victim.c_str(), (final_dir + ".tmp").c_str()) == 0);
  merged = MergeCheckpoint(p.trial, 1, 1, {{0, rank0}}, nlohmann::json::object());
  REQUIRE(merged.ok());
  struct stat st;
  REQUIRE(::lstat(final_dir.c_str(), &st) == 0);
  CHECK(S_ISDIR(st.st_mode));
  CHECK(*ReadFile(final_dir + "/model.pt") == "weights");
  CHECK(testing::Snapshot(p.victim) == before);
}

TEST_CASE("a checkpoint outside the trial dir is not merged") {
  Planted p;
  REQUIRE(MakeDirs(p.trial).ok());
  const std::string elsewhere = p.Stage(p.storage + "/other");
  auto merged = MergeCheckpoint(p.trial, 1, 1, {{0, elsewhere}}, nlohmann::json::object());
  CHECK(merged.status().code() == Status::Code::kInvalidArgument);
  CHECK(*ReadFile(elsewhere + "/model.pt") == "weights");
}

TEST_CASE("retention and cleanup deletes never go through a planted symlink") {
  Planted p;
  // The victim looks like a trial dir: an uncommitted .tmp and a committed checkpoint.
  REQUIRE(MakeDirs(p.victim + "/checkpoint_a001_s000001.tmp", 0700).ok());
  REQUIRE(WriteFileAtomic(p.victim + "/checkpoint_a001_s000001.tmp/x", "root's").ok());
  REQUIRE(MakeDirs(p.victim + "/checkpoint_a001_s000000", 0700).ok());
  REQUIRE(WriteFileAtomic(p.victim + "/checkpoint_a001_s000000/x", "root's").ok());
  const std::string before = testing::Snapshot(p.victim);
  REQUIRE(::symlink(p.victim.c_str(), p.trial.c_str()) == 0);
  CleanupUncommitted(p.trial);
  CHECK(testing::Snapshot(p.victim) == before);
  // The retention victim, by the path the head records (job_manager calls RemoveAll).
  CHECK(Refused(RemoveAll(p.trial + "/checkpoint_a001_s000000"), p.trial));
  CHECK(Refused(RemoveCheckpoint(p.trial, p.trial + "/checkpoint_a001_s000000"), p.trial));
  // The staging area of an ended attempt, likewise.
  CHECK(Refused(RemoveAll(p.trial + "/.staging/attempt_1"), p.trial));
  CHECK(testing::Snapshot(p.victim) == before);

  // In a real trial dir, a checkpoint that is itself a link is removed as a link only.
  REQUIRE(::unlink(p.trial.c_str()) == 0);
  REQUIRE(MakeDirs(p.trial).ok());
  REQUIRE(::symlink(p.victim.c_str(), (p.trial + "/checkpoint_a001_s000003").c_str()) == 0);
  REQUIRE(::symlink(p.victim.c_str(), (p.trial + "/checkpoint_a001_s000004.tmp").c_str()) == 0);
  CHECK(RemoveCheckpoint(p.trial, p.trial + "/checkpoint_a001_s000003").ok());
  CleanupUncommitted(p.trial);
  struct stat st;
  CHECK(::lstat((p.trial + "/checkpoint_a001_s000003").c_str(), &st) != 0);
  CHECK(::lstat((p.trial + "/checkpoint_a001_s000004.tmp").c_str(), &st) != 0);
  CHECK(RemoveCheckpoint(p.trial, "/etc/passwd").code() == Status::Code::kInvalidArgument);
  CHECK(testing::Snapshot(p.victim) == before);
}

TEST_CASE("a merge as the worker refuses a trial dir owned by a stranger") {
  if (::geteuid() != 0) {
    WARN("skipped: needs root");
    return;
  }
  Planted p;
  REQUIRE(MakeDirs(p.trial).ok());
  const std::string rank0 = p.Stage(p.trial);
  // Owned by a third user (uid 12345): neither root nor the worker.
  REQUIRE(::chown(p.trial.c_str(), 12345, 12345) == 0);
  const FsIdentity worker = Nobody();
  Result<std::string> merged = Status::Internal("not run");
  {
    ScopedFsIdentity as_worker(&worker);
    merged = MergeCheckpoint(p.trial, 1, 1, {{0, rank0}}, nlohmann::json::object());
  }
  CHECK(merged.status().code() == Status::Code::kPermissionDenied);
  CHECK(merged.status().message().find("owned by uid 12345") != std::string::npos);
  // Owned by the worker, it merges as the worker.
  for (const std::string& d : {p.trial, p.trial + "/.staging", p.trial + "/.staging/attempt_1",
                               p.trial + "/.staging/attempt_1/seq_1", rank0})
    REQUIRE(::chown(d.c_str(), worker.uid, worker.gid) == 0);
  REQUIRE(::chown((rank0 + "/model.pt").c_str(), worker.uid, worker.gid) == 0);
  {
    ScopedFsIdentity as_worker(&worker);
    merged = MergeCheckpoint(p.trial, 1, 1, {{0, rank0}}, nlohmann::json::object());
  }
  REQUIRE(merged.ok());
  CHECK(*ReadFile(*merged + "/model.pt") == "weights");
}
