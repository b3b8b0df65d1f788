#include "daemon/node/worker_pool.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <variant>

#include "common/logging.h"
#include "common/safe_fs.h"

namespace traintl {

namespace asio = boost::asio;
using nlohmann::json;

namespace {

#if defined(__SANITIZE_ADDRESS__)
#define TRAINTL_SANITIZER_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TRAINTL_SANITIZER_BUILD 1
#endif
#endif

// Exit status of a child that could not become the worker user (before exec, so the
// worker's own codes 0-3 never mean this).
constexpr int kCannotSwitchUserExitCode = 4;

void ChildFail(const char* msg, size_t len, int code) {
  ssize_t unused = ::write(2, msg, len);
  (void)unused;
  ::_exit(code);
}

bool AllDigits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

// Live children of this process, when it is a child subreaper (PR_SET_CHILD_SUBREAPER):
// then orphaned descendants of its workers become its children. Empty otherwise: a
// process that is no subreaper has only the children it started itself.
std::vector<pid_t> OrphanChildren() {
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

}  // namespace

Result<WorkerUser> LookupWorkerUser(const std::string& name) {
  if (name.empty()) return Status::InvalidArgument("worker user: empty name");
  long size = ::sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buf(size > 0 ? static_cast<size_t>(size) : 16384);
  struct passwd pw;
  struct passwd* found = nullptr;
  int rc;
  for (;;) {
    if (AllDigits(name) && name.size() < 10) {
      rc = ::getpwuid_r(static_cast<uid_t>(std::stoul(name)), &pw, buf.data(), buf.size(), &found);
    } else {
      rc = ::getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found);
    }
    if (rc != ERANGE || buf.size() > (1u << 20)) break;
    buf.resize(buf.size() * 2);
  }
  if (rc != 0) {
    return Status::Internal("worker user '" + name + "': " + std::strerror(rc));
  }
  if (found == nullptr) return Status::NotFound("worker user '" + name + "' does not exist");
  if (pw.pw_uid == 0) {
    return Status::InvalidArgument("worker user '" + name +
                                   "' is root; workers must not run as root");
  }
  WorkerUser user;
  user.name = pw.pw_name;
  user.uid = pw.pw_uid;
  user.gid = pw.pw_gid;
  user.home = pw.pw_dir ? pw.pw_dir : "/";
  int n = 32;
  for (int tries = 0; tries < 8; ++tries) {
    user.groups.assign(static_cast<size_t>(n), 0);
    int got = n;
    if (::getgrouplist(pw.pw_name, pw.pw_gid, user.groups.data(), &got) >= 0) {
      user.groups.resize(static_cast<size_t>(got));
      return user;
    }
    n = std::max(got, n * 2);
  }
  user.groups = {pw.pw_gid};
  return user;
}

struct WorkerPool::Worker {
  Worker(asio::io_context& io, size_t max_line)
      : channel(io), buffer(max_line), grace_timer(io), drain_timer(io) {}
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  pid_t pid = -1;
  asio::local::stream_protocol::socket channel;
  asio::streambuf buffer;
  asio::steady_timer grace_timer;
  asio::steady_timer drain_timer;
  bool exited = false;
  bool channel_closed = false;
  bool finished = false;
  bool stopping = false;
  WorkerExit exit;
};

WorkerPool::WorkerPool(asio::io_context& io, WorkerPoolOptions options,
                       WorkerPoolListener* listener)
    : io_(io), options_(std::move(options)), listener_(listener), sigchld_(io, SIGCHLD) {
  StartSignalWait();
}

WorkerPool::~WorkerPool() { KillAll(); }

void WorkerPool::StartSignalWait() {
  sigchld_.async_wait([this](const boost::system::error_code& ec, int) {
    if (ec) return;  // cancelled at shutdown
    ReapChildren();
    StartSignalWait();
  });
}

Status WorkerPool::Launch(const WorkerLaunch& l) {
  // Everything the child needs is prepared before fork(): after it, only
  // async-signal-safe calls are allowed.
  std::vector<std::string> args = {options_.worker_binary, "--context", l.context_path};
  std::map<std::string, std::string> env = l.env;
#ifdef TRAINTL_SANITIZER_BUILD
  // Sanitizer builds only (scripts/sanitize.sh): workers keep the daemon's sanitizer
  // settings, so that their reports go where the script collects them and a deliberate
  // crash stays a signal. Release builds pass exactly the environment they are given.
  for (const char* name : {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"}) {
    if (const char* v = std::getenv(name)) env.emplace(name, v);
  }
#endif
  const std::optional<WorkerUser>& user = l.user ? l.user : options_.worker_user;
  const bool switch_user = user.has_value();
  std::vector<gid_t> groups;
  uid_t uid = 0;
  gid_t gid = 0;
  if (switch_user) {
    uid = user->uid;
    gid = user->gid;
    groups = user->groups;
    if (groups.empty()) groups.push_back(gid);
    if (uid == 0) return Status::InvalidArgument("refusing to run a worker as root");
    env["HOME"] = user->home;
    env["USER"] = user->name;
    env["LOGNAME"] = user->name;
    // The context file is written 0600 by the daemon; the worker must read it. Never
    // through a symlink: a root chown(2) of a planted link would hand its target over.
    OwnerPolicy owners;
    owners.also_allowed.push_back(uid);
    if (Status st = ChownNoFollow(l.context_path, uid, gid, owners); !st.ok()) {
      return Status(st.code(), "giving the context file to " + user->name + ": " + st.message());
    }
    for (const auto& dir : l.user_dirs) {
      if (Status st = ChownNoFollow(dir, uid, gid, owners); !st.ok()) {
        return Status(st.code(), "giving " + dir + " to " + user->name + ": " + st.message());
      }
    }
  }
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  // The daemon opens the log: never through a symlink, nor a FIFO or someone's hard link.
  Result<UniqueFd> log_file = OpenAppendNoFollow(l.log_path, 0640);
  if (!log_file.ok()) return log_file.status();
  int log_fd = log_file->release();
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    Status st = Status::Internal(std::string("socketpair: ") + std::strerror(errno));
    ::close(log_fd);
    ::close(null_fd);
    return st;
  }
  // Its own cgroup, entered by the child before anything of the worker runs.
  std::string cgroup_procs;
  if (options_.cgroups != nullptr && options_.cgroups->enabled()) {
    auto dir = options_.cgroups->CreateWorker(l.job_id, l.attempt, l.rank,
                                              switch_user ? static_cast<int>(uid) : -1);
    if (!dir.ok()) {
      ::close(log_fd);
      ::close(null_fd);
      ::close(sv[0]);
      ::close(sv[1]);
      return dir.status();
    }
    cgroup_procs = *dir + "/cgroup.procs";
  }
  const char* procs_file = cgroup_procs.empty() ? nullptr : cgroup_procs.c_str();
  const int lease_fd = options_.lease_ms > 0 ? options_.lease_fd : -1;
  const pid_t parent = ::getpid();
  const char* workdir = l.workdir.c_str();
  pid_t pid = ::fork();
  if (pid < 0) {
    Status st = Status::Internal(std::string("fork: ") + std::strerror(errno));
    ::close(log_fd);
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
    sigset_t all;
    sigemptyset(&all);
    ::sigprocmask(SIG_SETMASK, &all, nullptr);
    for (int s = 1; s < NSIG; ++s) ::signal(s, SIG_DFL);
    if (::chdir(workdir) != 0) {
      const char msg[] = "traintl-worker: cannot enter the working directory\n";
      ssize_t unused = ::write(2, msg, sizeof msg - 1);
      (void)unused;
      ::_exit(2);
    }
    ::execve(argv[0], argv.data(), envp.data());
    const char msg[] = "traintl-worker: cannot execute the worker binary\n";
    ssize_t unused = ::write(2, msg, sizeof msg - 1);
    (void)unused;
    ::_exit(3);
  }
  ::setpgid(pid, pid);  // also here, so signals to the group work before the child runs
  if (options_.reaper != nullptr) options_.reaper->Track(pid);
  ::close(log_fd);
  ::close(null_fd);
  ::close(sv[1]);

  auto w = std::make_shared<Worker>(io_, options_.max_message_bytes);
  w->job_id = l.job_id;
  w->attempt = l.attempt;
  w->rank = l.rank;
  w->pid = pid;
  w->exit.job_id = l.job_id;
  w->exit.attempt = l.attempt;
  w->exit.rank = l.rank;
  boost::system::error_code ec;
  w->channel.assign(asio::local::stream_protocol(), sv[0], ec);
  if (ec) {
    ::close(sv[0]);
    ::killpg(pid, SIGKILL);
    w->channel_closed = true;
  }
  workers_[pid] = w;
  if (!ec) ReadNext(w);
  LOG_INFO << "started worker job=" << l.job_id << " attempt=" << l.attempt << " rank=" << l.rank
           << " pid=" << pid;
  return Status::Ok();
}

void WorkerPool::ReadNext(const std::shared_ptr<Worker>& w) {
  asio::async_read_until(
      w->channel, w->buffer, '\n', [this, w](const boost::system::error_code& ec, size_t n) {
        if (ec) {
          // not_found: the buffer (max_message_bytes) filled up without a newline.
          if (ec == asio::error::not_found) {
            LOG_WARN << "worker pid=" << w->pid << " sent an oversize message; closing channel";
          }
          w->channel_closed = true;
          boost::system::error_code ignored;
          w->channel.close(ignored);
          MaybeFinish(w);
          return;
        }
        std::string line(asio::buffers_begin(w->buffer.data()),
                         asio::buffers_begin(w->buffer.data()) + static_cast<long>(n));
        w->buffer.consume(n);
        HandleMessage(w, line);
        ReadNext(w);
      });
}

void WorkerPool::HandleMessage(const std::shared_ptr<Worker>& w, const std::string& line) {
  Result<events::WorkerEvent> event = events::DecodeWorkerEvent(line, options_.max_message_bytes);
  if (!event.ok()) {
    // NotFound: a type of a newer worker, which an older agent ignores.
    if (event.status().code() != Status::Code::kNotFound) {
      LOG_WARN << "worker pid=" << w->pid << " sent a " << event.status().message();
    }
    return;
  }
  if (std::holds_alternative<events::Hello>(*event)) {
    listener_->OnWorkerHello(w->job_id, w->attempt, w->rank);
  } else if (const auto* report = std::get_if<events::Report>(&*event)) {
    listener_->OnWorkerReport(w->job_id, w->attempt, w->rank, report->seq, report->metrics,
                              report->checkpoint);
  } else if (auto* done = std::get_if<events::Done>(&*event)) {
    w->exit.done_seen = true;
    w->exit.done_ok = done->ok;
    w->exit.done_error = std::move(done->error);
    w->exit.retryable = done->retryable;
  }
}

void WorkerPool::ReapChildren() {
  for (;;) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    auto it = workers_.find(pid);
    if (it == workers_.end()) continue;  // an orphan the daemon inherited, now reaped
    auto w = it->second;
    w->exited = true;
    if (WIFEXITED(status)) w->exit.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) w->exit.signal = WTERMSIG(status);
    // Whatever the user's code left behind goes with its worker.
    KillLeftovers(*w);
    w->grace_timer.cancel();
    if (!w->channel_closed) {
      // Give the channel a moment to deliver the last messages ("done").
      w->drain_timer.expires_after(options_.drain_timeout);
      w->drain_timer.async_wait([this, w](const boost::system::error_code& ec) {
        if (ec) return;
        w->channel_closed = true;
        boost::system::error_code ignored;
        w->channel.close(ignored);
        MaybeFinish(w);
      });
    }
    MaybeFinish(w);
  }
}

void WorkerPool::MaybeFinish(const std::shared_ptr<Worker>& w) {
  if (w->finished || !w->exited || !w->channel_closed) return;
  w->finished = true;
  w->drain_timer.cancel();
  w->exit.stopped_by_agent = w->stopping;
  workers_.erase(w->pid);
  LOG_INFO << "worker exited job=" << w->job_id << " attempt=" << w->attempt << " rank=" << w->rank
           << " pid=" << w->pid
           << (w->exit.exit_code ? " code=" + std::to_string(*w->exit.exit_code) : "")
           << (w->exit.signal ? " signal=" + std::to_string(*w->exit.signal) : "");
  // The listener may launch or stop other workers; call it last.
  listener_->OnWorkerExit(w->exit);
}

void WorkerPool::Send(const std::shared_ptr<Worker>& w, const events::AgentMessage& msg) {
  if (w->channel_closed) return;
  auto data = std::make_shared<std::string>(events::Encode(msg));
  asio::async_write(w->channel, asio::buffer(*data),
                    [data](const boost::system::error_code&, size_t) {});
}

void WorkerPool::StopAttempt(const std::string& job_id, int attempt) {
  for (auto& entry : workers_) {
    // A copy of the pointer, not a structured binding: lambdas capture it (C++17).
    std::shared_ptr<Worker> w = entry.second;
    if (w->job_id != job_id || w->attempt != attempt || w->stopping || w->exited) continue;
    w->stopping = true;
    Send(w, events::Stop{});
    w->grace_timer.expires_after(options_.stop_grace);
    w->grace_timer.async_wait([this, w](const boost::system::error_code& ec) {
      if (ec || w->exited) return;
      ::killpg(w->pid, SIGTERM);
      w->grace_timer.expires_after(options_.term_grace);
      w->grace_timer.async_wait([w](const boost::system::error_code& ec2) {
        if (ec2 || w->exited) return;
        ::killpg(w->pid, SIGKILL);
      });
    });
  }
}

void WorkerPool::Ack(const std::string& job_id, int attempt, int rank, int seq) {
  for (auto& [pid, w] : workers_) {
    if (w->job_id == job_id && w->attempt == attempt && w->rank == rank) Send(w, events::Ack{seq});
  }
}

std::vector<std::pair<std::string, int>> WorkerPool::LiveAttempts() const {
  std::vector<std::pair<std::string, int>> out;
  for (const auto& [pid, w] : workers_) {
    std::pair<std::string, int> key{w->job_id, w->attempt};
    if (std::find(out.begin(), out.end(), key) == out.end()) out.push_back(key);
  }
  return out;
}

int WorkerPool::LiveWorkers(const std::string& job_id, int attempt) const {
  int n = 0;
  for (const auto& [pid, w] : workers_)
    if (w->job_id == job_id && w->attempt == attempt) ++n;
  return n;
}

std::vector<pid_t> WorkerPool::LivePids() const {
  std::vector<pid_t> out;
  for (const auto& [pid, w] : workers_) out.push_back(pid);
  return out;
}

void WorkerPool::KillAll() {
  for (auto& [pid, w] : workers_) ::killpg(pid, SIGKILL);
  for (auto& [pid, w] : workers_) {
    int status;
    ::waitpid(pid, &status, 0);
    if (!w->exited) KillLeftovers(*w);
  }
  workers_.clear();
}

nlohmann::json WorkerPool::LeaseContext(const std::string& job_id, int attempt, int rank) const {
  if (options_.lease_ms <= 0 || options_.lease_fd < 0) return nullptr;
  nlohmann::json cgroup_kill = nullptr;
  if (options_.cgroups != nullptr && options_.cgroups->enabled()) {
    cgroup_kill = options_.cgroups->WorkerPath(job_id, attempt, rank) + "/cgroup.kill";
  }
  return {{"fd", 4}, {"ms", options_.lease_ms}, {"cgroup_kill", cgroup_kill}};
}

void WorkerPool::KillLeftovers(const Worker& w) {
  ::killpg(w.pid, SIGKILL);
  if (options_.reaper != nullptr) options_.reaper->Untrack(w.pid);
  if (options_.cgroups != nullptr && options_.cgroups->enabled()) {
    Status st = options_.cgroups->KillWorker(w.job_id, w.attempt, w.rank);
    if (!st.ok()) LOG_WARN << "worker pid=" << w.pid << ": " << st.message();
    return;
  }
  // Without cgroups the daemon is a child subreaper: what left the worker's process
  // group (setsid) and lost its parent is the daemon's child now. Live children that are
  // not workers are such orphans.
  for (pid_t orphan : OrphanChildren()) {
    bool is_worker = workers_.count(orphan) != 0;
    if (!is_worker && orphan != (options_.reaper ? options_.reaper->pid() : -1)) {
      ::kill(orphan, SIGKILL);
    }
  }
}

}  // namespace traintl
