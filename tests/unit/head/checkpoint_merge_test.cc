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

TEST_CASE("ranks' files merge; rank 0 wins a clash; manifest lists them") {
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
  RemoveAll(trial);
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
  RemoveAll(trial);
}

TEST_CASE("a missing staged directory fails the merge without a final directory") {
  const std::string trial = TempDir();
  auto dir = MergeCheckpoint(trial, 1, 0, {{0, trial + "/nope"}}, nlohmann::json::object());
  CHECK(!dir.ok());
  CHECK(!PathExists(trial + "/checkpoint_a001_s000000"));
  RemoveAll(trial);
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
  RemoveAll(trial);
  RemoveAll(secret_dir);
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
  RemoveAll(dir);
}
