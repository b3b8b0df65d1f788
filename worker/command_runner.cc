#include "worker/command_runner.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "common/signal_safe_fork.h"

namespace traintl {
namespace worker {
namespace {

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

Result<std::string> ResolveProgram(const std::string& program, const std::string& path_env,
                                   const std::string& cwd) {
  if (program.find('/') != std::string::npos) {
    std::string path = program[0] == '/' || cwd.empty() ? program : cwd + "/" + program;
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      return Status::NotFound("command not found: " + program + " (" + path + ": " +
                              std::strerror(errno) + ")");
    }
    if (!S_ISREG(st.st_mode) || ::access(path.c_str(), X_OK) != 0) {
      return Status::PermissionDenied("command " + program + " is not an executable file");
    }
    return path;
  }
  std::vector<std::string> dirs;
  size_t start = 0;
  for (;;) {
    size_t colon = path_env.find(':', start);
    std::string dir = path_env.substr(start, colon == std::string::npos ? colon : colon - start);
    if (!dir.empty()) dirs.push_back(dir);
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (!cwd.empty()) dirs.push_back(cwd);
  for (const auto& dir : dirs) {
    std::string path = dir + "/" + program;
    if (IsExecutableFile(path)) return path;
  }
  return Status::NotFound("command not found: " + program + " (searched PATH=" + path_env +
                          (cwd.empty() ? "" : " and the working_dir") + ")");
}

Result<CommandEnd> RunChild(const std::vector<std::string>& argv, const std::string& cwd,
                            int channel_fd, const std::vector<std::string>& extra_env) {
  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry = *e;
    std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& x : extra_env) replaced |= x.compare(0, name.size() + 1, name + "=") == 0;
    if (!replaced) env_strings.push_back(std::move(entry));
  }
  for (const auto& x : extra_env) env_strings.push_back(x);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();

  // The embedded Python's handlers (SIGINT) must not run in the child before exec.
  pid_t pid = ForkWithDefaultSignals();
  if (pid < 0) return Status::Unavailable(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(127);
    int flags = ::fcntl(channel_fd, F_GETFD);
    if (flags >= 0) ::fcntl(channel_fd, F_SETFD, flags & ~FD_CLOEXEC);
    UnblockAllSignals();
    ::execve(args[0], args.data(), envp.data());
    const char msg[] = "traintl-worker: exec of the command failed\n";
    ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)ignored;
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return Status::Internal(std::string("waitpid: ") + std::strerror(errno));
  }
  CommandEnd end;
  if (WIFEXITED(status)) {
    const int code = WEXITSTATUS(status);
    end.exit_code = code;
    end.ok = code == 0;
    if (!end.ok) end.reason = "the command exited with code " + std::to_string(code);
  } else if (WIFSIGNALED(status)) {
    end.signal = WTERMSIG(status);
    end.reason = std::string("the command was killed by signal ") + std::to_string(end.signal) +
                 " (" + ::strsignal(end.signal) + ")";
  }
  return end;
}

}  // namespace worker
}  // namespace traintl
