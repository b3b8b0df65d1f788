// Code archives: a job's Python working_dir packed into one deterministic POSIX ustar
// archive, and the safe unpacker and per-node cache that turn it back into a directory.
//
// Why deterministic: archives are content-addressed. The CLI packs
// "entrypoint": {"working_dir": "./src", "excludes": [...]}, uploads the bytes as a blob named
// by their sha256 and every node unpacks them into <cache>/<sha256>. The same files must give
// the same bytes, whatever their mtimes, owners or directory order, so that unchanged code
// is uploaded and unpacked once.
//
// The format (readable by GNU tar, `tar -tf` / `tar -xf`): entries sorted by name in byte
// order, as `tar -tf` shows them ("a-c.txt" before "a/"); directories included (name
// ending in '/', typeflag '5'); regular files (typeflag '0'); mtime 0, uid/gid 0, empty
// uname/gname; mode 0755 for directories and for files with any execute bit, 0644 for
// other files; paths over 100 bytes split into ustar's 155-byte prefix; two 512-byte zero
// blocks at the end and no padding to a 10 KiB record.
//
// What is left out (common/ignore_rules.h for the pattern language): `.git` (directory or
// worktree file), `__pycache__/` and `*.pyc` always, which no pattern can re-include; then
// the lines of the root's `.gitignore`, those of its `.traintlignore`, then
// PackOptions::excludes, in that order (the last matching pattern wins, so `excludes` can
// re-include what .gitignore leaves out). Only the root's ignore files are read: a
// .gitignore in a subdirectory is packed as an ordinary file and its patterns do not apply.
//
// Thread-safety: free functions with no shared state. EnsureUnpacked is safe against
// concurrent callers for the same cache, in one process and across processes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/status.h"

namespace traintl {

// The packed size limit by default, as Ray's working_dir limit.
inline constexpr uint64_t kDefaultMaxArchiveBytes = 100ull << 20;

struct PackOptions {
  uint64_t max_bytes = kDefaultMaxArchiveBytes;  // the archive's size limit
  std::vector<std::string> excludes;             // .gitignore-style patterns, relative to the root
};

struct PackedDir {
  std::string bytes;          // the archive
  std::string sha256;         // lowercase hex of bytes
  int64_t files = 0;          // regular files packed
  int64_t content_bytes = 0;  // their total size
};

// Packs `dir` deterministically. Symlinks are followed when their target (realpath) lies
// inside `dir`: a file's contents are packed under the link's name, a directory is walked
// (each real directory at most once on a path, so a link to a parent is refused as a cycle).
// Errors name the offending path relative to `dir`:
//   NotFound          `dir` is missing;
//   InvalidArgument   `dir` is not a directory; a symlink resolving outside `dir`
//                     ("data: a symlink to /mnt/data, outside the working_dir ..."), dangling
//                     or forming a cycle; a FIFO, socket or device; a path too long for ustar
//                     (over 255 bytes, or no '/' splitting it into <= 155 + <= 100 bytes);
//   ResourceExhausted the archive would exceed options.max_bytes (the message gives the
//                     packed size, the limit and the 3 largest files);
//   PermissionDenied  a file or directory that cannot be read.
// Excluded entries are never examined, so excluding a bad symlink or a FIFO packs the rest.
Result<PackedDir> PackDirectory(const std::string& dir, const PackOptions& options = {});

// Unpacks archive `bytes` into `dest`, which must not exist yet (AlreadyExists; its parent
// must exist, NotFound). Creates `dest` and directories 0755, regular files 0644 or 0755
// (executable when the entry's mode has any execute bit), whatever the umask; file contents
// and directories are fsynced, so the tree is durable when this returns.
// Accepts ustar archives of regular files and directories only (this module's format; no
// pax or GNU long-name headers). Refuses, naming the entry (InvalidArgument): absolute paths,
// "..", "." and empty components, entry types other than regular file and directory (links
// above all), duplicate entries, a NUL inside a name field, bad checksums, a truncated
// archive or one without its end marker; and (ResourceExhausted) a total unpacked size over
// `max_bytes`. On any error, removes `dest` and everything it created in it.
Status UnpackArchive(const std::string& bytes, const std::string& dest,
                     uint64_t max_bytes = kDefaultMaxArchiveBytes * 4);

// The per-node cache of unpacked archives: returns <cache_root>/<sha256>, first unpacking
// `archive_path` there when it is absent (an existing entry is returned without reading the
// archive). The archive is read (at most `max_bytes`), its sha256 checked against `sha256`
// (InvalidArgument on a mismatch, so a wrong file never poisons the cache) and unpacked into
// a fresh <cache_root>/.tmp-<random>, which is then renamed into place: a directory at
// <cache_root>/<sha256> is always complete. When another caller's rename won the race, its
// directory is used and ours removed. `cache_root` is created (0755) when missing. Refuses a
// `sha256` that is not 64 lowercase hex characters. A .tmp-* directory left by a crash is
// not cleaned up here.
Result<std::string> EnsureUnpacked(const std::string& cache_root, const std::string& sha256,
                                   const std::string& archive_path,
                                   uint64_t max_bytes = kDefaultMaxArchiveBytes * 4);

}  // namespace traintl
