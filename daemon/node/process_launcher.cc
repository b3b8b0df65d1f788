#include "daemon/node/process_launcher.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/signal_safe_fork.h"
#include "daemon/node/worker_cgroups.h"

namespace traintl {
namespace {

// Exit status of a child that could not become the worker user (before exec, so the
// worker's own codes 0-3 never mean this).
constexpr int kCannotSwitchUserExitCode = 4;

void ChildFail(const char* msg, size_t len, int code) {
  ssize_t unused = ::write(2, msg, len);
  (void)unused;
  ::_exit(code);
}

}  // namespace

PosixProcessLauncher* PosixProcessLauncher::Get() {
  static PosixProcessLauncher* const kLauncher = new PosixProcessLauncher();
  return kLauncher;
}

Result<SpawnedProcess> PosixProcessLauncher::Spawn(const ProcessSpec& spec) {
  // Everything the child needs is prepared before fork(): after it, only
  // async-signal-safe calls are allowed.
  std::vector<std::string> args = spec.argv;
  std::vector<std::string> env_strings = spec.env;
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const bool switch_user = spec.credentials.has_value();
  const uid_t uid = switch_user ? spec.credentials->uid : 0;
  const gid_t gid = switch_user ? spec.credentials->gid : 0;
  std::vector<gid_t> groups = switch_user ? spec.credentials->groups : std::vector<gid_t>{};
  const int log_fd = spec.log_fd;
  const int lease_fd = spec.lease_fd;
  const bool idle_priority = spec.idle_priority;
  const char* procs_file = spec.cgroup_procs.empty() ? nullptr : spec.cgroup_procs.c_str();
  const char* workdir = spec.workdir.c_str();

  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    Status st = Status::Internal(std::string("socketpair: ") + std::strerror(errno));
    ::close(null_fd);
    return st;
  }
  const pid_t parent = ::getpid();
  // The child must never run the daemon's signal handlers (common/signal_safe_fork.h):
  // a stop may reach it before it execs.
  pid_t pid = ForkWithDefaultSignals();
  if (pid < 0) {
    Status st = Status::Internal(std::string("fork: ") + std::strerror(errno));
    ::close(null_fd);
    ::close(sv[0]);
    ::close(sv[1]);
    return st;
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    // Still root here (moving a process needs write access to the target's procs file).
    if (procs_file != nullptr && WorkerCgroups::AttachSelf(procs_file) != 0) {
      static const char kNoCgroup[] = "traintl-worker: cannot enter the worker's cgroup\n";
      ChildFail(kNoCgroup, sizeof kNoCgroup - 1, 2);
    }
    if (switch_user) {
      // Groups first: after setuid the process may no longer change them. Each call is
      // checked, and the result verified, since carrying on as root is the one outcome
      // that must never happen.
      static const char kFail[] = "traintl-worker: cannot switch to the worker user\n";
      if (::setgroups(groups.size(), groups.data()) != 0 || ::setgid(gid) != 0 ||
          ::setuid(uid) != 0 || ::getuid() != uid || ::geteuid() != uid || ::getegid() != gid ||
          ::setuid(0) == 0) {
        ChildFail(kFail, sizeof kFail - 1, kCannotSwitchUserExitCode);
      }
    }
    // The worker must not outlive its agent, even after kill -9 of the daemon. Set after
    // the user switch: changing credentials clears the parent-death signal.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    // Out of the way first: the channel or the lease clock may sit on 0..4 already.
    const int channel = ::fcntl(sv[1], F_DUPFD, 10);
    const int lease = lease_fd >= 0 ? ::fcntl(lease_fd, F_DUPFD, 10) : -1;
    ::dup2(null_fd, 0);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    ::dup2(channel, 3);
    if (lease >= 0) ::dup2(lease, 4);
    ::close_range(lease >= 0 ? 5 : 4, ~0U, 0);
    if (idle_priority) {
      sched_param none{};
      ::sched_setscheduler(0, SCHED_IDLE, &none);
    }
    // Ready: a stop that came meanwhile acts now (before exec, as the default action).
    UnblockAllSignals();
    if (::chdir(workdir) != 0) {
      static const char kNoDir[] = "traintl-worker: cannot enter the working directory\n";
      ChildFail(kNoDir, sizeof kNoDir - 1, 2);
    }
    ::execve(argv[0], argv.data(), envp.data());
    static const char kNoExec[] = "traintl-worker: cannot execute the worker binary\n";
    ChildFail(kNoExec, sizeof kNoExec - 1, 3);
  }
  ::setpgid(pid, pid);  // also here, so signals to the group work before the child runs
  ::close(null_fd);
  ::close(sv[1]);
  return SpawnedProcess{pid, sv[0]};
}

void PosixProcessLauncher::SignalGroup(pid_t pgid, int sig) { ::killpg(pgid, sig); }

void PosixProcessLauncher::Signal(pid_t pid, int sig) { ::kill(pid, sig); }

std::optional<ChildExit> PosixProcessLauncher::ReapAny() {
  int status = 0;
  pid_t pid = ::waitpid(-1, &status, WNOHANG);
  if (pid <= 0) return std::nullopt;
  ChildExit exit;
  exit.pid = pid;
  if (WIFEXITED(status)) exit.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) exit.signal = WTERMSIG(status);
  return exit;
}

void PosixProcessLauncher::Reap(pid_t pid) {
  int status;
  ::waitpid(pid, &status, 0);
}

std::vector<pid_t> PosixProcessLauncher::OrphanChildren() {
  std::vector<pid_t> out;
  int subreaper = 0;
  if (::prctl(PR_GET_CHILD_SUBREAPER, &subreaper) != 0 || subreaper == 0) return out;
  const pid_t self = ::getpid();
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (struct dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    std::string stat_path = std::string("/proc/") + e->d_name + "/stat";
    int fd = ::open(stat_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char buf[512];
    ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (n <= 0) continue;
    buf[n] = '\0';
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    const char* close_paren = std::strrchr(buf, ')');
    if (close_paren == nullptr) continue;
    char state = 0;
    long ppid = 0;
    if (std::sscanf(close_paren + 1, " %c %ld", &state, &ppid) != 2) continue;
    if (ppid == self && state != 'Z') out.push_back(static_cast<pid_t>(std::atol(e->d_name)));
  }
  ::closedir(d);
  return out;
}

}  // namespace traintl
