#include "daemon/systemd/service_signals.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/read.hpp>
#include <fstream>
#include <utility>

namespace traintl {
namespace systemd {
namespace {

constexpr std::array<int, 3> kSignals = {SIGTERM, SIGINT, SIGHUP};

// The write end of the started ServiceSignals' pipe; -1 when none is started.
std::atomic<int> g_write_fd{-1};

void OnSignal(int signo, siginfo_t* info, void*) {
  const int saved_errno = errno;
  const int fd = g_write_fd.load(std::memory_order_relaxed);
  if (fd >= 0) {
    // Only a sender that used kill()/sigqueue() has a pid (SI_USER, SI_QUEUE; <= 0 codes).
    const int32_t pid = info != nullptr && info->si_code <= 0 ? info->si_pid : 0;
    const int32_t record[2] = {signo, pid};
    // Non-blocking: with the pipe full (a flood of signals) the extra ones are dropped.
    ssize_t ignored = ::write(fd, record, sizeof record);
    (void)ignored;
  }
  errno = saved_errno;
}

const char* SignalName(int signo) {
  switch (signo) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGHUP:
      return "SIGHUP";
  }
  return "signal";
}

}  // namespace

std::string ReceivedSignal::Describe() const {
  std::string out = SignalName(signo);
  if (sender_pid <= 0) return out + " from outside this PID namespace (or the kernel)";
  out += " from pid " + std::to_string(sender_pid);
  out += sender_name.empty() ? " (already gone)" : " (" + sender_name + ")";
  return out;
}

ServiceSignals::ServiceSignals(boost::asio::io_context& io, ServiceSignalHandlers handlers)
    : reader_(io), handlers_(std::move(handlers)) {}

ServiceSignals::~ServiceSignals() { Cancel(); }

Status ServiceSignals::Start() {
  if (started_) return Status::Ok();
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    return Status::Internal(std::string("signal pipe: ") + ::strerror(errno));
  }
  int expected = -1;
  if (!g_write_fd.compare_exchange_strong(expected, fds[1])) {
    ::close(fds[0]);
    ::close(fds[1]);
    return Status::FailedPrecondition("another ServiceSignals is already started");
  }
  write_fd_ = fds[1];
  boost::system::error_code ec;
  reader_.assign(fds[0], ec);
  struct sigaction sa = {};
  sa.sa_sigaction = OnSignal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int s : kSignals) ::sigaction(s, &sa, nullptr);
  started_ = true;
  ReadNext();
  return Status::Ok();
}

void ServiceSignals::Cancel() {
  if (!started_) return;
  started_ = false;
  struct sigaction sa = {};
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  for (int s : kSignals) ::sigaction(s, &sa, nullptr);
  g_write_fd.store(-1);
  boost::system::error_code ec;
  reader_.close(ec);
  ::close(write_fd_);
  write_fd_ = -1;
}

void ServiceSignals::ReadNext() {
  boost::asio::async_read(reader_, boost::asio::buffer(&record_, sizeof record_),
                          [this](const boost::system::error_code& ec, size_t) {
                            if (ec || !started_) return;
                            // Re-armed after the handler's copy: a handler may take a
                            // while, and signals meanwhile stay in the pipe.
                            const Record record = record_;
                            ReadNext();
                            Dispatch(record);
                          });
}

void ServiceSignals::Dispatch(const Record& record) {
  ReceivedSignal sig;
  sig.signo = record.signo;
  sig.sender_pid = record.pid;
  if (sig.sender_pid > 0) {
    std::ifstream comm("/proc/" + std::to_string(sig.sender_pid) + "/comm");
    std::getline(comm, sig.sender_name);
  }
  if (sig.signo == SIGHUP) {
    if (handlers_.reload) handlers_.reload(sig);
  } else if (!stopping_) {
    stopping_ = true;
    handlers_.stop(sig);
  } else if (handlers_.hurry) {
    handlers_.hurry(sig);
  }
}

}  // namespace systemd
}  // namespace traintl
