// LeaseClock and LeaseWatchdog: fencing of workers by their daemon's liveness.
//
// A stopped or wedged daemon (SIGSTOP, a hung disk) cannot stop its workers, while a new
// head already restarts their job elsewhere: two attempts of one job would run at once.
// So a worker holds a lease: the daemon's LeaseClock thread writes CLOCK_MONOTONIC (one
// clock for every process of the machine) into a shared 8-byte memfd every
// kTickMs; each worker maps a read-only descriptor of it, and its LeaseWatchdog kills
// the worker's cgroup (or, without cgroups, its process group) when the clock has not
// moved for the lease time. The head waits longer than the lease before reusing a lost
// node's ranks (its settle period), so the old ranks are gone by then.
//
// The clock is its own thread, not the daemon's event loop: a busy loop (a long
// checkpoint merge) must not fence healthy workers. Workers get a read-only descriptor
// (reopened through /proc), so training code cannot keep its own lease alive nor stop
// another job's.
//
// Thread-safety: LeaseClock's methods are thread-safe after Start; LeaseWatchdog runs on
// its own thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

#include "common/status.h"

namespace traintl {

// CLOCK_MONOTONIC in milliseconds.
int64_t MonotonicMs();

class LeaseClock {
 public:
  static constexpr int64_t kTickMs = 100;

  LeaseClock() = default;
  ~LeaseClock();
  LeaseClock(const LeaseClock&) = delete;
  LeaseClock& operator=(const LeaseClock&) = delete;

  // Creates the memfd and starts the ticking thread.
  Status Start();
  // A read-only descriptor of the clock for workers to inherit (close-on-exec is set:
  // the launcher dup2()s it to the worker's fd), -1 before Start.
  int read_only_fd() const { return ro_fd_; }
  // Stops ticking (tests: a daemon that froze).
  void Pause() { paused_.store(true); }
  void Resume() { paused_.store(false); }

 private:
  void Run();

  int fd_ = -1;
  int ro_fd_ = -1;
  int64_t* value_ = nullptr;  // shared mapping of fd_ (written with __atomic builtins)
  std::atomic<bool> stop_{false};
  std::atomic<bool> paused_{false};
  std::thread thread_;
};

// The worker's side: watches the clock on `fd` from a detached thread and, when it has
// not moved for `lease_ms`, writes "1" to `cgroup_kill` (when not empty and writable) and
// SIGKILLs its own process group (when it leads one), then exits. Call once.
Status StartLeaseWatchdog(int fd, int64_t lease_ms, const std::string& cgroup_kill);

}  // namespace traintl
