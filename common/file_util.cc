#include "common/file_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include "common/safe_fs.h"
#include "common/utf8.h"

namespace traintl {
namespace {

std::string Errno(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

Status WriteAll(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::Internal(Errno("write", path));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

// Reads `fd` to its end (closing it), refusing more than `max_bytes`.
Result<std::string> ReadToEnd(int fd, const std::string& path, size_t max_bytes,
                              size_t expected = 0) {
  std::string out;
  out.reserve(expected);
  char buf[65536];
  for (;;) {
    ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0) {
      if (errno == EINTR) continue;
      Status err = Status::Internal(Errno("read", path));
      ::close(fd);
      return err;
    }
    if (r == 0) break;
    if (out.size() + static_cast<size_t>(r) > max_bytes) {
      ::close(fd);
      return Status::ResourceExhausted(path + ": more than the limit of " +
                                       std::to_string(max_bytes) + " bytes");
    }
    out.append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  return out;
}

const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

}  // namespace

Result<std::string> ReadFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound(Errno("open", path));
    return Status::Internal(Errno("open", path));
  }
  return ReadToEnd(fd, path, std::numeric_limits<size_t>::max());
}

Result<std::string> ReadRegularFile(const std::string& path, size_t max_bytes) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound(Errno("open", path));
    return Status::Internal(Errno("open", path));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    Status err = Status::Internal(Errno("stat", path));
    ::close(fd);
    return err;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument(path + ": not a regular file (" + FileKind(st.st_mode) + ")");
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return Status::ResourceExhausted(path + ": " + std::to_string(st.st_size) +
                                     " bytes, more than the limit of " + std::to_string(max_bytes));
  }
  // Checked again while reading: the file may grow meanwhile.
  return ReadToEnd(fd, path, max_bytes, static_cast<size_t>(st.st_size));
}

Status WriteFileAtomic(const std::string& path, const std::string& data, mode_t mode) {
  const std::string tmp = path + TempSuffix();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return Status::Internal(Errno("create", tmp));
  Status st = WriteAll(fd, data.data(), data.size(), tmp);
  if (st.ok() && ::fchmod(fd, mode) != 0) st = Status::Internal(Errno("chmod", tmp));
  if (st.ok() && ::fsync(fd) != 0) st = Status::Internal(Errno("fsync", tmp));
  ::close(fd);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0)
    st = Status::Internal(Errno("rename", tmp));
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  return FsyncDir(DirName(path));
}

Status MakeDirs(const std::string& path, mode_t mode) {
  if (path.empty()) return Status::InvalidArgument("empty path");
  // Component by component, following only symlinks that root or this user put there
  // (common/safe_fs.h, rule 1): a link planted in /tmp or a worker's directory is refused.
  TRAINTL_ASSIGN_OR_RETURN(SafeDir dir, MakeTrustedDirs(path, mode));
  (void)dir;
  return Status::Ok();
}

Status FsyncDir(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::Internal(Errno("open dir", path));
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return Status::Internal(Errno("fsync dir", path));
  return Status::Ok();
}

Status FsyncFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Internal(Errno("open", path));
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return Status::Internal(Errno("fsync", path));
  return Status::Ok();
}

Status RemoveAll(const std::string& path) {
  // Never follows a symlink below the path's parent, nor one planted above it
  // (common/safe_fs.h): the daemon deletes in directories that workers write.
  return RemoveAllNoFollow(path);
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// `durable`: fsync the copy.
static Status CopyFile(const std::string& src, const std::string& dst, bool durable) {
  int in = ::open(src.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return Status::Internal(Errno("open", src));
  // O_NOFOLLOW: a symlink planted at the destination must not redirect the copy.
  int out = ::open(dst.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (out < 0) {
    Status st = Status::Internal(Errno("create", dst));
    ::close(in);
    return st;
  }
  Status st;
  // In the kernel first (no trip through user space; a reflink where the filesystem can);
  // read/write where it cannot (another filesystem on older kernels, special files).
  // Nothing copied at all also falls back: some filesystems report 0 for files whose
  // size they do not know.
  bool in_kernel = true;
  size_t copied = 0;
  for (;;) {
    ssize_t r = ::copy_file_range(in, nullptr, out, nullptr, size_t{1} << 30, 0);
    if (r > 0) {
      copied += static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    in_kernel = r == 0 && copied > 0;
    break;
  }
  if (!in_kernel) {
    // Nothing was copied (copy_file_range fails at the start or not at all), or start over.
    if (::lseek(in, 0, SEEK_SET) != 0 || ::ftruncate(out, 0) != 0 || ::lseek(out, 0, SEEK_SET) != 0)
      st = Status::Internal(Errno("rewind", dst));
    char buf[1 << 16];
    while (st.ok()) {
      ssize_t r = ::read(in, buf, sizeof buf);
      if (r < 0) {
        if (errno == EINTR) continue;
        st = Status::Internal(Errno("read", src));
        break;
      }
      if (r == 0) break;
      st = WriteAll(out, buf, static_cast<size_t>(r), dst);
    }
  }
  if (st.ok() && durable && ::fsync(out) != 0) st = Status::Internal(Errno("fsync", dst));
  ::close(in);
  ::close(out);
  return st;
}

Result<std::vector<std::string>> ListFilesRecursive(const std::string& dir) {
  std::vector<std::string> out;
  std::function<Status(const std::string&)> walk = [&](const std::string& rel) -> Status {
    const std::string full = rel.empty() ? dir : dir + "/" + rel;
    DIR* d = ::opendir(full.c_str());
    if (d == nullptr) return Status::NotFound(Errno("opendir", full));
    std::vector<std::string> names;
    while (struct dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    ::closedir(d);
    for (const auto& n : names) {
      const std::string r = rel.empty() ? n : rel + "/" + n;
      struct stat st;
      if (::stat((dir + "/" + r).c_str(), &st) != 0) continue;
      if (S_ISDIR(st.st_mode)) {
        TRAINTL_RETURN_IF_ERROR(walk(r));
      } else if (S_ISREG(st.st_mode)) {
        out.push_back(r);
      }
    }
    return Status::Ok();
  };
  TRAINTL_RETURN_IF_ERROR(walk(""));
  std::sort(out.begin(), out.end());
  return out;
}

static Status CopyTreeImpl(const std::string& src, const std::string& dst, bool durable) {
  if (!IsDirectory(src)) return Status::NotFound(src + " is not a directory");
  TRAINTL_ASSIGN_OR_RETURN(std::vector<std::string> files, ListFilesRecursive(src));
  TRAINTL_RETURN_IF_ERROR(MakeDirs(dst));
  std::vector<std::string> dirs{dst};
  for (const auto& rel : files) {
    const std::string target = dst + "/" + rel;
    const std::string parent = DirName(target);
    if (parent != dst) {
      TRAINTL_RETURN_IF_ERROR(MakeDirs(parent));
      // Every directory between dst and the file must be durable, not just the parent.
      for (std::string d = parent; d.size() > dst.size(); d = DirName(d)) dirs.push_back(d);
    }
    TRAINTL_RETURN_IF_ERROR(CopyFile(src + "/" + rel, target, durable));
  }
  if (!durable) return Status::Ok();
  std::sort(dirs.begin(), dirs.end());
  dirs.erase(std::unique(dirs.begin(), dirs.end()), dirs.end());
  for (const auto& d : dirs) TRAINTL_RETURN_IF_ERROR(FsyncDir(d));
  return FsyncDir(DirName(dst));
}

Status CopyTreeDurably(const std::string& src, const std::string& dst) {
  return CopyTreeImpl(src, dst, /*durable=*/true);
}

Status CopyTree(const std::string& src, const std::string& dst) {
  return CopyTreeImpl(src, dst, /*durable=*/false);
}

std::string DirName(const std::string& path) {
  size_t p = path.find_last_of('/');
  if (p == std::string::npos) return ".";
  if (p == 0) return "/";
  return path.substr(0, p);
}

std::string JoinPath(const std::string& a, const std::string& b) {
  if (a.empty() || (!b.empty() && b[0] == '/')) return b;
  if (a.back() == '/') return a + b;
  return a + "/" + b;
}

std::string AbsolutePath(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  char buf[4096];
  if (::getcwd(buf, sizeof buf) == nullptr) return path;
  return JoinPath(buf, path);
}

std::string TailFile(const std::string& path, size_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return "";
  }
  off_t size = st.st_size;
  off_t start = size > static_cast<off_t>(max_bytes) ? size - static_cast<off_t>(max_bytes) : 0;
  std::string out(static_cast<size_t>(size - start), '\0');
  ssize_t r = ::pread(fd, out.data(), out.size(), start);
  ::close(fd);
  if (r < 0) return "";
  out.resize(static_cast<size_t>(r));
  if (start > 0) {
    size_t nl = out.find('\n');
    if (nl != std::string::npos && nl + 1 < out.size()) out = out.substr(nl + 1);
  }
  return ToValidUtf8(out);
}

std::string TempSuffix() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  char buf[40];
  std::snprintf(buf, sizeof buf, ".tmp-%d-%08llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(rng() & 0xffffffffULL));
  return buf;
}

}  // namespace traintl
