#include "common/safe_fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/fsuid.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>

#include "common/file_util.h"

namespace traintl {
namespace {

// Most symlinks the trusted-prefix walk follows for one path, as the kernel's own limit.
constexpr int kMaxSymlinks = 40;
// How often an operation re-examines an entry that another process keeps replacing.
constexpr int kMaxRetries = 4;
// How deep RemoveEntry and ListFilesWalk go below where they start. They recurse, with a
// descriptor open per level: a tree a worker made 50,000 levels deep would overflow the
// stack (of a root daemon) or exhaust its descriptors. No checkpoint or staging tree is
// anywhere near this deep; a deeper one is an error, and stays where it is.
constexpr int kMaxTreeDepth = 256;

Status TooDeep(const std::string& path) {
  return Status::InvalidArgument("refusing to go below " + path + ": more than " +
                                 std::to_string(kMaxTreeDepth) + " levels deep");
}

// A Status for a failed system call, with a code callers can tell apart.
Status ErrnoStatus(int err, const std::string& what, const std::string& path) {
  std::string m = what + " " + path + ": " + std::strerror(err);
  switch (err) {
    case ENOENT:
      return Status::NotFound(std::move(m));
    case EACCES:
    case EPERM:
      return Status::PermissionDenied(std::move(m));
    case ENOTDIR:
    case EISDIR:
      return Status::FailedPrecondition(std::move(m));
    default:
      return Status::Internal(std::move(m));
  }
}

Status SymlinkRefused(const std::string& path) {
  return Status::PermissionDenied("refusing to follow a symlink at " + path);
}

std::string Join(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

// Components of a path, without empty ones and ".".
std::vector<std::string> Split(const std::string& path) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t next = path.find('/', pos);
    if (next == std::string::npos) next = path.size();
    std::string c = path.substr(pos, next - pos);
    if (!c.empty() && c != ".") out.push_back(std::move(c));
    pos = next + 1;
  }
  return out;
}

std::string TrimTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// Whether only root or the daemon's user can have created or replaced the entries of the
// directory `fd` (rule 1): owned by one of them, not writable by others, writable by the
// group only when the group is root's or the daemon's.
bool IsTrustedDir(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return false;
  if (st.st_uid != 0 && st.st_uid != ::geteuid()) return false;
  if (st.st_mode & S_IWOTH) return false;
  if ((st.st_mode & S_IWGRP) && st.st_gid != 0 && st.st_gid != ::getegid()) return false;
  return true;
}

Result<std::string> ReadLinkAt(int dirfd, const std::string& name, const std::string& shown) {
  std::string buf(256, '\0');
  for (;;) {
    ssize_t n = ::readlinkat(dirfd, name.c_str(), buf.data(), buf.size());
    if (n < 0) return ErrnoStatus(errno, "readlink", shown);
    if (static_cast<size_t>(n) < buf.size()) {
      buf.resize(static_cast<size_t>(n));
      return buf;
    }
    if (buf.size() > 65536) return Status::InvalidArgument("symlink target too long at " + shown);
    buf.resize(buf.size() * 2);
  }
}

Result<UniqueFd> OpenRoot() {
  int fd = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "open", "/");
  return UniqueFd(fd);
}

// Rule 1 (see the header): resolves `path` from "/", following a symlink only where a
// trusted directory holds it; creates missing components with `mode` when `create`.
Result<SafeDir> WalkTrusted(const std::string& path, bool create, mode_t mode) {
  if (path.empty()) return Status::InvalidArgument("empty path");
  const std::string abs = TrimTrailingSlashes(AbsolutePath(path));
  std::vector<std::string> parts = Split(abs);
  std::deque<std::string> todo(parts.begin(), parts.end());
  TRAINTL_ASSIGN_OR_RETURN(UniqueFd cur, OpenRoot());
  std::string shown = "/";  // where `cur` is, as resolved so far (for messages)
  int links = 0;
  int creates = 0;
  while (!todo.empty()) {
    const std::string name = std::move(todo.front());
    todo.pop_front();
    const std::string here = name == ".." ? DirName(shown) : Join(shown, name);
    int fd = ::openat(cur.get(), name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      cur = UniqueFd(fd);
      shown = here;
      continue;
    }
    const int open_err = errno;
    struct stat st;
    if (::fstatat(cur.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT && create && ++creates <= 4 * static_cast<int>(parts.size()) + 8) {
        if (::mkdirat(cur.get(), name.c_str(), mode) != 0 && errno != EEXIST)
          return ErrnoStatus(errno, "mkdir", here);
        todo.push_front(name);  // open what is there now
        continue;
      }
      return ErrnoStatus(errno, "stat", here);
    }
    if (S_ISLNK(st.st_mode)) {
      if (!IsTrustedDir(cur.get())) {
        return Status::PermissionDenied("refusing to follow a symlink at " + here +
                                        " (its directory is writable by users other than "
                                        "root and the daemon's)");
      }
      if (++links > kMaxSymlinks) return Status::InvalidArgument("too many symlinks in " + path);
      TRAINTL_ASSIGN_OR_RETURN(std::string target, ReadLinkAt(cur.get(), name, here));
      if (target.empty()) return Status::InvalidArgument("empty symlink at " + here);
      std::vector<std::string> tparts = Split(target);
      todo.insert(todo.begin(), tparts.begin(), tparts.end());
      if (target[0] == '/') {
        TRAINTL_ASSIGN_OR_RETURN(cur, OpenRoot());
        shown = "/";
      }
      continue;
    }
    if (!S_ISDIR(st.st_mode)) return Status::FailedPrecondition(here + " is not a directory");
    // Created between the open and the stat (ranks make the same seq_K dir at once): open
    // it again, a bounded number of times.
    if (open_err == ENOENT && ++creates <= 4 * static_cast<int>(parts.size()) + 8) {
      todo.push_front(name);
      continue;
    }
    return ErrnoStatus(open_err, "open", here);
  }
  return SafeDir{std::move(cur), abs};
}

// Rule 2 (see the header) below `root`.
Result<SafeDir> WalkBelow(const SafeDir& root, const std::string& rel, bool create, mode_t mode,
                          const OwnerPolicy& owners) {
  const std::vector<std::string> parts = Split(rel);
  if (!rel.empty() && rel[0] == '/') return Status::InvalidArgument("not a relative path: " + rel);
  if (std::find(parts.begin(), parts.end(), "..") != parts.end())
    return Status::InvalidArgument("'..' in " + rel);
  int fd0 = ::openat(root.fd.get(), ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd0 < 0) return ErrnoStatus(errno, "open", root.path);
  UniqueFd cur(fd0);
  std::string shown = root.path;
  bool made = false;
  for (const std::string& name : parts) {
    const std::string here = Join(shown, name);
    int fd = -1;
    made = false;
    for (int tries = 0;; ++tries) {
      fd = ::openat(cur.get(), name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd >= 0) break;
      const int open_err = errno;
      struct stat st;
      if (::fstatat(cur.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT && create && tries < kMaxRetries) {
          if (::mkdirat(cur.get(), name.c_str(), mode) == 0) {
            made = true;
          } else if (errno != EEXIST) {
            return ErrnoStatus(errno, "mkdir", here);
          }
          continue;
        }
        return ErrnoStatus(errno, "stat", here);
      }
      if (S_ISLNK(st.st_mode)) return SymlinkRefused(here);
      if (!S_ISDIR(st.st_mode)) return Status::FailedPrecondition(here + " is not a directory");
      if (tries >= kMaxRetries) return ErrnoStatus(open_err, "open", here);
    }
    UniqueFd next(fd);
    struct stat st;
    if (::fstat(next.get(), &st) != 0) return ErrnoStatus(errno, "stat", here);
    if (!owners.Allows(st.st_uid)) {
      return Status::PermissionDenied("refusing to use " + here + ": owned by uid " +
                                      std::to_string(st.st_uid) +
                                      ", not root, the daemon's user or the worker user");
    }
    cur = std::move(next);
    shown = here;
  }
  return SafeDir{std::move(cur), shown, made};
}

// Splits `path` into its parent (opened by rule 1) and last component.
Result<std::pair<SafeDir, std::string>> OpenParent(const std::string& path, bool create,
                                                   mode_t mode) {
  const std::string abs = TrimTrailingSlashes(AbsolutePath(path));
  const std::string base = BaseName(abs);
  if (abs == "/" || base.empty() || base == "." || base == "..")
    return Status::InvalidArgument("not a path to an entry: " + path);
  TRAINTL_ASSIGN_OR_RETURN(SafeDir parent, WalkTrusted(DirName(abs), create, mode));
  return std::make_pair(std::move(parent), base);
}

Status ChownFd(int fd, const std::string& shown, uid_t uid, gid_t gid, const OwnerPolicy& owners) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoStatus(errno, "stat", shown);
  if (S_ISLNK(st.st_mode)) return SymlinkRefused(shown);
  if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
    return Status::FailedPrecondition("refusing to chown " + shown + ": not a file or directory");
  // A second name means the file may be someone else's, hard-linked here to be given away.
  if (S_ISREG(st.st_mode) && st.st_nlink != 1)
    return Status::PermissionDenied("refusing to chown " + shown + ": it has " +
                                    std::to_string(st.st_nlink) + " links");
  if (st.st_uid != uid && !owners.Allows(st.st_uid)) {
    return Status::PermissionDenied("refusing to chown " + shown + ": owned by uid " +
                                    std::to_string(st.st_uid));
  }
  if (::fchownat(fd, "", uid, gid, AT_EMPTY_PATH) != 0)
    return ErrnoStatus(errno, "chown", shown + " to " + std::to_string(uid));
  return Status::Ok();
}

Status WriteAllFd(int fd, const std::string& data, const std::string& shown) {
  const char* p = data.data();
  size_t n = data.size();
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "write", shown);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

// The entries of the directory `dirfd` refers to ("." and ".." left out), read through a
// descriptor of its own (readdir consumes the one it is given).
Result<std::vector<std::string>> EntryNames(int dirfd, const std::string& shown) {
  int fd = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "open", shown);
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    Status err = ErrnoStatus(errno, "opendir", shown);
    ::close(fd);
    return err;
  }
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(std::move(n));
  }
  ::closedir(d);
  return names;
}

Status RemoveEntry(int dirfd, const std::string& dir_path, const std::string& name, int depth = 0) {
  const std::string here = Join(dir_path, name);
  // Each pass re-examines the entry: another process may replace it while we work (a
  // directory by a symlink, say); a replaced entry is examined again, never followed.
  for (int tries = 0; tries < kMaxRetries; ++tries) {
    struct stat st;
    if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) return Status::Ok();
      return ErrnoStatus(errno, "stat", here);
    }
    if (!S_ISDIR(st.st_mode)) {
      if (::unlinkat(dirfd, name.c_str(), 0) == 0 || errno == ENOENT) return Status::Ok();
      if (errno == EISDIR) continue;
      return ErrnoStatus(errno, "unlink", here);
    }
    int fd = ::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return Status::Ok();
      if (errno == ELOOP || errno == ENOTDIR) continue;
      return ErrnoStatus(errno, "open", here);
    }
    UniqueFd dir(fd);
    if (depth >= kMaxTreeDepth) return TooDeep(here);
    TRAINTL_ASSIGN_OR_RETURN(std::vector<std::string> names, EntryNames(dir.get(), here));
    // Every entry it can, then the first error: one entry it cannot remove (a tree too
    // deep) must not keep the others.
    Status first_error;
    for (const auto& n : names) {
      Status st = RemoveEntry(dir.get(), here, n, depth + 1);
      if (!st.ok() && first_error.ok()) first_error = st;
    }
    if (!first_error.ok()) return first_error;
    if (::unlinkat(dirfd, name.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT) return Status::Ok();
    if (errno == ENOTEMPTY || errno == EEXIST || errno == ENOTDIR) continue;  // changed meanwhile
    return ErrnoStatus(errno, "rmdir", here);
  }
  return Status::Internal("cannot remove " + here + ": it kept changing while being removed");
}

Status ListFilesWalk(int dirfd, const std::string& shown, const std::string& rel,
                     std::vector<std::string>* out, int depth = 0) {
  if (depth > kMaxTreeDepth) return TooDeep(shown);
  TRAINTL_ASSIGN_OR_RETURN(std::vector<std::string> names, EntryNames(dirfd, shown));
  for (const auto& n : names) {
    const std::string here = Join(shown, n);
    const std::string r = rel.empty() ? n : rel + "/" + n;
    struct stat st;
    if (::fstatat(dirfd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      return ErrnoStatus(errno, "stat", here);
    }
    if (S_ISLNK(st.st_mode)) return SymlinkRefused(here);
    if (S_ISREG(st.st_mode)) {
      out->push_back(r);
    } else if (S_ISDIR(st.st_mode)) {
      int sub = ::openat(dirfd, n.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) {
        if (errno == ELOOP || errno == ENOTDIR) return SymlinkRefused(here);
        return ErrnoStatus(errno, "open", here);
      }
      UniqueFd guard(sub);
      TRAINTL_RETURN_IF_ERROR(ListFilesWalk(sub, here, r, out, depth + 1));
    }
  }
  return Status::Ok();
}

}  // namespace

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

OwnerPolicy OwnerPolicy::ForThisThread() {
  OwnerPolicy p;
  // setfsuid(-1) changes nothing and returns the current fsuid (ScopedFsIdentity's).
  const uid_t fsuid = static_cast<uid_t>(::setfsuid(static_cast<uid_t>(-1)));
  if (fsuid != 0 && fsuid != ::geteuid()) p.also_allowed.push_back(fsuid);
  return p;
}

bool OwnerPolicy::Allows(uid_t uid) const {
  return uid == 0 || uid == ::geteuid() ||
         std::find(also_allowed.begin(), also_allowed.end(), uid) != also_allowed.end();
}

Result<SafeDir> OpenTrustedDir(const std::string& path) { return WalkTrusted(path, false, 0); }

Result<SafeDir> MakeTrustedDirs(const std::string& path, mode_t mode) {
  return WalkTrusted(path, true, mode);
}

Result<SafeDir> OpenDirBelow(const SafeDir& root, const std::string& rel,
                             const OwnerPolicy& owners) {
  return WalkBelow(root, rel, false, 0, owners);
}

Result<SafeDir> MakeDirsBelow(const SafeDir& root, const std::string& rel, mode_t mode,
                              const OwnerPolicy& owners) {
  return WalkBelow(root, rel, true, mode, owners);
}

Result<SafeDir> OpenJobDir(const std::string& path, const OwnerPolicy& owners) {
  TRAINTL_ASSIGN_OR_RETURN(auto parent, OpenParent(path, false, 0));
  return OpenDirBelow(parent.first, parent.second, owners);
}

Result<SafeDir> MakeJobDir(const std::string& path, mode_t mode, const OwnerPolicy& owners) {
  TRAINTL_ASSIGN_OR_RETURN(auto parent, OpenParent(path, true, mode));
  return MakeDirsBelow(parent.first, parent.second, mode, owners);
}

Result<UniqueFd> ReopenDirForReading(const SafeDir& dir) {
  int fd = ::openat(dir.fd.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "open", dir.path);
  return UniqueFd(fd);
}

Status FsyncSafeDir(const SafeDir& dir) {
  TRAINTL_ASSIGN_OR_RETURN(UniqueFd fd, ReopenDirForReading(dir));
  if (::fsync(fd.get()) != 0) return ErrnoStatus(errno, "fsync", dir.path);
  return Status::Ok();
}

Status FsyncFileAt(const SafeDir& dir, const std::string& name) {
  const std::string path = Join(dir.path, name);
  UniqueFd fd(::openat(dir.fd.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ELOOP) return SymlinkRefused(path);
    return ErrnoStatus(errno, "open", path);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, "stat", path);
  if (!S_ISREG(st.st_mode)) return Status::FailedPrecondition(path + " is not a regular file");
  if (::fsync(fd.get()) != 0) return ErrnoStatus(errno, "fsync", path);
  return Status::Ok();
}

Status RemoveAllAt(const SafeDir& dir, const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    return Status::InvalidArgument("not an entry name: '" + name + "'");
  return RemoveEntry(dir.fd.get(), dir.path, name);
}

Status RemoveAllNoFollow(const std::string& path) {
  auto parent = OpenParent(path, false, 0);
  if (!parent.ok()) {
    // Nothing to remove below a parent that does not exist.
    if (parent.status().code() == Status::Code::kNotFound) return Status::Ok();
    return parent.status();
  }
  return RemoveAllAt(parent->first, parent->second);
}

Status ChownEntryNoFollow(const SafeDir& dir, const std::string& name, uid_t uid, gid_t gid,
                          const OwnerPolicy& owners) {
  const std::string here = Join(dir.path, name);
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    return Status::InvalidArgument("not an entry name: '" + name + "'");
  // O_PATH|O_NOFOLLOW opens a symlink itself, which ChownFd then refuses.
  int fd = ::openat(dir.fd.get(), name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "open", here);
  UniqueFd guard(fd);
  return ChownFd(fd, here, uid, gid, owners);
}

Status ChownDirNoFollow(const SafeDir& dir, uid_t uid, gid_t gid, const OwnerPolicy& owners) {
  return ChownFd(dir.fd.get(), dir.path, uid, gid, owners);
}

Status ChownNoFollow(const std::string& path, uid_t uid, gid_t gid, const OwnerPolicy& owners) {
  TRAINTL_ASSIGN_OR_RETURN(auto parent, OpenParent(path, false, 0));
  return ChownEntryNoFollow(parent.first, parent.second, uid, gid, owners);
}

Status RenameFileNoFollow(const SafeDir& from, const std::string& from_name, const SafeDir& to,
                          const std::string& to_name, int64_t* size) {
  const std::string src = Join(from.path, from_name);
  const std::string dst = Join(to.path, to_name);
  struct stat st;
  if (::fstatat(from.fd.get(), from_name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
    return ErrnoStatus(errno, "stat", src);
  if (S_ISLNK(st.st_mode)) return SymlinkRefused(src);
  if (!S_ISREG(st.st_mode)) return Status::FailedPrecondition(src + " is not a regular file");
  struct stat tst;
  if (::fstatat(to.fd.get(), to_name.c_str(), &tst, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISLNK(tst.st_mode))
      return Status::PermissionDenied("refusing to replace a symlink at " + dst);
    if (S_ISDIR(tst.st_mode)) return Status::FailedPrecondition(dst + " is a directory");
  } else if (errno != ENOENT) {
    return ErrnoStatus(errno, "stat", dst);
  }
  if (::renameat(from.fd.get(), from_name.c_str(), to.fd.get(), to_name.c_str()) != 0)
    return ErrnoStatus(errno, "rename", src + " to " + dst);
  // The source may have been swapped between the check and the rename; what arrived must
  // be the file that was checked.
  struct stat moved;
  if (::fstatat(to.fd.get(), to_name.c_str(), &moved, AT_SYMLINK_NOFOLLOW) != 0)
    return ErrnoStatus(errno, "stat", dst);
  if (moved.st_ino != st.st_ino || moved.st_dev != st.st_dev)
    return Status::PermissionDenied(src + " was replaced while being moved to " + dst);
  if (size != nullptr) *size = static_cast<int64_t>(st.st_size);
  return Status::Ok();
}

Result<UniqueFd> OpenAppendNoFollow(const std::string& path, mode_t mode) {
  TRAINTL_ASSIGN_OR_RETURN(auto parent, OpenParent(path, false, 0));
  const std::string here = Join(parent.first.path, parent.second);
  int fd = ::openat(parent.first.fd.get(), parent.second.c_str(),
                    O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC,
                    mode);
  if (fd < 0) {
    if (errno == ELOOP) return SymlinkRefused(here);
    if (errno == ENXIO) return Status::FailedPrecondition(here + " is not a regular file");
    return ErrnoStatus(errno, "open", here);
  }
  UniqueFd out(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoStatus(errno, "stat", here);
  if (!S_ISREG(st.st_mode)) return Status::FailedPrecondition(here + " is not a regular file");
  if (st.st_nlink != 1)
    return Status::PermissionDenied("refusing to write " + here + ": it has " +
                                    std::to_string(st.st_nlink) + " links");
  if (st.st_uid != 0 && st.st_uid != ::geteuid()) {
    return Status::PermissionDenied("refusing to write " + here + ": owned by uid " +
                                    std::to_string(st.st_uid));
  }
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
    return ErrnoStatus(errno, "fcntl", here);
  return out;
}

Status WriteFileAtomicAt(const SafeDir& dir, const std::string& name, const std::string& data,
                         mode_t mode) {
  const std::string tmp = name + TempSuffix();
  const std::string shown = Join(dir.path, tmp);
  int fd = ::openat(dir.fd.get(), tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    mode);
  if (fd < 0) return ErrnoStatus(errno, "create", shown);
  Status st = WriteAllFd(fd, data, shown);
  if (st.ok() && ::fchmod(fd, mode) != 0) st = ErrnoStatus(errno, "chmod", shown);
  if (st.ok() && ::fsync(fd) != 0) st = ErrnoStatus(errno, "fsync", shown);
  ::close(fd);
  if (st.ok() && ::renameat(dir.fd.get(), tmp.c_str(), dir.fd.get(), name.c_str()) != 0)
    st = ErrnoStatus(errno, "rename", shown);
  if (!st.ok()) {
    ::unlinkat(dir.fd.get(), tmp.c_str(), 0);
    return st;
  }
  return FsyncSafeDir(dir);
}

Result<struct stat> StatEntryNoFollow(const SafeDir& dir, const std::string& name) {
  struct stat st;
  if (::fstatat(dir.fd.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
    return ErrnoStatus(errno, "stat", Join(dir.path, name));
  return st;
}

Result<std::vector<std::string>> ListDir(const SafeDir& dir) {
  return EntryNames(dir.fd.get(), dir.path);
}

Result<std::vector<std::string>> ListFilesNoFollow(const SafeDir& dir) {
  std::vector<std::string> out;
  TRAINTL_RETURN_IF_ERROR(ListFilesWalk(dir.fd.get(), dir.path, "", &out));
  std::sort(out.begin(), out.end());
  return out;
}

std::string BaseName(const std::string& path) {
  const std::string p = TrimTrailingSlashes(path);
  if (p == "/") return "";
  size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

}  // namespace traintl
