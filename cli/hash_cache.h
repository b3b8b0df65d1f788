// HashCache: the SHA-256 of libraries this user submitted before, so that submitting the
// same build again neither reads nor hashes it (a few ms of a CLI call for a large
// library). An entry is keyed by the file's identity and change time - device, inode,
// size, mtime and ctime in ns; any write to the file changes its ctime, which no one can
// set back - so a changed file is always hashed again. A stale or damaged cache can only
// cost a hash: the daemon verifies every uploaded blob's SHA-256.
//
// File: <cache_dir>/library-sha256, lines "<dev> <ino> <size> <mtime ns> <ctime ns>
// <sha256> <path>", the newest last, at most kMaxEntries; replaced atomically.
//
// Thread-safety: free functions; concurrent CLI processes may race to rewrite the file,
// and the last one wins (an entry lost is a hash done again).
#pragma once

#include <optional>
#include <string>

namespace traintl {
namespace cli {

inline constexpr size_t kMaxHashCacheEntries = 64;

// The cached SHA-256 of the regular file `path` as it is now, if any.
std::optional<std::string> CachedSha256(const std::string& cache_dir, const std::string& path);
// Remembers `sha256` for `path` as it is now (best effort: errors are ignored).
void RememberSha256(const std::string& cache_dir, const std::string& path,
                    const std::string& sha256);

}  // namespace cli
}  // namespace traintl
