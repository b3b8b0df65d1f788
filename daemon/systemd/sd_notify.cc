#include "daemon/systemd/sd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace traintl {
namespace systemd {
namespace {

std::string OneLine(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

std::string WithStatus(std::string state, const std::string& status) {
  if (!status.empty()) state += "\nSTATUS=" + OneLine(status);
  return state;
}

// Parses a positive decimal integer (WATCHDOG_USEC, WATCHDOG_PID).
bool ParsePositive(const char* text, unsigned long long* out) {
  if (text == nullptr || *text == '\0') return false;
  for (const char* p = text; *p != '\0'; ++p) {
    if (*p < '0' || *p > '9') return false;
  }
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || v == 0) return false;
  *out = v;
  return true;
}

}  // namespace

Notifier::Notifier() = default;

Notifier::Notifier(std::string socket_path,
                   std::optional<std::chrono::microseconds> watchdog_interval)
    : socket_path_(std::move(socket_path)), watchdog_(watchdog_interval) {
  if (socket_path_.empty()) {
    watchdog_.reset();
    return;
  }
  // Created once, so that Notify() is a single syscall and safe from any thread.
  fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) {
    setup_error_ = Status::Unavailable(std::string("socket(AF_UNIX): ") + std::strerror(errno));
  }
}

Notifier::~Notifier() {
  if (fd_ >= 0) ::close(fd_);
}

Notifier::Notifier(Notifier&& other) noexcept
    : socket_path_(std::move(other.socket_path_)),
      watchdog_(other.watchdog_),
      setup_error_(std::move(other.setup_error_)),
      fd_(std::exchange(other.fd_, -1)) {
  other.socket_path_.clear();
  other.watchdog_.reset();
}

Notifier& Notifier::operator=(Notifier&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    socket_path_ = std::move(other.socket_path_);
    watchdog_ = other.watchdog_;
    setup_error_ = std::move(other.setup_error_);
    fd_ = std::exchange(other.fd_, -1);
    other.socket_path_.clear();
    other.watchdog_.reset();
  }
  return *this;
}

Notifier Notifier::FromEnvironment() {
  const char* socket_env = std::getenv("NOTIFY_SOCKET");
  std::string socket_path = socket_env != nullptr ? socket_env : "";
  const char* usec_env = std::getenv("WATCHDOG_USEC");
  const char* pid_env = std::getenv("WATCHDOG_PID");
  std::optional<std::chrono::microseconds> watchdog;
  Status watchdog_error;
  if (usec_env != nullptr) {
    unsigned long long usec = 0, pid = 0;
    // WATCHDOG_PID names the process systemd watches; a child that inherited the
    // variables must not ping in its parent's name.
    bool ours = pid_env == nullptr || (ParsePositive(pid_env, &pid) &&
                                       pid == static_cast<unsigned long long>(::getpid()));
    if (!ParsePositive(usec_env, &usec)) {
      watchdog_error = Status::InvalidArgument(std::string("WATCHDOG_USEC is not a positive "
                                                           "number of microseconds: '") +
                                               usec_env + "'");
    } else if (ours) {
      watchdog = std::chrono::microseconds(usec);
    }
  }
  ::unsetenv("NOTIFY_SOCKET");
  ::unsetenv("WATCHDOG_USEC");
  ::unsetenv("WATCHDOG_PID");

  Status socket_error;
  if (!socket_path.empty() && socket_path[0] != '/' && socket_path[0] != '@') {
    // e.g. "vsock:..." (systemd >= 253, for VMs): not for a node daemon.
    socket_error = Status::InvalidArgument("NOTIFY_SOCKET '" + socket_path +
                                           "' is neither a path nor an abstract socket");
    socket_path.clear();
  }
  Notifier n(socket_path, watchdog);
  if (n.setup_error_.ok()) {
    if (!socket_error.ok()) {
      n.setup_error_ = socket_error;
    } else if (!watchdog_error.ok()) {
      n.setup_error_ = watchdog_error;
    }
  }
  return n;
}

Status Notifier::Notify(const std::string& state) {
  if (!enabled()) return Status::Ok();
  if (fd_ < 0) return setup_error_;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path_.size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument("NOTIFY_SOCKET path too long: " + socket_path_);
  }
  std::memcpy(addr.sun_path, socket_path_.data(), socket_path_.size());
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket_path_.size());
  if (socket_path_[0] == '@') {
    addr.sun_path[0] = '\0';  // abstract namespace: the name is not NUL-terminated
  } else {
    len += 1;
  }
  ssize_t n;
  do {
    n = ::sendto(fd_, state.data(), state.size(), MSG_NOSIGNAL,
                 reinterpret_cast<const sockaddr*>(&addr), len);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    return Status::Unavailable("sd_notify to " + socket_path_ + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

Status Notifier::Ready(const std::string& status) { return Notify(WithStatus("READY=1", status)); }

Status Notifier::SetStatus(const std::string& text) { return Notify("STATUS=" + OneLine(text)); }

Status Notifier::Stopping(const std::string& status) {
  return Notify(WithStatus("STOPPING=1", status));
}

Status Notifier::Reloading(const std::string& status) {
  // systemd >= 253 (Type=notify-reload) wants the time of the reload; older ones ignore it.
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  const long long usec = static_cast<long long>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
  return Notify(WithStatus("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(usec), status));
}

Status Notifier::WatchdogPing() { return Notify("WATCHDOG=1"); }

Status Notifier::ExtendTimeout(std::chrono::microseconds extra) {
  return Notify("EXTEND_TIMEOUT_USEC=" + std::to_string(extra.count()));
}

Watchdog::Watchdog(boost::asio::io_context& io, Notifier* notifier, WatchdogOptions options)
    : timer_(io), notifier_(notifier), options_(std::move(options)) {
  if (notifier_ == nullptr || !notifier_->enabled()) return;
  if (options_.ping_interval.count() > 0) {
    interval_ = options_.ping_interval;
  } else if (auto wd = notifier_->watchdog_interval()) {
    interval_ = *wd / 2;
    if (interval_.count() == 0) interval_ = std::chrono::microseconds(1);
  }
}

Watchdog::~Watchdog() { Stop(); }

void Watchdog::Start() {
  if (!enabled() || running_) return;
  running_ = true;
  if (!options_.healthy || options_.healthy()) notifier_->WatchdogPing().IgnoreError();
  Arm();
}

void Watchdog::Stop() {
  running_ = false;
  timer_.cancel();
}

void Watchdog::Arm() {
  timer_.expires_after(interval_);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || !running_) return;
    // A failed ping is not retried early: the next tick pings again, and systemd
    // tolerates one missed interval (pings come at half of WATCHDOG_USEC).
    if (!options_.healthy || options_.healthy()) notifier_->WatchdogPing().IgnoreError();
    Arm();
  });
}

}  // namespace systemd
}  // namespace traintl
