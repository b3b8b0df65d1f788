// The log index: marks appended only when the log grew, read back tolerantly, and the
// time of a line from its end offset.

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "daemon/node/log_index.h"

using traintl::LogIndexWriter;
using traintl::LogMark;
using traintl::LogTimeOf;
using traintl::ReadLogIndex;

namespace {

std::string TempPath() {
  char dir[] = "/tmp/traintl-logidx-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  return std::string(dir) + "/rank_0.log.idx";
}

}  // namespace

TEST_CASE("the writer appends a mark only when the log grew, the reader reads them back") {
  const std::string path = TempPath();
  LogIndexWriter w;
  REQUIRE(w.Open(path).ok());
  w.Sample(1000, 0);  // nothing written yet
  w.Sample(1250, 10);
  w.Sample(1500, 10);  // no growth
  w.Sample(1750, 25);
  auto marks = ReadLogIndex(path);
  REQUIRE(marks.size() == 2);
  CHECK(marks[0].time_ms == 1250);
  CHECK(marks[0].size == 10);
  CHECK(marks[1].time_ms == 1750);
  CHECK(marks[1].size == 25);
  // A line ending at byte 10 was there by 1250; one ending at 11..25 by 1750; later ones
  // count as written at the fallback (after the last sample).
  CHECK(LogTimeOf(marks, 4, 9999) == 1250);
  CHECK(LogTimeOf(marks, 10, 9999) == 1250);
  CHECK(LogTimeOf(marks, 11, 9999) == 1750);
  CHECK(LogTimeOf(marks, 26, 9999) == 9999);
  CHECK(LogTimeOf({}, 1, 42) == 42);
  std::filesystem::remove_all(path.substr(0, path.rfind('/')));
}

TEST_CASE("a damaged index: junk, a half-written mark and going backwards are skipped") {
  const std::string path = TempPath();
  std::ofstream(path) << "1000 10\njunk\n900 20\n1100 5\n1200 30\n1300 4";
  auto marks = ReadLogIndex(path);
  REQUIRE(marks.size() == 2);
  CHECK(marks[0].size == 10);
  CHECK(marks[1].size == 30);
  CHECK(ReadLogIndex(path + ".missing").empty());
  // Never through a symlink.
  ::unlink(path.c_str());
  REQUIRE(::symlink("/etc/hostname", path.c_str()) == 0);
  LogIndexWriter w;
  CHECK_FALSE(w.Open(path).ok());
  w.Sample(1, 1);  // inert, no crash
  std::filesystem::remove_all(path.substr(0, path.rfind('/')));
}
