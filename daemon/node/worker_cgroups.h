// WorkerCgroups: the cgroup v2 subtree that holds every process an attempt starts, so that
// no process a training library starts (fork/exec, setsid, double fork) outlives its
// attempt or its daemon.
//
// Layout: <root>/<job>-a<attempt>/rank-<r>/ per worker, where <root> is
// "<cgroup2 mount><the daemon's own cgroup>/traintl-<key>" and <key> is derived from the
// data directory (so a restarted daemon finds its predecessor's leftovers; under systemd
// with Delegate=yes the daemon's own cgroup is its delegated unit cgroup). A worker enters
// its cgroup in the child between fork and exec (AttachSelf), before anything of its own
// runs; everything it starts stays inside. When the worker exits, its cgroup is killed
// (cgroup.kill: SIGKILL to every member, however it detached itself) and removed; the
// attempt's directory goes with its last worker.
//
// When cgroup v2 is missing or not writable, Init says why and the pool falls back to
// process groups (and the daemon is a child subreaper, so orphans are found): a process
// that leaves its process group (setsid) can then outlive a kill -9 of the daemon. The
// daemon logs this at start.
//
// kill -9 of the daemon: the daemon cannot act, so an OrphanReaper (a process forked at
// start, before any thread) waits on a socket from the daemon; when it reads end of file it
// kills every attempt cgroup under the root (or, without cgroups, every process group the
// daemon announced) and exits.
//
// Thread-safety: Init once at start; afterwards every method is safe from any thread
// (they only touch the file system), AttachSelf is async-signal-safe.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/status.h"

namespace traintl {

class WorkerCgroups {
 public:
  WorkerCgroups() = default;

  // Finds the cgroup2 mount and this process's cgroup, creates the root and kills what a
  // previous daemon with the same key left in it. An error says why cgroups cannot be
  // used; the object then stays disabled (enabled() false).
  // `mountinfo` / `self_cgroup` are the texts of /proc/self/mountinfo and /proc/self/cgroup
  // (read when empty); tests pass their own.
  Status Init(const std::string& key, const std::string& mountinfo = "",
              const std::string& self_cgroup = "");

  bool enabled() const { return !root_.empty(); }
  const std::string& root() const { return root_; }

  // The worker's cgroup, created (with its attempt's) if missing. `uid` >= 0 gives the
  // worker's account its cgroup.kill, so that a fenced worker can end all it started.
  Result<std::string> CreateWorker(const std::string& job_id, int attempt, int rank, int uid = -1);
  std::string AttemptPath(const std::string& job_id, int attempt) const;
  std::string WorkerPath(const std::string& job_id, int attempt, int rank) const;

  // Moves the calling process into the cgroup whose cgroup.procs is `procs_file` (writes
  // "0"). Only async-signal-safe calls: for a child between fork and exec. Returns 0 or an
  // errno value.
  static int AttachSelf(const char* procs_file);
  // Moves the running process `pid` (a warm worker) into the cgroup of `procs_file`.
  static Status Attach(const std::string& procs_file, pid_t pid);

  // Kills every process in the worker's cgroup and removes it, then the attempt's
  // directory when no worker cgroup is left in it. Waits up to `wait_ms` for members to
  // go. OK when it does not exist.
  Status KillWorker(const std::string& job_id, int attempt, int rank, int wait_ms = 2000);
  // Kills and removes every cgroup under the root: at start (a predecessor's leftovers)
  // and at shutdown.
  Status KillAll(int wait_ms = 2000);
  // PIDs in a cgroup directory and its descendants (empty when none or missing).
  static std::vector<pid_t> Members(const std::string& dir);

  // Kills and removes one cgroup directory (its own children first). Used by the reaper
  // too, which has no WorkerCgroups of its own.
  static Status KillTree(const std::string& dir, int wait_ms);

 private:
  std::string root_;  // constant after Init; "" when disabled
};

// The process that cleans up after a kill -9 of the daemon (see WorkerCgroups). Start it
// before any thread exists; the daemon keeps its end of the socket open until it
// exits. Without cgroups the daemon announces each worker's process group (Track/Untrack)
// and the reaper kills those that remain.
class OrphanReaper {
 public:
  // `cgroup_root` "" = no cgroups. Returns false (and logs) when it cannot fork.
  bool Start(const std::string& cgroup_root);
  void Track(pid_t pgid);
  void Untrack(pid_t pgid);
  pid_t pid() const { return pid_; }
  // The daemon's end of the socket (close-on-exec). The reaper acts when every copy is
  // closed: a child that forks without exec must close it.
  int fd() const { return fd_; }

 private:
  int fd_ = -1;  // the daemon's end; closed by the kernel when the daemon dies
  pid_t pid_ = -1;
};

}  // namespace traintl
