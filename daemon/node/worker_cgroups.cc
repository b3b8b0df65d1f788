#include "daemon/node/worker_cgroups.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>
#include <sstream>
#include <thread>

#include "common/file_util.h"
#include "common/logging.h"
#include "common/signal_safe_fork.h"

namespace traintl {
namespace {

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// The mount point of the cgroup2 file system in /proc/self/mountinfo text, or "".
std::string Cgroup2Mount(const std::string& mountinfo) {
  std::istringstream in(mountinfo);
  for (std::string line; std::getline(in, line);) {
    size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream rest(line.substr(dash + 3));
    std::string fstype;
    rest >> fstype;
    if (fstype != "cgroup2") continue;
    std::istringstream head(line.substr(0, dash));
    std::string id, parent, dev, root, mount_point;
    head >> id >> parent >> dev >> root >> mount_point;
    if (!mount_point.empty()) return mount_point;
  }
  return "";
}

// This process's cgroup v2 path ("0::<path>" in /proc/self/cgroup), or "".
std::string UnifiedPath(const std::string& self_cgroup) {
  std::istringstream in(self_cgroup);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return "";
}

std::vector<std::string> SubDirs(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (struct dirent* e = ::readdir(d)) {
    if (e->d_type != DT_DIR) continue;
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  ::closedir(d);
  return out;
}

bool WriteSmall(const std::string& path, const char* text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const size_t n = std::strlen(text);
  const bool ok = ::write(fd, text, n) == static_cast<ssize_t>(n);
  ::close(fd);
  return ok;
}

std::vector<pid_t> Procs(const std::string& dir) {
  std::vector<pid_t> out;
  auto text = ReadFile(dir + "/cgroup.procs");
  if (!text.ok()) return out;
  std::istringstream in(*text);
  for (long pid; in >> pid;) out.push_back(static_cast<pid_t>(pid));
  return out;
}

}  // namespace

Status WorkerCgroups::Init(const std::string& key, const std::string& mountinfo_text,
                           const std::string& self_cgroup_text) {
  root_.clear();
  std::string mountinfo = mountinfo_text;
  if (mountinfo.empty()) {
    auto t = ReadFile("/proc/self/mountinfo");
    if (t.ok()) mountinfo = *t;
  }
  std::string self = self_cgroup_text;
  if (self.empty()) {
    auto t = ReadFile("/proc/self/cgroup");
    if (t.ok()) self = *t;
  }
  const std::string mount = Cgroup2Mount(mountinfo);
  if (mount.empty()) return Status::FailedPrecondition("no cgroup v2 file system is mounted");
  const std::string own = UnifiedPath(self);
  if (own.empty()) return Status::FailedPrecondition("this process has no cgroup v2 path");
  std::string base = mount + (own == "/" ? "" : own);
  if (!IsDirectory(base)) {
    return Status::FailedPrecondition("the daemon's cgroup " + base + " is not visible");
  }
  const std::string root = base + "/traintl-" + key;
  if (::mkdir(root.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::FailedPrecondition(Errno("cannot create the cgroup " + root));
  }
  struct stat st;
  if (::lstat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
      ::access((root + "/cgroup.procs").c_str(), W_OK) != 0) {
    return Status::FailedPrecondition("the cgroup " + root + " is not writable");
  }
  root_ = root;
  // What a predecessor (kill -9, its reaper killed too) may have left.
  return KillAll();
}

std::string WorkerCgroups::AttemptPath(const std::string& job_id, int attempt) const {
  return root_ + "/" + job_id + "-a" + std::to_string(attempt);
}

std::string WorkerCgroups::WorkerPath(const std::string& job_id, int attempt, int rank) const {
  return AttemptPath(job_id, attempt) + "/rank-" + std::to_string(rank);
}

Result<std::string> WorkerCgroups::CreateWorker(const std::string& job_id, int attempt, int rank,
                                                int uid) {
  if (!enabled()) return Status::FailedPrecondition("cgroups are not in use");
  const std::string attempt_dir = AttemptPath(job_id, attempt);
  if (::mkdir(attempt_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::Internal(Errno("mkdir " + attempt_dir));
  }
  const std::string dir = WorkerPath(job_id, attempt, rank);
  if (::mkdir(dir.c_str(), 0755) != 0) {
    if (errno != EEXIST) return Status::Internal(Errno("mkdir " + dir));
    // A leftover of the same name (a relaunch): empty it first.
    TRAINTL_RETURN_IF_ERROR(KillTree(dir, 2000));
    if (::mkdir(dir.c_str(), 0755) != 0) return Status::Internal(Errno("mkdir " + dir));
  }
  if (uid >= 0 &&
      ::chown((dir + "/cgroup.kill").c_str(), static_cast<uid_t>(uid), static_cast<gid_t>(-1)) !=
          0 &&
      errno != ENOENT) {
    return Status::Internal(Errno("chown " + dir + "/cgroup.kill"));
  }
  return dir;
}

int WorkerCgroups::AttachSelf(const char* procs_file) {
  int fd = ::open(procs_file, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  int err = ::write(fd, "0", 1) == 1 ? 0 : errno;
  ::close(fd);
  return err;
}

Status WorkerCgroups::Attach(const std::string& procs_file, pid_t pid) {
  if (!WriteSmall(procs_file, std::to_string(pid).c_str())) {
    return Status::Internal(Errno("moving pid " + std::to_string(pid) + " into " + procs_file));
  }
  return Status::Ok();
}

std::vector<pid_t> WorkerCgroups::Members(const std::string& dir) {
  std::vector<pid_t> out = Procs(dir);
  for (const auto& sub : SubDirs(dir)) {
    auto more = Members(dir + "/" + sub);
    out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

Status WorkerCgroups::KillTree(const std::string& dir, int wait_ms) {
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) return Status::Ok();
  for (const auto& sub : SubDirs(dir)) TRAINTL_RETURN_IF_ERROR(KillTree(dir + "/" + sub, wait_ms));
  // cgroup.kill (Linux 5.14) also catches processes forking while they are killed; without
  // it, kill the listed members until none is left.
  const bool have_kill = WriteSmall(dir + "/cgroup.kill", "1");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  for (;;) {
    std::vector<pid_t> members = Procs(dir);
    if (members.empty() && ::rmdir(dir.c_str()) == 0) return Status::Ok();
    if (members.empty() && errno == ENOENT) return Status::Ok();
    if (!have_kill) {
      for (pid_t pid : members) ::kill(pid, SIGKILL);
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::Unavailable("the cgroup " + dir + " still has " +
                                 std::to_string(members.size()) + " processes after SIGKILL");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

Status WorkerCgroups::KillWorker(const std::string& job_id, int attempt, int rank, int wait_ms) {
  if (!enabled()) return Status::Ok();
  TRAINTL_RETURN_IF_ERROR(KillTree(WorkerPath(job_id, attempt, rank), wait_ms));
  const std::string attempt_dir = AttemptPath(job_id, attempt);
  if (SubDirs(attempt_dir).empty()) ::rmdir(attempt_dir.c_str());  // others may still run
  return Status::Ok();
}

Status WorkerCgroups::KillAll(int wait_ms) {
  if (!enabled()) return Status::Ok();
  Status result;
  for (const auto& sub : SubDirs(root_)) {
    Status st = KillTree(root_ + "/" + sub, wait_ms);
    if (!st.ok() && result.ok()) result = st;
  }
  return result;
}

// ---- OrphanReaper ----------------------------------------------------------------------

namespace {

// The reaper's life: reads "+pgid"/"-pgid" lines until end of file (the daemon is gone),
// then kill what is left. Runs in a forked child of a single-threaded process.
[[noreturn]] void ReaperMain(int fd, const std::string& cgroup_root) {
  ::prctl(PR_SET_NAME, "traintld-reaper");
  std::set<pid_t> groups;
  std::string buffer;
  char chunk[512];
  for (;;) {
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buffer.append(chunk, static_cast<size_t>(n));
    for (size_t nl; (nl = buffer.find('\n')) != std::string::npos; buffer.erase(0, nl + 1)) {
      const std::string line = buffer.substr(0, nl);
      if (line.size() < 2) continue;
      const pid_t pgid = static_cast<pid_t>(std::atol(line.c_str() + 1));
      if (pgid <= 1) continue;
      if (line[0] == '+') groups.insert(pgid);
      if (line[0] == '-') groups.erase(pgid);
    }
  }
  for (pid_t pgid : groups) ::kill(-pgid, SIGKILL);
  if (!cgroup_root.empty()) {
    for (const auto& sub : SubDirs(cgroup_root)) {
      (void)WorkerCgroups::KillTree(cgroup_root + "/" + sub, 5000);
    }
  }
  ::_exit(0);
}

}  // namespace

bool OrphanReaper::Start(const std::string& cgroup_root) {
  // A socket, not a pipe: writes to a reaper that died must not raise SIGPIPE.
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    LOG_ERROR << Errno("reaper: socketpair");
    return false;
  }
  pid_t pid = ForkWithDefaultSignals();
  if (pid < 0) {
    LOG_ERROR << Errno("reaper: fork");
    ::close(fds[0]);
    ::close(fds[1]);
    return false;
  }
  if (pid == 0) {
    // It ends when the daemon does (end of file on its socket), not on a stop signal
    // meant for the daemon (`pkill traintld` matches "traintld-reaper" too).
    for (int s : {SIGTERM, SIGINT, SIGHUP}) ::signal(s, SIG_IGN);
    UnblockAllSignals();
    ::close(fds[1]);
    // Nothing else of the daemon's: the descriptors it has open now (its log, the data
    // directory lock) must not be held past its death.
    ::close_range(3, static_cast<unsigned>(fds[0]) - 1, 0);
    ::close_range(static_cast<unsigned>(fds[0]) + 1, ~0U, 0);
    ReaperMain(fds[0], cgroup_root);
  }
  ::close(fds[0]);
  fd_ = fds[1];
  pid_ = pid;
  return true;
}

void OrphanReaper::Track(pid_t pgid) {
  if (fd_ < 0) return;
  const std::string line = "+" + std::to_string(pgid) + "\n";
  ssize_t ignored = ::send(fd_, line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)ignored;
}

void OrphanReaper::Untrack(pid_t pgid) {
  if (fd_ < 0) return;
  const std::string line = "-" + std::to_string(pgid) + "\n";
  ssize_t ignored = ::send(fd_, line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)ignored;
}

}  // namespace traintl
