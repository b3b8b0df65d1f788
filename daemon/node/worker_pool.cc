#include "daemon/node/worker_pool.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/falloc.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <set>
#include <variant>

#include "common/fd_passing.h"
#include "common/logging.h"
#include "common/safe_fs.h"
#include "common/utf8.h"
#include "daemon/node/log_index.h"
#include "daemon/node/stop_escalation.h"

namespace traintl {

namespace asio = boost::asio;
using nlohmann::json;

namespace {

// Unix ms: the time a log index records.
int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The thread ids of process `pid` (/proc/<pid>/task).
std::vector<pid_t> Threads(pid_t pid) {
  std::vector<pid_t> out;
  DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/task").c_str());
  if (d == nullptr) return out;
  while (struct dirent* e = ::readdir(d)) {
    if (e->d_name[0] >= '0' && e->d_name[0] <= '9') out.push_back(std::atoi(e->d_name));
  }
  ::closedir(d);
  return out;
}

#if defined(__SANITIZE_ADDRESS__)
#define TRAINTL_SANITIZER_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TRAINTL_SANITIZER_BUILD 1
#endif
#endif

bool AllDigits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
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
  Worker(asio::io_context& io, size_t max_line, pid_t pid, StopEscalation stop)
      : pid(pid),
        channel(io),
        buffer(max_line),
        stop(std::move(stop)),
        grace_timer(io),
        drain_timer(io) {}
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  const pid_t pid;
  asio::local::stream_protocol::socket channel;
  asio::streambuf buffer;
  StopEscalation stop;             // requested(): the agent is stopping it
  asio::steady_timer grace_timer;  // wakes `stop` when its next step is due
  asio::steady_timer drain_timer;
  bool exited = false;
  bool channel_closed = false;
  bool finished = false;
  WorkerExit exit;
  UniqueFd log;             // the rank's log, for its size
  LogIndexWriter index;     // when its log grew (log_index.h)
  off_t log_dropped = 0;    // bytes at the log's start punched out (max_log_bytes)
  bool log_bounded = true;  // false once its file system refused a punch
  // Reports: each seq must be above the last (the protocol's order); those forwarded and
  // not yet acked, and whether reading waits for an ack (max_unacked_reports).
  int last_seq = -1;
  std::set<int> unacked;
  bool read_paused = false;
  // Messages to the worker: one write in flight at a time (two async_writes on one socket
  // may interleave their bytes), the rest queued.
  std::deque<std::string> outbox;
  bool writing = false;
};

WorkerPool::WorkerPool(asio::io_context& io, WorkerPoolOptions options,
                       WorkerPoolListener* listener)
    : io_(io),
      options_(std::move(options)),
      listener_(listener),
      launcher_(options_.launcher != nullptr ? options_.launcher : PosixProcessLauncher::Get()),
      clock_(options_.clock != nullptr ? options_.clock : SystemClock::Get()),
      max_unacked_(std::max<size_t>(1, options_.max_unacked_reports)),
      sigchld_(io, SIGCHLD),
      log_sample_timer_(io) {
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
  ProcessSpec spec;
  spec.argv = {options_.worker_binary, "--context", l.context_path};
  spec.workdir = l.workdir;
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
  if (user.has_value()) {
    ProcessSpec::Credentials& c = spec.credentials.emplace();
    c.uid = user->uid;
    c.gid = user->gid;
    c.groups = user->groups;
    if (c.groups.empty()) c.groups.push_back(c.gid);
    if (c.uid == 0) return Status::InvalidArgument("refusing to run a worker as root");
    env["HOME"] = user->home;
    env["USER"] = user->name;
    env["LOGNAME"] = user->name;
    // The context file is written 0600 by the daemon; the worker must read it. Never
    // through a symlink: a root chown(2) of a planted link would hand its target over.
    OwnerPolicy owners;
    owners.also_allowed.push_back(c.uid);
    if (Status st = ChownNoFollow(l.context_path, c.uid, c.gid, owners); !st.ok()) {
      return Status(st.code(), "giving the context file to " + user->name + ": " + st.message());
    }
  }
  for (const auto& [k, v] : env) spec.env.push_back(k + "=" + v);

  // The daemon opens the log: never through a symlink, nor a FIFO or someone's hard link.
  Result<UniqueFd> log_file = OpenAppendNoFollow(l.log_path, 0640);
  if (!log_file.ok()) return log_file.status();
  spec.log_fd = log_file->get();
  // Its own cgroup, entered by the child before anything of the worker runs.
  if (options_.cgroups != nullptr && options_.cgroups->enabled()) {
    auto dir = options_.cgroups->CreateWorker(
        l.job_id, l.attempt, l.rank,
        spec.credentials ? static_cast<int>(spec.credentials->uid) : -1);
    if (!dir.ok()) return dir.status();
    spec.cgroup_procs = *dir + "/cgroup.procs";
  }
  spec.lease_fd = options_.lease_ms > 0 ? options_.lease_fd : -1;
  if (std::optional<Warm> warm = l.warm_ok ? TakeWarm(user, env) : std::nullopt) {
    Status handed = HandOver(*warm, l.context_path, spec);
    if (handed.ok()) {
      Adopt(l, warm->pid, warm->channel_fd, /*warm=*/true, std::move(*log_file));
      warm_failures_ = 0;
      return Status::Ok();
    }
    LOG_WARN << "warm worker pid=" << warm->pid << ": " << handed.message()
             << "; starting a new worker instead";
    launcher_->SignalGroup(warm->pid, SIGKILL);
    ::close(warm->channel_fd);
  }
  Result<SpawnedProcess> process = launcher_->Spawn(spec);
  if (!process.ok()) return process.status();
  if (options_.reaper != nullptr) options_.reaper->Track(process->pid);
  Adopt(l, process->pid, process->channel_fd, /*warm=*/false, std::move(*log_file));
  return Status::Ok();
}

void WorkerPool::Adopt(const WorkerLaunch& l, pid_t pid, int channel_fd, bool warm, UniqueFd log) {
  auto w = std::make_shared<Worker>(
      io_, options_.max_message_bytes, pid,
      StopEscalation(clock_, launcher_, pid, options_.stop_grace, options_.term_grace));
  w->job_id = l.job_id;
  w->attempt = l.attempt;
  w->rank = l.rank;
  w->exit.job_id = l.job_id;
  w->exit.attempt = l.attempt;
  w->exit.rank = l.rank;
  w->exit.pid = static_cast<int>(pid);
  w->exit.launch = launches_++;
  w->exit.generation = l.generation;
  boost::system::error_code ec;
  w->channel.assign(asio::local::stream_protocol(), channel_fd, ec);
  if (ec) {
    ::close(channel_fd);
    launcher_->SignalGroup(pid, SIGKILL);
    w->channel_closed = true;
  }
  w->log = std::move(log);
  // Without an index the log is still served, only without the times of its lines.
  if (Status st = w->index.Open(LogIndexPath(l.log_path)); !st.ok())
    LOG_WARN << "log index of job " << l.job_id << " rank " << l.rank << ": " << st.message();
  const bool first = workers_.empty();
  workers_[pid] = w;
  if (first) ArmLogSampling();
  if (!ec) ReadNext(w);
  LOG_INFO << "started worker job=" << l.job_id << " attempt=" << l.attempt << " rank=" << l.rank
           << " pid=" << pid << (warm ? " (warm)" : "");
}

std::optional<WorkerPool::Warm> WorkerPool::TakeWarm(
    const std::optional<WorkerUser>& user, const std::map<std::string, std::string>& env) {
  if (warm_.empty()) return std::nullopt;
  // Warm workers run as the default account; another one gets a new process.
  const std::optional<WorkerUser>& pool_user = options_.worker_user;
  if (user.has_value() != pool_user.has_value() || (user && user->uid != pool_user->uid))
    return std::nullopt;
  // The dynamic loader read these when the warm worker started: only a new process
  // honours them.
  for (const auto& [name, value] : env) {
    if (name.rfind("LD_", 0) == 0) return std::nullopt;
  }
  Warm w = warm_.front();
  warm_.erase(warm_.begin());
  return w;
}

Status WorkerPool::HandOver(const Warm& w, const std::string& context_path,
                            const ProcessSpec& spec) {
  if (!spec.cgroup_procs.empty()) {
    TRAINTL_RETURN_IF_ERROR(WorkerCgroups::Attach(spec.cgroup_procs, w.pid));
  }
  if (::geteuid() == 0) {
    // Back to normal scheduling, every thread (the policy is per thread); threads started
    // from now on inherit it.
    sched_param none{};
    for (pid_t tid : Threads(w.pid)) ::sched_setscheduler(tid, SCHED_OTHER, &none);
  }
  json launch = {
      {"type", "launch"}, {"context", context_path}, {"workdir", spec.workdir}, {"env", spec.env}};
  const std::string line = launch.dump() + "\n";
  // The log travels as a descriptor (SCM_RIGHTS) with the line: the warm worker opened
  // nothing of the job's. A fresh socket with an idle reader: the line fits its buffer (it
  // is bounded by the environment's size), so a short write is an error, not a wait.
  Status sent = SendWithFd(w.channel_fd, line, spec.log_fd, MSG_DONTWAIT);
  if (!sent.ok()) return Status(sent.code(), "sending the launch: " + sent.message());
  return Status::Ok();
}

// Room for "--context <data dir>/jobs/<id>/attempt_<n>/rank_<r>.context.json".
constexpr size_t kWarmTitleRoom = 512;

void WorkerPool::FillWarmPool() {
  // A node's CPUs belong to the ranks it runs: even at idle priority, a worker importing
  // torch beside them slows their steps through caches and memory bandwidth. It refills
  // once the last rank here has ended.
  if (!workers_.empty()) return;
  while (!warm_draining_ && static_cast<int>(warm_.size()) < options_.warm_workers &&
         warm_failures_ < kMaxWarmFailures) {
    ProcessSpec spec;
    // The blank argument is room for the command line it shows once it runs a rank.
    spec.argv = {options_.worker_binary, "--warm", std::string(kWarmTitleRoom, ' ')};
    spec.workdir = "/";
    // What it needs to load its runtimes; the rank's environment replaces it at launch.
    for (const char* name : {"PATH", "LANG", "TZ"}) {
      if (const char* v = std::getenv(name)) spec.env.push_back(std::string(name) + "=" + v);
    }
    if (options_.worker_user) {
      ProcessSpec::Credentials& c = spec.credentials.emplace();
      c.uid = options_.worker_user->uid;
      c.gid = options_.worker_user->gid;
      c.groups = options_.worker_user->groups;
      if (c.groups.empty()) c.groups.push_back(c.gid);
      spec.env.push_back("HOME=" + options_.worker_user->home);
    }
    // Nothing to say before its launch: what it could not preload goes to the rank's log.
    UniqueFd null_log(::open("/dev/null", O_WRONLY | O_CLOEXEC));
    if (!null_log.valid()) {
      LOG_WARN << "warm workers: /dev/null: " << std::strerror(errno);
      return;
    }
    spec.log_fd = null_log.get();
    spec.lease_fd = options_.lease_ms > 0 ? options_.lease_fd : -1;
    // Loading takes only CPU time that the ranks training here leave idle; HandOver
    // restores normal scheduling, which takes root (an unprivileged daemon's warm workers
    // load with normal scheduling).
    spec.idle_priority = ::geteuid() == 0;
    Result<SpawnedProcess> process = launcher_->Spawn(spec);
    if (!process.ok()) {
      LOG_WARN << "cannot start a warm worker: " << process.status().message();
      ++warm_failures_;
      return;
    }
    if (options_.reaper != nullptr) options_.reaper->Track(process->pid);
    warm_.push_back(Warm{process->pid, process->channel_fd});
  }
}

void WorkerPool::DrainWarmPool() {
  warm_draining_ = true;
  for (const Warm& w : warm_) {
    launcher_->SignalGroup(w.pid, SIGKILL);
    ::close(w.channel_fd);
  }
  for (const Warm& w : warm_) {
    launcher_->Reap(w.pid);
    if (options_.reaper != nullptr) options_.reaper->Untrack(w.pid);
  }
  warm_.clear();
}

bool WorkerPool::ReapWarm(pid_t pid, const ChildExit& exit) {
  auto it = std::find_if(warm_.begin(), warm_.end(), [&](const Warm& w) { return w.pid == pid; });
  if (it == warm_.end()) return false;
  ::close(it->channel_fd);
  warm_.erase(it);
  if (options_.reaper != nullptr) options_.reaper->Untrack(pid);
  ++warm_failures_;
  LOG_WARN << "warm worker pid=" << pid << " exited before it was used"
           << (exit.exit_code ? " (code " + std::to_string(*exit.exit_code) + ")" : "")
           << (exit.signal ? " (signal " + std::to_string(*exit.signal) + ")" : "")
           << (warm_failures_ >= kMaxWarmFailures ? "; no more warm workers are started" : "");
  asio::post(io_, [this] { FillWarmPool(); });
  return true;
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
        if (w->channel_closed) return;  // FailWorker
        if (w->unacked.size() >= max_unacked_) {
          w->read_paused = true;  // Ack reads on
          return;
        }
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
    if (report->seq <= w->last_seq) {
      // Its report() would wait for an ack that never comes: fail the rank instead, saying
      // why (two programs each counting from 0 in one command, for instance).
      FailWorker(w, "report seq " + std::to_string(report->seq) + " after seq " +
                        std::to_string(w->last_seq) +
                        ": a rank's reports must count up, once per attempt (one traintl "
                        "program per rank and attempt)");
      return;
    }
    // Its host refuses such a report(): this one bypassed it. Counted as encoded, not by
    // the line, where a number may be shorter ("1e5" is 100000.0 once encoded).
    const size_t bytes = events::ReportMetricsBytes(report->metrics);
    if (bytes > events::kMaxReportMetricsBytes) {
      FailWorker(w, "report seq " + std::to_string(report->seq) + ": metrics of " +
                        std::to_string(bytes) + " bytes, over the " +
                        std::to_string(events::kMaxReportMetricsBytes / 1024) +
                        " KiB a report may carry");
      return;
    }
    w->last_seq = report->seq;
    w->unacked.insert(report->seq);
    listener_->OnWorkerReport(w->job_id, w->attempt, w->rank, *report);
  } else if (const auto* progress = std::get_if<events::Progress>(&*event)) {
    listener_->OnWorkerProgress(w->job_id, w->attempt, w->rank, *progress);
  } else if (auto* done = std::get_if<events::Done>(&*event)) {
    w->exit.done_seen = true;
    w->exit.done_ok = done->ok;
    // Bounded (a line may hold 4 MiB): it goes into the job's message, Raft and logs.
    w->exit.done_error = ClipMiddle(done->error, kMaxDoneErrorBytes);
    w->exit.retryable = done->retryable;
    w->exit.command_exit_code = done->command_exit_code;
    w->exit.command_signal = done->command_signal;
  }
}

void WorkerPool::FailWorker(const std::shared_ptr<Worker>& w, const std::string& why) {
  LOG_WARN << "worker pid=" << w->pid << " job=" << w->job_id << " rank=" << w->rank << ": " << why
           << "; stopping it";
  w->exit.done_seen = true;
  w->exit.done_ok = false;
  w->exit.done_error = why;
  w->exit.retryable = false;
  w->channel_closed = true;  // nothing it says later overrides this
  boost::system::error_code ignored;
  w->channel.close(ignored);
  if (w->stop.Request()) {
    w->stop.SkipGrace();
    w->stop.Poll();
  }
  ArmGraceTimer(w);
}

void WorkerPool::ReapChildren() {
  bool orphan_reaped = false;
  while (std::optional<ChildExit> child = launcher_->ReapAny()) {
    auto it = workers_.find(child->pid);
    if (it == workers_.end()) {
      // Else an orphan the daemon inherited, now reaped (one that KillLeftovers killed).
      if (!ReapWarm(child->pid, *child)) orphan_reaped = true;
      continue;
    }
    auto w = it->second;
    w->exited = true;
    w->exit.exit_code = child->exit_code;
    w->exit.signal = child->signal;
    // Stopped by this agent only when the stop came before the exit: one that came while
    // the channel drained found a worker killed from outside, the attempt's cause.
    w->exit.stopped_by_agent = w->stop.requested();
    w->stop.Exited();
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
  // Its own children became orphans when it died: they go the same way (once per batch:
  // each scan reads /proc).
  if (orphan_reaped && (options_.cgroups == nullptr || !options_.cgroups->enabled())) KillOrphans();
}

void WorkerPool::ArmLogSampling() {
  log_sample_timer_.expires_after(kLogSampleInterval);
  log_sample_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || workers_.empty()) return;
    SampleLogs();
    ArmLogSampling();
  });
}

void WorkerPool::SampleLogs() {
  const int64_t now = WallMs();
  for (auto& [pid, w] : workers_) SampleLog(*w, now);
}

void WorkerPool::SampleLog(Worker& w, int64_t now_ms) {
  struct stat st;
  if (!w.log.valid() || ::fstat(w.log.get(), &st) != 0) return;
  w.index.Sample(now_ms, st.st_size);
  const off_t max = static_cast<off_t>(options_.max_log_bytes);
  if (max <= 0 || !w.log_bounded || st.st_size - w.log_dropped <= max) return;
  // Down to half the bound, in whole pages (a partial page would keep its block).
  const off_t upto = (st.st_size - max / 2) & ~static_cast<off_t>(4095);
  if (upto <= w.log_dropped) return;
  if (::fallocate(w.log.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, w.log_dropped,
                  upto - w.log_dropped) != 0) {
    const int err = errno;
    w.log_bounded = false;
    LOG_WARN << "job " << w.job_id << " rank " << w.rank << ": its log is over " << (max >> 20)
             << " MiB and cannot be bounded here: " << std::strerror(err);
    return;
  }
  if (w.log_dropped == 0) {
    LOG_WARN << "job " << w.job_id << " rank " << w.rank << ": its log is over " << (max >> 20)
             << " MiB (--max-rank-log-mb); its oldest part is dropped as it grows";
  }
  w.log_dropped = upto;
}

void WorkerPool::MaybeFinish(const std::shared_ptr<Worker>& w) {
  if (w->finished || !w->exited || !w->channel_closed) return;
  w->finished = true;
  SampleLog(*w, WallMs());  // its last lines
  w->drain_timer.cancel();
  workers_.erase(w->pid);
  // Posted: a restart the listener launches now still finds the node busy.
  if (workers_.empty() && options_.warm_workers > 0) asio::post(io_, [this] { FillWarmPool(); });
  LOG_INFO << "worker exited job=" << w->job_id << " attempt=" << w->attempt << " rank=" << w->rank
           << " pid=" << w->pid
           << (w->exit.exit_code ? " code=" + std::to_string(*w->exit.exit_code) : "")
           << (w->exit.signal ? " signal=" + std::to_string(*w->exit.signal) : "");
  // The listener may launch or stop other workers; call it last.
  listener_->OnWorkerExit(w->exit);
}

void WorkerPool::Send(const std::shared_ptr<Worker>& w, const events::AgentMessage& msg) {
  if (w->channel_closed) return;
  // A worker that reads nothing (a command ignoring fd 3) gets no more than this queued.
  constexpr size_t kMaxQueuedMessages = 4096;
  if (w->outbox.size() >= kMaxQueuedMessages) return;
  w->outbox.push_back(events::Encode(msg));
  if (!w->writing) WriteNext(w);
}

void WorkerPool::WriteNext(const std::shared_ptr<Worker>& w) {
  if (w->outbox.empty() || w->channel_closed) {
    w->writing = false;
    return;
  }
  w->writing = true;
  asio::async_write(w->channel, asio::buffer(w->outbox.front()),
                    [this, w](const boost::system::error_code& ec, size_t) {
                      w->outbox.pop_front();
                      if (ec) {
                        w->outbox.clear();
                        w->writing = false;
                        return;
                      }
                      WriteNext(w);
                    });
}

void WorkerPool::StopAttempt(const std::string& job_id, int attempt, bool urgent) {
  for (auto& entry : workers_) {
    // A copy of the pointer, not a structured binding: lambdas capture it (C++17).
    std::shared_ptr<Worker> w = entry.second;
    if (w->job_id != job_id || w->attempt != attempt || w->exited) continue;
    const bool first = w->stop.Request();
    if (first) Send(w, events::Stop{});
    if (urgent && w->stop.SkipGrace()) {
      w->stop.Poll();  // the SIGTERM, now
    } else if (!first) {
      continue;  // already stopping: the grace runs on
    }
    ArmGraceTimer(w);
  }
}

void WorkerPool::ArmGraceTimer(const std::shared_ptr<Worker>& w) {
  std::optional<StopEscalation::TimePoint> due = w->stop.NextDeadline();
  if (!due) return;
  // The timer only schedules; the escalation reads the clock itself.
  w->grace_timer.expires_after(*due - clock_->Now());
  w->grace_timer.async_wait([this, w](const boost::system::error_code& ec) {
    if (ec || w->exited) return;
    w->stop.Poll();
    ArmGraceTimer(w);
  });
}

void WorkerPool::Ack(const std::string& job_id, int attempt, int rank, int seq) {
  for (auto& entry : workers_) {
    std::shared_ptr<Worker> w = entry.second;
    if (w->job_id != job_id || w->attempt != attempt || w->rank != rank) continue;
    Send(w, events::Ack{seq});
    // Reports are taken in order: an ack covers every earlier one.
    w->unacked.erase(w->unacked.begin(), w->unacked.upper_bound(seq));
    if (w->read_paused && w->unacked.size() < max_unacked_ && !w->channel_closed) {
      w->read_paused = false;
      ReadNext(w);
    }
  }
}

void WorkerPool::Regroup(const std::string& job_id, int attempt, const events::Regroup& regroup) {
  for (auto& [pid, w] : workers_) {
    if (w->job_id == job_id && w->attempt == attempt && !w->exited) Send(w, regroup);
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
  DrainWarmPool();
  for (auto& [pid, w] : workers_) launcher_->SignalGroup(pid, SIGKILL);
  for (auto& [pid, w] : workers_) {
    launcher_->Reap(pid);
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
  launcher_->SignalGroup(w.pid, SIGKILL);
  if (options_.reaper != nullptr) options_.reaper->Untrack(w.pid);
  if (options_.cgroups != nullptr && options_.cgroups->enabled()) {
    Status st = options_.cgroups->KillWorker(w.job_id, w.attempt, w.rank);
    if (!st.ok()) LOG_WARN << "worker pid=" << w.pid << ": " << st.message();
    return;
  }
  KillOrphans();
}

void WorkerPool::KillOrphans() {
  // Without cgroups the daemon is a child subreaper: what left the worker's process
  // group (setsid) and lost its parent is the daemon's child now. Live children that are
  // neither workers, nor warm workers waiting for a rank, nor the reaper are such orphans.
  for (pid_t orphan : launcher_->OrphanChildren()) {
    const bool is_worker = workers_.count(orphan) != 0;
    const bool is_warm = std::any_of(warm_.begin(), warm_.end(),
                                     [orphan](const Warm& w) { return w.pid == orphan; });
    if (!is_worker && !is_warm && orphan != (options_.reaper ? options_.reaper->pid() : -1)) {
      launcher_->Signal(orphan, SIGKILL);
    }
  }
}

}  // namespace traintl
