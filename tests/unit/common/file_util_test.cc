#include <sys/stat.h>
#include <catch2/catch.hpp>
#include <cstdlib>

#include "common/crypto.h"
#include "common/file_util.h"

using namespace traintl;

static std::string TempDir() {
  char tmpl[] = "/tmp/traintl-common-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  return tmpl;
}

TEST_CASE("WriteFileAtomic writes content and mode") {
  std::string dir = TempDir();
  REQUIRE(WriteFileAtomic(dir + "/a", "hello", 0600).ok());
  auto r = ReadFile(dir + "/a");
  REQUIRE(r.ok());
  CHECK(*r == "hello");
  struct stat st;
  REQUIRE(stat((dir + "/a").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(!ReadFile(dir + "/missing").ok());
  CHECK(ReadFile(dir + "/missing").status().code() == Status::Code::kNotFound);
  REQUIRE(RemoveAll(dir).ok());
  CHECK(!PathExists(dir));
}

TEST_CASE("CopyTreeDurably copies nested files") {
  std::string dir = TempDir();
  REQUIRE(MakeDirs(dir + "/src/x/y").ok());
  REQUIRE(WriteFileAtomic(dir + "/src/x/y/f", "1").ok());
  REQUIRE(WriteFileAtomic(dir + "/src/g", "22").ok());
  REQUIRE(CopyTreeDurably(dir + "/src", dir + "/dst").ok());
  auto files = ListFilesRecursive(dir + "/dst");
  REQUIRE(files.ok());
  CHECK(*files == std::vector<std::string>{"g", "x/y/f"});
  CHECK(*ReadFile(dir + "/dst/x/y/f") == "1");
  CHECK(!CopyTreeDurably(dir + "/nope", dir + "/dst2").ok());
  RemoveAll(dir).IgnoreError();
}

TEST_CASE("TailFile starts at a line boundary") {
  std::string dir = TempDir();
  REQUIRE(WriteFileAtomic(dir + "/log", "line1\nline2\nline3\n").ok());
  CHECK(TailFile(dir + "/log", 9) == "line3\n");
  CHECK(TailFile(dir + "/log", 1000) == "line1\nline2\nline3\n");
  RemoveAll(dir).IgnoreError();
}

TEST_CASE("crypto helpers") {
  CHECK(Sha256Hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(IsSha256Hex(Sha256Hex("")));
  CHECK(!IsSha256Hex("../etc/passwd"));
  CHECK(RandomHex(16).size() == 32);
  CHECK(ConstantTimeEquals("abc", "abc"));
  CHECK(!ConstantTimeEquals("abc", "abd"));
  CHECK(!ConstantTimeEquals("abc", "ab"));
}
