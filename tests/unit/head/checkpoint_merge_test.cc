#include <catch2/catch.hpp>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "daemon/head/checkpoint_merge.h"

using namespace traintl;

namespace {

std::string TempDir() {
  char tmpl[] = "/tmp/traintl-merge-XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  return tmpl;
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
