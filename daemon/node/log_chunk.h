// LogChunk: a piece of one rank's log file as one daemon serves it to another
// (GET /v1/internal/logs/{job}/{attempt}/{rank}, daemon/api/internal_routes.h), so that
// `traintl logs` on any daemon shows ranks that ran on other nodes: the bytes from an
// offset, the file's size then, and its index marks (daemon/node/log_index.h) for
// interleaving by time. Also where a log's history starts for --tail / --since, the same
// on the node that has the file and on the one that asks for it, and which node holds
// each rank's log of an attempt.
//
// Thread-safety: pure functions, or functions that only read files; any thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/result.h"
#include "daemon/node/log_index.h"

namespace traintl {

struct LogChunk {
  int64_t offset = 0;          // the file offset of data's first byte
  int64_t size = 0;            // the file's size when it was read
  bool exists = true;          // false: no such log (yet) on that node
  std::vector<LogMark> marks;  // with marks asked for: the index, else empty
  std::string data;
};

// Up to `n` bytes of `path` from `from` ("" when it cannot be read).
std::string ReadLogRange(const std::string& path, off_t from, size_t n);
// The size of the regular file `path`; -1 when there is none.
off_t LogFileSize(const std::string& path);

// The wire form: "<offset> <size> <exists> <marks>\n", then one "<ms> <size>\n" per mark,
// then the bytes.
std::string EncodeLogChunk(const LogChunk& c);
Result<LogChunk> DecodeLogChunk(const std::string& body);

// Where the bytes of the log at `path` begin: past the hole that bounding its size punched
// at its start (WorkerPoolOptions::max_log_bytes), at the first whole line after it; 0
// for a log without one, or for no file.
off_t LogDataStart(const std::string& path);

// Where the history of the log at `path` (of `size` bytes, index `marks`) starts: the
// first of the last `tail` lines (0: no limit) and of the lines written at or after
// `since_ms` (0: no limit), never before LogDataStart. With `tail` and `tail_max_bytes`
// (0: no limit), also not before the line that holds the byte tail_max_bytes + 1 before
// the end of the last whole line: a tail bounded to that many bytes shows none of what
// lies before it (nor a last line without its newline yet, which follows the tail).
off_t LogHistoryStart(const std::string& path, const std::vector<LogMark>& marks, off_t size,
                      int tail, int64_t since_ms, size_t tail_max_bytes = 0);

// Reads a chunk of the log at `path`: at most `max` bytes from `offset`, or with
// offset < 0, from its history start (LogHistoryStart with `tail`, `since_ms`,
// `tail_max_bytes`); with `marks`, the index too. No file: exists false, size 0.
LogChunk ReadLogChunk(const std::string& path, int64_t offset, size_t max, int tail,
                      int64_t since_ms, bool marks, size_t tail_max_bytes = 0);

// Where a rank's log of an attempt is: on this node (`remote` false), or on `node` at
// `address` ("" when the attempt did not record it).
struct RankLogPlace {
  int rank = 0;
  bool remote = false;
  std::string node;
  std::string address;
};

// The places of `ranks` from the attempt's placement (AttemptRecord::rank_nodes and
// node_addresses); a rank the placement does not name (an attempt of an older release)
// is looked for on this node `self_node`.
std::vector<RankLogPlace> PlaceRankLogs(const std::vector<int>& ranks,
                                        const std::vector<std::string>& rank_nodes,
                                        const std::map<std::string, std::string>& node_addresses,
                                        const std::string& self_node);

}  // namespace traintl
