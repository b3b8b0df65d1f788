// Symlink-safe file-system primitives for everything the daemon creates, chowns, moves or
// deletes on behalf of a job.
//
// Why: a root daemon works in directories that another account can write (a worker runs as
// --worker-user and owns its trial dir; /tmp is writable by everyone). A path-based call
// (mkdir -p, chown, rename, rm -rf, open(O_CREAT)) resolves every component at the moment
// of the call, so a symlink planted at any component (/tmp/<name>-<id> -> /root/secret)
// redirects root's work to a place the planter could never touch. These functions resolve
// paths themselves, one component at a time with openat(O_NOFOLLOW) relative to a
// directory fd they opened, and act on the final entry through that fd (mkdirat,
// fchownat(AT_EMPTY_PATH), renameat, unlinkat), so nothing changes between check and use.
//
// Two rules decide what may be followed (docs/SECURITY.md, "Paths the daemon trusts"):
//
// 1. The trusted prefix. A path from configuration (the data dir, a storage path) is
//    resolved from "/" (relative paths from the cwd). A symlink on it is followed only when
//    the directory that holds the link is a *trusted directory*: owned by root or by the
//    daemon's effective user, not writable by others, and writable by its group only when
//    that group is root's or the daemon's. Only those users can have created such a link,
//    so it is configuration (/tmp -> /private/tmp, /var/lib/traintl -> /srv/traintl), not an
//    attack. Any other symlink (one in /tmp, in a worker's trial dir) is refused.
// 2. Job components. Below a root the caller names (the storage path, the data dir) every
//    component the daemon creates or enters on behalf of a job - <name>-<id>, .staging,
//    attempt_N, checkpoint_*, jobs/<id>/attempt_N, blobs - is never a symlink, and an
//    existing one must be owned by root, the daemon's effective user or an allowed owner
//    (the worker user). A component owned by anybody else was planted and is refused.
//
// Errors name the path: "refusing to follow a symlink at /tmp/job-1" (PermissionDenied),
// "refusing to use /tmp/job-1: owned by uid 1000 ..." (PermissionDenied).
//
// Thread-safety: free functions with no shared state; UniqueFd is a value type. Every
// function checks file access with the calling thread's file identity, so they compose with
// ScopedFsIdentity (common/fs_identity.h).
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "common/result.h"
#include "common/status.h"

namespace traintl {

// An owned file descriptor, closed when destroyed. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd();
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

// Who may own an existing component below a root (rule 2). Root and the daemon's effective
// uid always may.
struct OwnerPolicy {
  std::vector<uid_t> also_allowed;  // e.g. the worker user's uid

  // Root, the daemon's user and, when ScopedFsIdentity switched this thread to a worker's
  // file identity, that worker's uid (the thread's fsuid).
  static OwnerPolicy ForThisThread();
  bool Allows(uid_t uid) const;
};

// A directory opened by one of the functions below: an O_PATH descriptor (usable as the
// dirfd of the *at calls, needing only search permission on the way) and the path it was
// reached by, for messages.
struct SafeDir {
  UniqueFd fd;
  std::string path;
  // Whether the call that returned it made the last component (MakeDirsBelow,
  // MakeJobDir); false when it was there already.
  bool created = false;
};

// Rule 1: opens the directory `path`, following only symlinks held by trusted directories.
// NotFound when a component is missing; PermissionDenied for a refused symlink.
Result<SafeDir> OpenTrustedDir(const std::string& path);
// Rule 1 with creation (mkdir -p): missing components are created with `mode` (less the
// umask); existing directories keep their mode.
Result<SafeDir> MakeTrustedDirs(const std::string& path, mode_t mode);

// Rule 2: opens (OpenDirBelow) or creates (MakeDirsBelow, mkdir -p with `mode`) the
// relative path `rel` below `root`, refusing a symlink at any component and an existing
// component whose owner `owners` does not allow. `rel` must not contain "..". An empty
// `rel` (or ".") returns a new descriptor of `root` itself.
Result<SafeDir> OpenDirBelow(const SafeDir& root, const std::string& rel,
                             const OwnerPolicy& owners);
Result<SafeDir> MakeDirsBelow(const SafeDir& root, const std::string& rel, mode_t mode,
                              const OwnerPolicy& owners);

// Rule 1 for the parent of `path`, rule 2 for its last component: opens or creates the
// directory `path` as a job's own, e.g. MakeJobDir("/tmp/mnist-j1") trusts /tmp (created
// when missing) and refuses a planted /tmp/mnist-j1 symlink or one owned by a stranger.
Result<SafeDir> OpenJobDir(const std::string& path, const OwnerPolicy& owners);
Result<SafeDir> MakeJobDir(const std::string& path, mode_t mode, const OwnerPolicy& owners);

// A descriptor of `dir` that can be read (getdents) and fsynced, unlike an O_PATH one.
Result<UniqueFd> ReopenDirForReading(const SafeDir& dir);
// fsync(2) of a directory reached through SafeDir.
Status FsyncSafeDir(const SafeDir& dir);
// fsync(2) of the regular file `name` in `dir` (opened O_NOFOLLOW: a symlink there is
// refused, never followed).
Status FsyncFileAt(const SafeDir& dir, const std::string& name);

// rm -rf of the entry `name` of `dir`: never follows a symlink, at no depth (a symlink is
// removed as an entry, its target untouched); each directory is entered with
// openat(O_NOFOLLOW) relative to its parent's descriptor, so replacing a component while
// the walk runs cannot move it elsewhere. OK when `name` does not exist.
Status RemoveAllAt(const SafeDir& dir, const std::string& name);
// rm -rf `path`: rule 1 for its parent, then RemoveAllAt. OK when the path (or its parent)
// does not exist. Refuses "/", "." and ".." as the last component.
Status RemoveAllNoFollow(const std::string& path);

// Changes the owner of the entry `name` of `dir` (a directory or a regular file) without
// following a symlink: the entry is opened O_PATH|O_NOFOLLOW and changed through that
// descriptor (fchownat AT_EMPTY_PATH). Refuses a symlink, any other file type, a regular
// file with more than one link (a hard link to someone else's file), and an entry whose
// current owner `owners` does not allow (besides `uid`, which it is being given to).
Status ChownEntryNoFollow(const SafeDir& dir, const std::string& name, uid_t uid, gid_t gid,
                          const OwnerPolicy& owners);
// The same for a directory already opened (e.g. by MakeDirsBelow).
Status ChownDirNoFollow(const SafeDir& dir, uid_t uid, gid_t gid, const OwnerPolicy& owners);
// ChownEntryNoFollow for `path`: rule 1 for its parent.
Status ChownNoFollow(const std::string& path, uid_t uid, gid_t gid, const OwnerPolicy& owners);

// Moves the regular file `from_name` of `from` to `to_name` of `to` (renameat). Refuses a
// source that is not a regular file (a symlink above all) and an existing target that is
// a symlink or a directory; an existing regular target is replaced. Sets *size to the
// file's size when not null.
Status RenameFileNoFollow(const SafeDir& from, const std::string& from_name, const SafeDir& to,
                          const std::string& to_name, int64_t* size = nullptr);

// Opens `path` for appending (a log file), created with `mode` when missing; rule 1 for its
// parent. Never follows a symlink at the file (O_NOFOLLOW), never blocks on a FIFO
// (O_NONBLOCK while opening), and refuses an existing entry that is not a regular file,
// has more than one link, or is owned by anyone but root or the daemon's user.
Result<UniqueFd> OpenAppendNoFollow(const std::string& path, mode_t mode);

// WriteFileAtomic (temp + fsync + rename + fsync of the directory) into `dir`, the temp
// file created O_EXCL|O_NOFOLLOW; the rename replaces a symlink at `name`, never follows it.
Status WriteFileAtomicAt(const SafeDir& dir, const std::string& name, const std::string& data,
                         mode_t mode);

// Entry `name` of `dir` examined without following a symlink (fstatat AT_SYMLINK_NOFOLLOW);
// NotFound when absent.
Result<struct stat> StatEntryNoFollow(const SafeDir& dir, const std::string& name);

// Names of the entries of `dir` ("." and ".." excluded), unsorted.
Result<std::vector<std::string>> ListDir(const SafeDir& dir);

// Relative paths (sorted) of the regular files below `dir`. Refuses a symlink anywhere
// below it; skips other special files (FIFOs, sockets, devices).
Result<std::vector<std::string>> ListFilesNoFollow(const SafeDir& dir);

// The last component of `path` ("a/b/c" -> "c"; trailing slashes ignored).
std::string BaseName(const std::string& path);

}  // namespace traintl
