// Remote log chunks: the wire form round-trips and refuses garbage, a chunk is read from
// the history start (--tail / --since) or an offset, and each rank's log is placed on the
// node that ran it.

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>

#include "daemon/node/log_chunk.h"

using traintl::DecodeLogChunk;
using traintl::EncodeLogChunk;
using traintl::LogChunk;
using traintl::LogHistoryStart;
using traintl::LogMark;
using traintl::PlaceRankLogs;
using traintl::ReadLogChunk;

namespace {

std::string TempLog(const std::string& text, const std::string& index = "") {
  char dir[] = "/tmp/traintl-logchunk-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string path = std::string(dir) + "/rank_0.log";
  std::ofstream(path) << text;
  if (!index.empty()) std::ofstream(path + ".idx") << index;
  return path;
}

}  // namespace

TEST_CASE("a log chunk round-trips through its wire form, bytes as they are") {
  LogChunk c;
  c.offset = 5;
  c.size = 20;
  c.marks = {{1000, 7}, {1250, 20}};
  c.data = std::string("line\n\0bin\xff\n", 11);
  auto d = DecodeLogChunk(EncodeLogChunk(c));
  REQUIRE(d.ok());
  CHECK(d->offset == 5);
  CHECK(d->size == 20);
  CHECK(d->exists);
  REQUIRE(d->marks.size() == 2);
  CHECK(d->marks[1].time_ms == 1250);
  CHECK(d->marks[1].size == 20);
  CHECK(d->data == c.data);

  LogChunk none;
  none.exists = false;
  auto n = DecodeLogChunk(EncodeLogChunk(none));
  REQUIRE(n.ok());
  CHECK_FALSE(n->exists);
  CHECK(n->data.empty());
}

TEST_CASE("a malformed log chunk is refused") {
  CHECK_FALSE(DecodeLogChunk("").ok());
  CHECK_FALSE(DecodeLogChunk("garbage\n").ok());
  CHECK(DecodeLogChunk("0 3 1 0\n").ok());  // well formed, empty
  CHECK_FALSE(DecodeLogChunk("-1 3 1 0\n").ok());
  CHECK_FALSE(DecodeLogChunk("0 3 2 0\n").ok());
  CHECK_FALSE(DecodeLogChunk("0 3 1 2\n1 2\n").ok());   // one mark short
  CHECK_FALSE(DecodeLogChunk("0 3 1 0\nabcdef").ok());  // bytes past the size
}

TEST_CASE("a chunk is read from an offset, or from the history start of a tail or a time") {
  const std::string path = TempLog("a\nbb\nccc\ndddd\n", "1000 5\n2000 9\n3000 14\n");
  LogChunk all = ReadLogChunk(path, 0, 1 << 20, 0, 0, /*marks=*/false);
  CHECK(all.exists);
  CHECK(all.size == 14);
  CHECK(all.data == "a\nbb\nccc\ndddd\n");
  CHECK(all.marks.empty());

  LogChunk some = ReadLogChunk(path, 5, 3, 0, 0, false);
  CHECK(some.offset == 5);
  CHECK(some.data == "ccc");

  LogChunk tail = ReadLogChunk(path, -1, 1 << 20, /*tail=*/2, 0, /*marks=*/true);
  CHECK(tail.offset == 5);
  CHECK(tail.data == "ccc\ndddd\n");
  CHECK(tail.marks.size() == 3);

  // Lines written at or after 2500: the mark at 2000 (9 bytes) was before it.
  LogChunk since = ReadLogChunk(path, -1, 1 << 20, 0, /*since_ms=*/2500, true);
  CHECK(since.offset == 9);
  CHECK(since.data == "dddd\n");
  CHECK(LogHistoryStart(path, since.marks, 14, 0, 2500) == 9);

  // A tail bounded to 6 bytes starts at the line that holds the 7th byte before the end
  // ("ccc\n", which with the line after it is over the bound, so the tail drops it); a
  // looser bound changes nothing, and without a tail the bound does not apply.
  LogChunk bounded = ReadLogChunk(path, -1, 1 << 20, /*tail=*/3, 0, false, /*tail_max_bytes=*/6);
  CHECK(bounded.offset == 5);
  CHECK(bounded.data == "ccc\ndddd\n");
  CHECK(ReadLogChunk(path, -1, 1 << 20, 3, 0, false, 4).offset == 9);  // "dddd\n" only
  CHECK(ReadLogChunk(path, -1, 1 << 20, 3, 0, false, 3).offset == 9);
  CHECK(ReadLogChunk(path, -1, 1 << 20, 3, 0, false, 100).offset == 2);
  CHECK(ReadLogChunk(path, -1, 1 << 20, 3, 0, false, 13).offset == 2);
  CHECK(ReadLogChunk(path, -1, 1 << 20, 3, 0, false, 14).offset == 2);
  CHECK(LogHistoryStart(path, {}, 14, 0, 0, 6) == 0);
  CHECK(LogHistoryStart(path, since.marks, 14, 3, 2500, 6) == 9);

  // A last line without its newline yet (a progress bar) is not in the tail's history, so
  // the bound counts from the end of the whole lines before it.
  const std::string open_line = TempLog("aaaa\nbbbb\n" + std::string(200, 'x'), "");
  CHECK(ReadLogChunk(open_line, -1, 1 << 20, 3, 0, false, 12).offset == 0);
  CHECK(ReadLogChunk(open_line, -1, 1 << 20, 3, 0, false, 6).offset == 0);
  CHECK(ReadLogChunk(open_line, -1, 1 << 20, 3, 0, false, 4).offset == 5);
  const std::string no_newline = TempLog(std::string(300, 'y'), "");
  CHECK(ReadLogChunk(no_newline, -1, 1 << 20, 3, 0, false, 10).offset == 0);

  LogChunk past = ReadLogChunk(path, 14, 1 << 20, 0, 0, false);
  CHECK(past.data.empty());
  CHECK(past.size == 14);

  LogChunk missing = ReadLogChunk(path + ".nope", 0, 1 << 20, 0, 0, false);
  CHECK_FALSE(missing.exists);
  CHECK(missing.size == 0);
}

TEST_CASE("each rank's log is placed on the node that ran it") {
  const std::vector<std::string> rank_nodes = {"head", "agent", "head"};
  const std::map<std::string, std::string> addresses = {{"head", "127.0.0.1:1"},
                                                        {"agent", "127.0.0.1:2"}};
  auto on_head = PlaceRankLogs({0, 1, 2}, rank_nodes, addresses, "head");
  REQUIRE(on_head.size() == 3);
  CHECK_FALSE(on_head[0].remote);
  CHECK(on_head[1].remote);
  CHECK(on_head[1].node == "agent");
  CHECK(on_head[1].address == "127.0.0.1:2");
  CHECK_FALSE(on_head[2].remote);

  auto on_agent = PlaceRankLogs({1, 2}, rank_nodes, addresses, "agent");
  CHECK_FALSE(on_agent[0].remote);
  CHECK(on_agent[1].remote);
  CHECK(on_agent[1].address == "127.0.0.1:1");

  // An attempt without a placement (an older release): every rank is looked for here.
  auto old = PlaceRankLogs({0, 1}, {}, {}, "voter");
  CHECK_FALSE(old[0].remote);
  CHECK_FALSE(old[1].remote);
  // A node whose address was not recorded: remote, with no address.
  auto unknown = PlaceRankLogs({1}, rank_nodes, {}, "head");
  CHECK(unknown[0].remote);
  CHECK(unknown[0].address.empty());
}
