// DiskGuard: refuses new log entries while the file system of the Raft log is nearly
// full, so that an append never fails for lack of space.
//
// Why: libraft 0.15 does not survive a failed append. With the disk full, proposals
// failed with "raft: unknown error", then the daemon died with SIGSEGV inside libraft
// (4 of 4 runs). Nothing in its API reports the free space it needs, so the node checks
// before proposing: a proposal is refused (Status::ResourceExhausted, message starting
// with "disk full") while less than `min_free_bytes` + the entry's size is free. The check
// is a statvfs(2) per proposal (about a microsecond); the node recovers by itself as soon
// as space returns. Snapshots and the pre-allocated segments (8 MiB each) are what the
// reserve is for.
//
// Limits: a follower cannot refuse the leader's entries; each voter's guard protects its
// own proposals only (docs/SECURITY.md).
//
// Thread-safety: thread-safe (Check may run on any thread; the state is atomic).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "common/result.h"
#include "common/status.h"

namespace traintl {

struct DiskSpace {
  uint64_t free_bytes = 0;  // available to an unprivileged writer (f_bavail)
  bool full = false;        // below the reserve at the last check
};

class DiskGuard {
 public:
  // Free bytes of the file system holding a path; the seam tests replace.
  using FreeBytesFn = std::function<Result<uint64_t>(const std::string& path)>;

  // `min_free_bytes` 0 disables the guard. `free_bytes` defaults to statvfs(2).
  DiskGuard(std::string path, uint64_t min_free_bytes, FreeBytesFn free_bytes = nullptr);

  // OK when `entry_bytes` more may be written; ResourceExhausted "disk full: ..." otherwise.
  // Once full, it stays full until the largest refused entry would fit again, whatever
  // the size asked for now. Logs a warning when the disk becomes full and a notice when
  // space returns (once per transition). A failed statvfs allows the write (the append
  // itself reports real errors).
  Status Check(uint64_t entry_bytes);

  // OK when `bytes` written to this file system by something else (a library upload) would
  // leave the reserve; ResourceExhausted "disk full: ..." otherwise. Unlike Check it
  // changes nothing: a refused upload must not make the log refuse its next entries.
  Status CheckOther(uint64_t bytes, const std::string& what) const;

  // The result of the last Check (a fresh one when `refresh`).
  DiskSpace Last(bool refresh = false);

  uint64_t min_free_bytes() const { return min_free_bytes_; }
  const std::string& path() const { return path_; }

 private:
  // Constant after construction.
  const std::string path_;
  const uint64_t min_free_bytes_;
  const FreeBytesFn free_bytes_;

  std::atomic<uint64_t> last_free_{0};
  std::atomic<bool> full_{false};
  std::atomic<uint64_t> refused_bytes_{0};  // the entry that made it full
};

// True for the Status a DiskGuard refuses with.
bool IsDiskFull(const Status& st);

}  // namespace traintl
