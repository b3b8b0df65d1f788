// CheckpointSnapshot: a point-in-time copy of a checkpoint directory that an asynchronous
// report (traintl_host_api.report_async) takes before it returns, so that the training
// loop may overwrite or delete its files at once while the worker persists them into the
// staging dir in the background.
//
// Per file, the cheapest copy the file systems allow:
//  - a copy-on-write clone (ioctl FICLONE) straight into the staging dir, when the source
//    and the staging dir share a file system that can (btrfs, XFS, bcachefs, ...): no data
//    moves now nor later;
//  - otherwise a copy into an unlinked file on a tmpfs (O_TMPFILE in SnapshotOptions::
//    memory_dir, /dev/shm by default). The file has no name, so the kernel frees it when
//    the last descriptor closes: when this object is destroyed, and also when the process
//    dies however it dies (kill -9 included) - nothing is ever left for anyone to clean up.
//    Persist() later writes these files into the staging dir.
// The memory copy is bounded: before each file, the tmpfs must keep memory_reserve_bytes
// free after it; when it would not (or a write fails with ENOSPC), Take fails with
// ResourceExhausted, having removed what it did, and the caller falls back to the
// synchronous copy.
//
// Thread-safety: Take is a free function; a snapshot is used by one thread at a time
// (handing it to another thread needs the usual happens-before).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/status.h"

namespace traintl {
namespace worker {

struct SnapshotOptions {
  // The tmpfs that holds the files no clone could take. Default: /dev/shm.
  std::string memory_dir = "/dev/shm";
  // Bytes the memory dir must still have free once a file is copied into it (other ranks,
  // other programs' shared memory). Default: 64 MiB.
  uint64_t memory_reserve_bytes = uint64_t{64} << 20;
  // Clones `src_fd` into `dst_fd` (both regular files), returning 0 or -1 with errno. Default
  // (empty): ioctl(dst_fd, FICLONE, src_fd). A test seam; nullptr-like empty function = the
  // default, and a function that always fails with EOPNOTSUPP forces the memory copy.
  std::function<int(int dst_fd, int src_fd)> clone;
  // Test only: sleep this long per MiB written by Persist, so that a test can kill the
  // process in the middle of the background write. Default: 0. (The worker sets it from
  // TRAINTL_TEST_UPLOAD_DELAY_MS_PER_MIB; see WorkerHost.)
  int persist_delay_ms_per_mib = 0;
};

class CheckpointSnapshot {
 public:
  // Snapshots every regular file below `src` (symlinks followed, other special files
  // skipped, as CopyTree does) for `dst`, which is removed first if it exists and then
  // created. InvalidArgument when `src` is not a directory; ResourceExhausted when the
  // memory dir lacks room (the message says how much); Internal for I/O errors. On error
  // nothing is left in `dst` (it is removed) nor in memory.
  static Result<std::unique_ptr<CheckpointSnapshot>> Take(const std::string& src,
                                                          const std::string& dst,
                                                          const SnapshotOptions& options);
  ~CheckpointSnapshot();
  CheckpointSnapshot(const CheckpointSnapshot&) = delete;
  CheckpointSnapshot& operator=(const CheckpointSnapshot&) = delete;

  // Writes the files held in memory into dst (not fsynced: the head's merge makes what it
  // commits durable), and frees their memory. Call once. `cancelled`, polled between
  // chunks, ends it early with Cancelled-like Unavailable.
  Status Persist(const std::function<bool()>& cancelled = nullptr);

  const std::string& dst() const { return dst_; }
  size_t files() const { return files_; }
  // Bytes cloned into dst, and bytes copied into memory (the latter is what Persist writes).
  uint64_t cloned_bytes() const { return cloned_bytes_; }
  uint64_t memory_bytes() const { return memory_bytes_; }

 private:
  struct MemoryFile {
    std::string rel;  // path below dst
    int fd = -1;      // the unlinked tmpfs file
    uint64_t size = 0;
  };
  CheckpointSnapshot(std::string dst, SnapshotOptions options)
      : dst_(std::move(dst)), options_(std::move(options)) {}
  void CloseMemoryFiles();

  // Constant after Take.
  const std::string dst_;
  const SnapshotOptions options_;
  size_t files_ = 0;
  uint64_t cloned_bytes_ = 0;
  uint64_t memory_bytes_ = 0;
  std::vector<MemoryFile> memory_files_;  // emptied by Persist
};

// Copies `size` bytes from `in` (offset 0) to `out` (at its offset), in the kernel where it
// can (copy_file_range, then sendfile), else by read/write. `after_chunk(bytes_so_far)`
// runs after every chunk (up to `chunk` bytes; default 8 MiB) and may stop the copy by
// returning false (the result is then Unavailable). Exposed for the snapshot's tests and
// bench/checkpoint_async.
Status CopyFileContents(int in, int out, uint64_t size,
                        const std::function<bool(uint64_t)>& after_chunk = nullptr,
                        uint64_t chunk = uint64_t{8} << 20);

}  // namespace worker
}  // namespace traintl
