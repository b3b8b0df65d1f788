#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>

#include "common/crypto.h"
#include "common/file_util.h"
#include "daemon/node/blob_store.h"
#include "tests/unit/common/tree_snapshot.h"

using namespace traintl;

TEST_CASE("blobs are verified and content-addressed") {
  char tmpl[] = "/tmp/traintl-blob-XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  BlobStore blobs(std::string(tmpl) + "/blobs");
  REQUIRE(blobs.Init().ok());
  const std::string data =
      "\x7f"
      "ELF pretend";
  const std::string sha = Sha256Hex(data);
  CHECK(!blobs.Has(sha));
  CHECK(blobs.Put(Sha256Hex("other"), data).code() == Status::Code::kInvalidArgument);
  CHECK(blobs.Put("../../etc/passwd", data).code() == Status::Code::kInvalidArgument);
  REQUIRE(blobs.Put(sha, data).ok());
  CHECK(blobs.Has(sha));
  auto path = blobs.PathOf(sha);
  REQUIRE(path.ok());
  CHECK(*ReadFile(*path) == data);
  CHECK(blobs.PathOf(Sha256Hex("x")).status().code() == Status::Code::kNotFound);
  CHECK(blobs.PathOf("..").status().code() == Status::Code::kInvalidArgument);
  RemoveAll(tmpl).IgnoreError();
}

TEST_CASE("a symlink planted at the blob directory or at a blob name is never followed") {
  const std::string top = testing::MakeTempDir("blob-link", 0755);
  const std::string victim = testing::MakeVictim();
  const std::string before = testing::Snapshot(victim);
  const std::string data = "library bytes";
  const std::string sha = Sha256Hex(data);

  // The blob cache itself is a link: refused at Init, and nothing is stored through it.
  REQUIRE(::symlink(victim.c_str(), (top + "/blobs").c_str()) == 0);
  BlobStore linked(top + "/blobs");
  Status init = linked.Init();
  CHECK(init.code() == Status::Code::kPermissionDenied);
  CHECK(init.message().find("refusing to follow a symlink at " + top + "/blobs") !=
        std::string::npos);
  CHECK(!linked.Put(sha, data).ok());
  CHECK(testing::Snapshot(victim) == before);
  REQUIRE(::unlink((top + "/blobs").c_str()) == 0);

  // A blob name that is a link counts as absent (it would load the target), and Put
  // replaces the link with the verified bytes.
  BlobStore blobs(top + "/blobs");
  REQUIRE(blobs.Init().ok());
  REQUIRE(::symlink((victim + "/id_rsa").c_str(), (top + "/blobs/" + sha).c_str()) == 0);
  CHECK(!blobs.Has(sha));
  CHECK(blobs.PathOf(sha).status().code() == Status::Code::kNotFound);
  REQUIRE(blobs.Put(sha, data).ok());
  CHECK(blobs.Has(sha));
  CHECK(*ReadFile(*blobs.PathOf(sha)) == data);
  CHECK(testing::Snapshot(victim) == before);
  RemoveAll(top).IgnoreError();
  RemoveAll(victim).IgnoreError();
}
