// ProcessLauncher: how WorkerPool starts, signals and reaps its worker processes - the
// seam between the pool's bookkeeping and the operating system, so that tests can put a
// fake in its place (no processes, no signals). PosixProcessLauncher is the real one:
// fork and exec with the worker's descriptors, process group, cgroup, user and
// parent-death signal (docs/WORKER_PROTOCOL.md), killpg/kill and waitpid.
//
// Thread-safety: PosixProcessLauncher is stateless, and its methods may be called from any
// thread (the pool calls them from its io_context thread only).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace traintl {

// Everything one worker process is started with.
struct ProcessSpec {
  // argv[0] is the path of the binary; exec'd as is (no PATH search). Required.
  std::vector<std::string> argv;
  // The whole environment, "NAME=value" each. Default: empty.
  std::vector<std::string> env;
  // The process's working directory; the child exits with 2 when it cannot enter it.
  // Required.
  std::string workdir;
  // Becomes the child's stdout and stderr (the caller keeps its own descriptor). Required.
  int log_fd = -1;
  // Becomes the child's fd 4 (the daemon's lease clock); -1: none. Default: -1.
  int lease_fd = -1;
  // Whether the child runs under SCHED_IDLE (only CPU time nothing else wants). Default:
  // false (the daemon's scheduling).
  bool idle_priority = false;
  // The cgroup.procs file of the cgroup the child enters before anything else runs;
  // "": none. Default: "".
  std::string cgroup_procs;
  // When set, the child drops to this account (setgroups, setgid, setuid, verified) before
  // exec; `groups` must not be empty. Default: unset (the daemon's account).
  struct Credentials {
    uid_t uid = 0;
    gid_t gid = 0;
    std::vector<gid_t> groups;
  };
  std::optional<Credentials> credentials;
};

// A started process: its pid (also its process group) and the daemon's end of the
// socketpair whose other end is the child's fd 3.
struct SpawnedProcess {
  pid_t pid = -1;
  int channel_fd = -1;  // owned by the caller (close-on-exec)
};

// How a reaped child ended.
struct ChildExit {
  pid_t pid = -1;
  std::optional<int> exit_code;  // set when it exited
  std::optional<int> signal;     // set when a signal killed it
};

class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;
  // Starts a process in a new process group (its pid), with stdin /dev/null, `log_fd` as
  // stdout and stderr, a fresh socketpair's end as fd 3, PR_SET_PDEATHSIG(SIGKILL), all
  // signals at their defaults and unblocked, and no other descriptor. On failure nothing
  // is left running and no descriptor open.
  virtual Result<SpawnedProcess> Spawn(const ProcessSpec& spec) = 0;
  // Sends `sig` to the process group `pgid` (killpg).
  virtual void SignalGroup(pid_t pgid, int sig) = 0;
  // Sends `sig` to the process `pid` (kill).
  virtual void Signal(pid_t pid, int sig) = 0;
  // Reaps one exited child without blocking: any child of the daemon, nullopt when none
  // has exited (waitpid(-1, WNOHANG)).
  virtual std::optional<ChildExit> ReapAny() = 0;
  // Waits for the child `pid` to exit and reaps it.
  virtual void Reap(pid_t pid) = 0;
  // The live children of the daemon, the ones it started included, when it is a child
  // subreaper (PR_SET_CHILD_SUBREAPER): then orphaned descendants of its workers are among
  // them. Empty when it is no subreaper (it has only the children it started).
  virtual std::vector<pid_t> OrphanChildren() = 0;
};

class PosixProcessLauncher : public ProcessLauncher {
 public:
  // The process-wide instance (what WorkerPool uses unless a test gives it another).
  static PosixProcessLauncher* Get();

  Result<SpawnedProcess> Spawn(const ProcessSpec& spec) override;
  void SignalGroup(pid_t pgid, int sig) override;
  void Signal(pid_t pid, int sig) override;
  std::optional<ChildExit> ReapAny() override;
  void Reap(pid_t pid) override;
  std::vector<pid_t> OrphanChildren() override;
};

}  // namespace traintl
