#include "worker/checkpoint_snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

#include "common/file_util.h"

namespace traintl {
namespace worker {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

std::string Errno(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// An unlinked file in `dir`: O_TMPFILE where the file system has it (tmpfs does since
// Linux 3.11), else a named file unlinked at once (the name exists for microseconds).
Result<int> OpenUnlinked(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
    return Status::Internal(Errno("open (O_TMPFILE) in", dir));
  static std::atomic<uint64_t> counter{0};
  const std::string path = dir + "/traintl-snapshot-" + std::to_string(::getpid()) + "-" +
                           std::to_string(counter.fetch_add(1));
  fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Internal(Errno("create", path));
  ::unlink(path.c_str());
  return fd;
}

Status NoRoom(const std::string& dir, uint64_t need, uint64_t free_bytes, uint64_t reserve) {
  return Status::ResourceExhausted(
      dir + " has " + std::to_string(free_bytes / kMiB) + " MiB free; the snapshot needs " +
      std::to_string((need + kMiB - 1) / kMiB) + " MiB more and keeps " +
      std::to_string(reserve / kMiB) + " MiB free");
}

}  // namespace

Status CopyFileContents(int in, int out, uint64_t size,
                        const std::function<bool(uint64_t)>& after_chunk, uint64_t chunk) {
  off_t off = 0;
  // 0: copy_file_range, 1: sendfile, 2: read/write. copy_file_range fails with EXDEV across
  // file systems of different types (tmpfs <-> ext4 since Linux 5.19); sendfile takes a
  // page cache to any file; read/write takes anything.
  int method = 0;
  std::vector<char> buffer;
  while (static_cast<uint64_t>(off) < size) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(chunk, size - off));
    ssize_t n = -1;
    if (method == 0) {
      n = ::copy_file_range(in, &off, out, nullptr, want, 0);
      if (n < 0 && errno != EINTR && errno != ENOSPC && errno != EIO && errno != EDQUOT) {
        method = 1;
        continue;
      }
    } else if (method == 1) {
      n = ::sendfile(out, in, &off, want);
      if (n < 0 && (errno == EINVAL || errno == ENOSYS)) {
        method = 2;
        continue;
      }
    } else {
      if (buffer.size() < want) buffer.resize(want);
      n = ::pread(in, buffer.data(), want, off);
      if (n > 0) {
        ssize_t done = 0;
        while (done < n) {
          const ssize_t w = ::write(out, buffer.data() + done, static_cast<size_t>(n - done));
          if (w < 0 && errno == EINTR) continue;
          if (w < 0) return Status::Internal(std::string("write: ") + std::strerror(errno));
          done += w;
        }
        off += n;
      }
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == ENOSPC || errno == EDQUOT)
        return Status::ResourceExhausted(std::string("copy: ") + std::strerror(errno));
      return Status::Internal(std::string("copy: ") + std::strerror(errno));
    }
    if (n == 0) {
      // The source shrank under us (the user changed the file while reporting it).
      return Status::Internal("copy: the file ended after " + std::to_string(off) + " of " +
                              std::to_string(size) + " bytes (was it changed while reported?)");
    }
    if (after_chunk && !after_chunk(static_cast<uint64_t>(off)))
      return Status::Unavailable("copy cancelled");
  }
  return Status::Ok();
}

Result<std::unique_ptr<CheckpointSnapshot>> CheckpointSnapshot::Take(
    const std::string& src, const std::string& dst, const SnapshotOptions& options) {
  if (!IsDirectory(src)) {
    return Status::InvalidArgument("checkpoint directory " + src +
                                   " does not exist or is not a directory");
  }
  TRAINTL_ASSIGN_OR_RETURN(std::vector<std::string> files, ListFilesRecursive(src));
  // Only a leftover of a crashed copy can be there; never merge with it.
  TRAINTL_RETURN_IF_ERROR(RemoveAll(dst));
  TRAINTL_RETURN_IF_ERROR(MakeDirs(dst));
  std::unique_ptr<CheckpointSnapshot> snap(new CheckpointSnapshot(dst, options));
  auto fail = [&](Status st) -> Status {
    snap->CloseMemoryFiles();
    (void)RemoveAll(dst);
    return st;
  };
  for (const auto& rel : files) {
    const std::string from = src + "/" + rel;
    const std::string to = dst + "/" + rel;
    Fd in(::open(from.c_str(), O_RDONLY | O_CLOEXEC));
    if (in.get() < 0) return fail(Status::Internal(Errno("open", from)));
    struct stat st;
    if (::fstat(in.get(), &st) != 0) return fail(Status::Internal(Errno("stat", from)));
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (DirName(to) != dst) {
      if (Status made = MakeDirs(DirName(to)); !made.ok()) return fail(made);
    }
    ++snap->files_;
    {
      // O_NOFOLLOW: a symlink planted at the destination must not redirect the clone.
      Fd out(::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644));
      if (out.get() < 0) return fail(Status::Internal(Errno("create", to)));
      const int cloned = options.clone ? options.clone(out.get(), in.get())
                                       : ::ioctl(out.get(), FICLONE, in.get());
      if (cloned == 0) {
        snap->cloned_bytes_ += size;
        continue;
      }
    }
    // No clone (another file system, or one without reflinks): the empty file stays as a
    // placeholder that Persist fills.
    struct statvfs vfs;
    if (::statvfs(options.memory_dir.c_str(), &vfs) != 0)
      return fail(Status::ResourceExhausted(Errno("statvfs", options.memory_dir)));
    const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    if (free_bytes < size + options.memory_reserve_bytes)
      return fail(NoRoom(options.memory_dir, size, free_bytes, options.memory_reserve_bytes));
    Result<int> mem = OpenUnlinked(options.memory_dir);
    if (!mem.ok()) return fail(mem.status());
    snap->memory_files_.push_back({rel, *mem, size});
    Status copied = CopyFileContents(in.get(), *mem, size);
    if (!copied.ok()) {
      if (copied.code() == Status::Code::kResourceExhausted)
        return fail(NoRoom(options.memory_dir, size, free_bytes, options.memory_reserve_bytes));
      return fail(Status(copied.code(), "snapshot of " + from + ": " + copied.message()));
    }
    snap->memory_bytes_ += size;
  }
  return snap;
}

CheckpointSnapshot::~CheckpointSnapshot() { CloseMemoryFiles(); }

void CheckpointSnapshot::CloseMemoryFiles() {
  for (auto& f : memory_files_) {
    if (f.fd >= 0) ::close(f.fd);
  }
  memory_files_.clear();
}

Status CheckpointSnapshot::Persist(const std::function<bool()>& cancelled) {
  const int delay = options_.persist_delay_ms_per_mib;
  for (auto& f : memory_files_) {
    const std::string to = dst_ + "/" + f.rel;
    // The placeholder Take created; O_NOFOLLOW as there.
    Fd out(::open(to.c_str(), O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC));
    if (out.get() < 0) return Status::Internal(Errno("open", to));
    uint64_t delayed_mib = 0;
    Status st = CopyFileContents(
        f.fd, out.get(), f.size,
        [&](uint64_t done) {
          if (delay > 0) {
            const uint64_t mib = done / kMiB;
            std::this_thread::sleep_for(std::chrono::milliseconds(delay * (mib - delayed_mib)));
            delayed_mib = mib;
          }
          return !(cancelled && cancelled());
        },
        delay > 0 ? kMiB : uint64_t{8} << 20);
    if (!st.ok()) return Status(st.code(), "writing " + to + ": " + st.message());
    ::close(f.fd);  // its memory goes now, not at the end of the whole checkpoint
    f.fd = -1;
  }
  memory_files_.clear();
  return Status::Ok();
}

}  // namespace worker
}  // namespace traintl
