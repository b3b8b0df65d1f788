#include "common/lease_clock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace traintl {
namespace {

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

void WriteStderr(const std::string& line) {
  std::string text = "traintl-worker: " + line + "\n";
  ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());
  (void)ignored;
}

}  // namespace

int64_t MonotonicMs() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

LeaseClock::~LeaseClock() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  if (value_ != nullptr) ::munmap(value_, sizeof(int64_t));
  if (fd_ >= 0) ::close(fd_);
  if (ro_fd_ >= 0) ::close(ro_fd_);
}

Status LeaseClock::Start() {
  fd_ = ::memfd_create("traintl-lease", MFD_CLOEXEC);
  if (fd_ < 0) return Status::Internal(Errno("memfd_create"));
  if (::ftruncate(fd_, sizeof(int64_t)) != 0) return Status::Internal(Errno("ftruncate"));
  void* p = ::mmap(nullptr, sizeof(int64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) return Status::Internal(Errno("mmap"));
  value_ = static_cast<int64_t*>(p);
  __atomic_store_n(value_, MonotonicMs(), __ATOMIC_RELEASE);
  // A descriptor of its own, opened read-only: a worker cannot write through it.
  const std::string self = "/proc/self/fd/" + std::to_string(fd_);
  ro_fd_ = ::open(self.c_str(), O_RDONLY | O_CLOEXEC);
  if (ro_fd_ < 0) return Status::Internal(Errno("reopen " + self + " read-only"));
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

void LeaseClock::Run() {
  while (!stop_.load()) {
    if (!paused_.load()) {
      __atomic_store_n(value_, MonotonicMs(), __ATOMIC_RELEASE);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(kTickMs));
  }
}

Status StartLeaseWatchdog(int fd, int64_t lease_ms, const std::string& cgroup_kill) {
  void* p = ::mmap(nullptr, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Status::Internal(Errno("mapping the lease clock"));
  const auto* value = static_cast<const int64_t*>(p);
  std::thread([value, lease_ms, cgroup_kill] {
    const auto poll = std::chrono::milliseconds(std::clamp<int64_t>(lease_ms / 10, 10, 100));
    for (;;) {
      std::this_thread::sleep_for(poll);
      const int64_t silent = MonotonicMs() - __atomic_load_n(value, __ATOMIC_ACQUIRE);
      if (silent <= lease_ms) continue;
      WriteStderr("the daemon's lease lapsed (its clock stood still for " + std::to_string(silent) +
                  " ms, lease " + std::to_string(lease_ms) +
                  " ms): ending this worker and everything it started");
      if (!cgroup_kill.empty()) {
        int kfd = ::open(cgroup_kill.c_str(), O_WRONLY | O_CLOEXEC);
        if (kfd >= 0) {
          ssize_t ignored = ::write(kfd, "1", 1);  // kills this process too
          (void)ignored;
          ::close(kfd);
        }
      }
      // Only a group of our own: a worker started by hand must not kill its caller's.
      if (::getpgrp() == ::getpid()) ::kill(0, SIGKILL);
      ::_exit(1);
    }
  }).detach();
  return Status::Ok();
}

}  // namespace traintl
