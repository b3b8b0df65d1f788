#include "daemon/node/worker_pool.h"

#include <algorithm>

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/logging.h"

namespace traintl {

namespace asio = boost::asio;
using nlohmann::json;

struct WorkerPool::Worker {
  Worker(asio::io_context& io) : channel(io), grace_timer(io), drain_timer(io) {}
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
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : l.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  int log_fd = ::open(l.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (log_fd < 0) return Status::Internal("open " + l.log_path + ": " + std::strerror(errno));
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    Status st = Status::Internal(std::string("socketpair: ") + std::strerror(errno));
    ::close(log_fd);
    ::close(null_fd);
    return st;
  }
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
    // The worker must not outlive its agent, even after kill -9 of the daemon.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(null_fd, 0);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    ::dup2(sv[1], 3);
    ::close_range(4, ~0U, 0);
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
  ::close(log_fd);
  ::close(null_fd);
  ::close(sv[1]);

  auto w = std::make_shared<Worker>(io_);
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
  LOG_INFO << "started worker job=" << l.job_id << " attempt=" << l.attempt
           << " rank=" << l.rank << " pid=" << pid;
  return Status::Ok();
}

void WorkerPool::ReadNext(const std::shared_ptr<Worker>& w) {
  asio::async_read_until(
      w->channel, w->buffer, '\n',
      [this, w](const boost::system::error_code& ec, size_t n) {
        if (ec) {
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
        if (w->buffer.size() > options_.max_message_bytes) {
          LOG_WARN << "worker pid=" << w->pid << " sent an oversize message; closing channel";
          w->channel_closed = true;
          boost::system::error_code ignored;
          w->channel.close(ignored);
          MaybeFinish(w);
          return;
        }
        ReadNext(w);
      });
}

void WorkerPool::HandleMessage(const std::shared_ptr<Worker>& w, const std::string& line) {
  json m = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!m.is_object() || !m.contains("type") || !m["type"].is_string()) {
    LOG_WARN << "worker pid=" << w->pid << " sent a malformed message";
    return;
  }
  const std::string type = m["type"].get<std::string>();
  if (type == "hello") {
    listener_->OnWorkerHello(w->job_id, w->attempt, w->rank);
  } else if (type == "report") {
    auto seq = m.find("seq");
    if (seq == m.end() || !seq->is_number_integer()) return;
    json metrics = m.value("metrics", json::object());
    if (!metrics.is_object()) metrics = json::object();
    std::string ckpt;
    if (m.contains("checkpoint") && m["checkpoint"].is_string()) ckpt = m["checkpoint"];
    listener_->OnWorkerReport(w->job_id, w->attempt, w->rank, seq->get<int>(), metrics, ckpt);
  } else if (type == "done") {
    w->exit.done_seen = true;
    w->exit.done_ok = m.value("ok", false) == true;
    if (m.contains("error") && m["error"].is_string()) w->exit.done_error = m["error"];
    if (m.contains("retryable") && m["retryable"].is_boolean())
      w->exit.retryable = m["retryable"].get<bool>();
  }
}

void WorkerPool::ReapChildren() {
  for (;;) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    auto it = workers_.find(pid);
    if (it == workers_.end()) continue;
    auto w = it->second;
    w->exited = true;
    if (WIFEXITED(status)) w->exit.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) w->exit.signal = WTERMSIG(status);
    // Grandchildren the user's code left behind go with their worker.
    ::killpg(pid, SIGKILL);
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
  LOG_INFO << "worker exited job=" << w->job_id << " attempt=" << w->attempt
           << " rank=" << w->rank << " pid=" << w->pid
           << (w->exit.exit_code ? " code=" + std::to_string(*w->exit.exit_code) : "")
           << (w->exit.signal ? " signal=" + std::to_string(*w->exit.signal) : "");
  // The listener may launch or stop other workers; call it last.
  listener_->OnWorkerExit(w->exit);
}

void WorkerPool::Send(const std::shared_ptr<Worker>& w, const json& msg) {
  if (w->channel_closed) return;
  auto data = std::make_shared<std::string>(msg.dump() + "\n");
  asio::async_write(w->channel, asio::buffer(*data),
                    [data](const boost::system::error_code&, size_t) {});
}

void WorkerPool::StopAttempt(const std::string& job_id, int attempt) {
  for (auto& [pid, w] : workers_) {
    if (w->job_id != job_id || w->attempt != attempt || w->stopping || w->exited) continue;
    w->stopping = true;
    Send(w, json{{"type", "stop"}});
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
    if (w->job_id == job_id && w->attempt == attempt && w->rank == rank)
      Send(w, json{{"type", "ack"}, {"seq", seq}});
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
  }
  workers_.clear();
}

}  // namespace traintl
