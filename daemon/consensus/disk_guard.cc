#include "daemon/consensus/disk_guard.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/logging.h"

namespace traintl {
namespace {

constexpr char kDiskFullPrefix[] = "disk full";

Result<uint64_t> StatvfsFreeBytes(const std::string& path) {
  struct statvfs st;
  if (::statvfs(path.c_str(), &st) != 0) {
    return Status::Internal("statvfs " + path + ": " + std::strerror(errno));
  }
  return static_cast<uint64_t>(st.f_bavail) * static_cast<uint64_t>(st.f_frsize);
}

std::string Mib(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }
std::string Kib(uint64_t bytes) { return std::to_string((bytes + 1023) >> 10) + " KiB"; }

}  // namespace

DiskGuard::DiskGuard(std::string path, uint64_t min_free_bytes, FreeBytesFn free_bytes)
    : path_(std::move(path)),
      min_free_bytes_(min_free_bytes),
      free_bytes_(free_bytes ? std::move(free_bytes) : FreeBytesFn(StatvfsFreeBytes)) {}

Status DiskGuard::Check(uint64_t entry_bytes) {
  if (min_free_bytes_ == 0) return Status::Ok();
  Result<uint64_t> free = free_bytes_(path_);
  if (!free.ok()) return Status::Ok();
  last_free_.store(*free);
  // Hysteresis: once full, the disk counts as full until the entry that was refused would
  // fit (a small request, or /healthz, must not flip the state back and forth).
  const uint64_t needed = std::max<uint64_t>(entry_bytes, full_.load() ? refused_bytes_.load() : 0);
  const bool full = *free < min_free_bytes_ || *free - min_free_bytes_ < needed;
  if (full) refused_bytes_.store(needed);
  const bool was_full = full_.exchange(full);
  if (full && !was_full) {
    LOG_WARN << "disk full: " << Mib(*free) << " free on the file system of " << path_
             << ", short of the reserve of " << Mib(min_free_bytes_) << " plus " << Kib(needed)
             << " to write; refusing writes until space returns";
  } else if (!full && was_full) {
    LOG_INFO << "disk space returned: " << Mib(*free) << " free on the file system of " << path_
             << "; accepting writes again";
  }
  if (!full) return Status::Ok();
  return Status::ResourceExhausted(std::string(kDiskFullPrefix) + ": " + Mib(*free) +
                                   " free on the file system of " + path_ +
                                   ", short of the reserve of " + Mib(min_free_bytes_) +
                                   " the replicated log keeps plus " + Kib(needed) + " to write");
}

Status DiskGuard::CheckOther(uint64_t bytes, const std::string& what) const {
  if (min_free_bytes_ == 0) return Status::Ok();
  Result<uint64_t> free = free_bytes_(path_);
  if (!free.ok() || (*free >= min_free_bytes_ && *free - min_free_bytes_ >= bytes)) {
    return Status::Ok();
  }
  return Status::ResourceExhausted(std::string(kDiskFullPrefix) + ": " + Mib(*free) +
                                   " free on the file system of " + path_ +
                                   ", short of the reserve of " + Mib(min_free_bytes_) +
                                   " the replicated log keeps plus " + Mib(bytes) + " for " + what);
}

DiskSpace DiskGuard::Last(bool refresh) {
  if (refresh) (void)Check(0);
  return DiskSpace{last_free_.load(), full_.load()};
}

bool IsDiskFull(const Status& st) {
  return st.code() == Status::Code::kResourceExhausted &&
         st.message().rfind(kDiskFullPrefix, 0) == 0;
}

}  // namespace traintl
