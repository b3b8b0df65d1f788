#include <catch2/catch.hpp>
#include <cstdlib>

#include "common/crypto.h"
#include "common/file_util.h"
#include "daemon/node/blob_store.h"

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
  RemoveAll(tmpl);
}
