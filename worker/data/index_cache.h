// The shared row index: Dataset::Index's per-file chunk lists, kept as small files in a
// directory that the jobs of a node share (the agent makes <data_dir>/data_index, owned by
// the workers' account, and passes it in the rank context; without one DatasetService
// uses <trial_dir>/.data_index), so that one rank scans (line-counts) a file and every
// other rank of its node, of this job or a later one (a restart, the next tuning trial, the
// next run of a script), loads what it found instead of scanning the whole file again.
//
// Only CSV and JSON Lines files have entries: their index takes a scan, while .npy and
// Parquet chunks come from the header or footer every rank reads anyway.
//
// One entry per data file: "<sha256(key)[0:32]>.idx", written to a temporary name and
// renamed into place (readers see a whole entry or none). The key names everything the
// chunk list depends on: the format, chunk_bytes, the file's data offset and first line,
// the node (host name), and the file's identity:
//   local files  path, st_dev, st_ino, size, mtime and ctime (nanoseconds): a file changed
//                or replaced since gets another key, so a stale entry is never used (ctime
//                cannot be set back by a user, unlike mtime);
//   HTTP files   URL, size and the server's strong ETag, else its Last-Modified; a server
//                that sends neither (or no size) is not cached: every rank scans, as before.
// An entry is not stored for a file changed less than 2 s before its scan ended: a change
// within the same tick of the file system's clock would leave its identity as it was (as
// git's "racily clean" files). Files under /proc (a job spec's inline items, a memfd of the
// process) are not cached.
// An entry holds its full key, its chunks and a checksum, and is checked when loaded
// (magic, key, exact length, checksum, chunks in order within the file): a corrupt or
// truncated entry is ignored and rebuilt. Entries are per node (the key holds the host), so
// a directory on storage shared by nodes is fine; each node builds its own.
//
// Who builds: per file, whoever takes "<hash>.lock" (flock, exclusive) first. A rank first
// loads the entries that exist, then takes the locks it can get without waiting and scans
// those files (so the ranks of a node scan a many-file dataset's files in parallel, each a
// different one), then waits for the others' locks and loads what their holders stored
// (scanning itself when a holder died or failed before storing: the lock goes with its
// process). Waiting polls the lock every 2 ms and gives up when `cancel` is set.
// Every failure of the cache itself (an unwritable directory, a lock that cannot be taken
// on some network file system, a failed write) falls back to scanning without sharing:
// the cache can make reading faster, never fail it. Loading an entry sets its mtime (its
// last use); a build that stored entries then prunes the directory to the
// kDefaultMaxEntries most recently used (stale ones, of files since changed, go first as
// nothing loads them), sparing those it used itself and any whose lock is held. An entry is
// a few KiB per GB of data (24 bytes per chunk). A lock file another account left (the
// node's workers ran as another user before) is replaced, as the directory is this
// account's.
//
// Thread-safety: BuildSharedIndex may run concurrently in threads and processes on the
// same directory.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "common/result.h"
#include "worker/data/dataset.h"

namespace traintl {
namespace data {

// Scans file `index` of the dataset (Dataset::ScanFile).
using ScanFileFn = std::function<Result<std::vector<Chunk>>(int index)>;

// The row index of `files` (their chunks, file after file), through the entries in `dir`
// ("" = no sharing: every file is scanned). `stats` (not null) is added to.
Result<std::vector<Chunk>> BuildSharedIndex(const std::string& dir,
                                            const std::vector<FileInfo>& files, Format format,
                                            size_t chunk_bytes, const HttpOptions& http,
                                            const ScanFileFn& scan, const std::atomic<bool>* cancel,
                                            IndexStats* stats);

namespace index_cache_internal {
// The entry's bytes for `key` and `chunks`, and its parse (false: not a valid entry for
// `key`, or chunks out of order / beyond `file_size` when that is known, i.e. not 0).
std::string EncodeEntry(const std::string& key, const std::vector<Chunk>& chunks);
bool DecodeEntry(const std::string& bytes, const std::string& key, int file_index,
                 uint64_t data_offset, uint64_t file_size, std::vector<Chunk>* chunks);
// The racy window above (default 2 s), for tests of files they have just written.
void SetRacyWindowNanosForTesting(int64_t nanos);
// How many entries a directory keeps (default kDefaultMaxEntries).
constexpr size_t kDefaultMaxEntries = 4096;
void SetMaxEntriesForTesting(size_t n);
// Removes the least recently used entries of `dir` (with their lock files) beyond the
// `keep` most recent, except those named in `spare` (entry file names without ".idx": the
// pruning build's own) and those whose lock is held; and temporary files of failed writes
// older than an hour. Returns how many entries it removed.
size_t PruneEntries(const std::string& dir, size_t keep, const std::set<std::string>& spare = {});
}  // namespace index_cache_internal

}  // namespace data
}  // namespace traintl
