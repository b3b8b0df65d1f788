// File-system helpers with the durability rules traintl relies on: a file written with
// WriteFileAtomic is either absent or complete after a crash (temp + fsync + rename +
// fsync of the directory).
//
// Thread-safety: free functions with no shared state.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/result.h"
#include "common/status.h"

namespace traintl {

Result<std::string> ReadFile(const std::string& path);
// Reads a regular file (symlinks followed) of at most `max_bytes`. A FIFO, device, socket
// or directory is refused without blocking on it (InvalidArgument), so is a larger file
// (ResourceExhausted); a missing one is NotFound.
Result<std::string> ReadRegularFile(const std::string& path, size_t max_bytes);
// Writes `data` to `path` atomically and durably, with permission bits `mode`.
Status WriteFileAtomic(const std::string& path, const std::string& data, mode_t mode = 0644);
// mkdir -p with `mode` for the directories it creates. An existing symlink on the path is
// followed only when a directory that only root or this process's user can write holds it
// (common/safe_fs.h, rule 1); any other is refused ("refusing to follow a symlink at ...").
// Jobs' own directories use MakeJobDir / MakeDirsBelow, which also check owners.
Status MakeDirs(const std::string& path, mode_t mode = 0755);
// fsync(2) of a directory, so that renames and creations inside it are durable.
Status FsyncDir(const std::string& path);
// fsync(2) of a regular file.
Status FsyncFile(const std::string& path);
// rm -rf; OK when the path does not exist. Never follows a symlink at or below the path
// (a symlink is removed, its target untouched), and the parent is resolved by the rule of
// MakeDirs, so a link planted above the path cannot redirect the deletion either
// (RemoveAllNoFollow in common/safe_fs.h).
Status RemoveAll(const std::string& path);
bool PathExists(const std::string& path);
bool IsDirectory(const std::string& path);
// Copies every regular file below `src` into `dst` (created), keeping relative paths; each
// file is fsynced, and every directory created. Symlinks in `src` are followed (the worker
// copies its user's files with its own access); a symlink at a destination file is not;
// other special files are skipped.
Status CopyTreeDurably(const std::string& src, const std::string& dst);
// CopyTreeDurably without any fsync: for a copy that is made durable later by whoever
// keeps it (a staged checkpoint: the head's merge fsyncs what it commits).
Status CopyTree(const std::string& src, const std::string& dst);
// Relative paths of the regular files below `dir`, sorted.
Result<std::vector<std::string>> ListFilesRecursive(const std::string& dir);
// The directory part of a path ("a/b/c" -> "a/b"; "c" -> ".").
std::string DirName(const std::string& path);
std::string JoinPath(const std::string& a, const std::string& b);
// Absolute form of `path` (relative to the cwd); does not resolve symlinks.
std::string AbsolutePath(const std::string& path);
// A suffix that makes a temporary file's name unique (".tmp-<pid>-<random>"): written
// beside its final path, then renamed over it.
std::string TempSuffix();
// Last `max_bytes` of a file, starting at a line boundary where possible, as valid UTF-8
// (ToValidUtf8: a log's bytes are the training code's, and the tail goes into JSON).
std::string TailFile(const std::string& path, size_t max_bytes);

}  // namespace traintl
