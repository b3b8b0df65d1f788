// Notifier and Watchdog: the sd_notify(3) protocol that a Type=notify service speaks to
// systemd, implemented over the Unix datagram socket named by $NOTIFY_SOCKET (no
// libsystemd needed).
//
// A Notifier built from the environment takes NOTIFY_SOCKET, WATCHDOG_USEC and
// WATCHDOG_PID out of it (so that worker processes, which inherit the environment, never
// talk to systemd in the daemon's name). Without NOTIFY_SOCKET (not started by systemd,
// or Type=simple) it is disabled and every call is a no-op returning OK.
//
// The Watchdog sends WATCHDOG=1 from a timer of the daemon's io_context at half of
// WATCHDOG_USEC, so that the pings stop when the event loop is blocked and systemd
// (WatchdogSec=) kills and restarts the daemon.
//
// Thread-safety: Notifier's methods may be called from any thread (each message is one
// sendto(2) on a socket created at construction). Watchdog is used on the thread that
// runs its io_context (or before it runs); destroy it once the loop has stopped.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "common/status.h"

namespace traintl {
namespace systemd {

class Notifier {
 public:
  // Disabled: every call returns OK and sends nothing.
  Notifier();
  // Sends to `socket_path`: an absolute path, or "@name" for the abstract namespace (as
  // in $NOTIFY_SOCKET). Empty: disabled. `watchdog_interval` is WATCHDOG_USEC (nullopt:
  // no watchdog).
  explicit Notifier(std::string socket_path,
                    std::optional<std::chrono::microseconds> watchdog_interval = std::nullopt);
  ~Notifier();

  Notifier(const Notifier&) = delete;
  Notifier& operator=(const Notifier&) = delete;
  Notifier(Notifier&& other) noexcept;
  Notifier& operator=(Notifier&& other) noexcept;

  // Reads $NOTIFY_SOCKET and, when WATCHDOG_PID is unset or names this process,
  // $WATCHDOG_USEC, then unsets all three. A malformed WATCHDOG_USEC disables the
  // watchdog (the error is kept in setup_error()).
  static Notifier FromEnvironment();

  bool enabled() const { return !socket_path_.empty(); }
  const std::string& socket_path() const { return socket_path_; }
  // WATCHDOG_USEC: how long systemd waits for a ping. nullopt when not watched.
  std::optional<std::chrono::microseconds> watchdog_interval() const { return watchdog_; }
  // Why the notifier or its watchdog is disabled although the environment asked for
  // them (bad WATCHDOG_USEC, socket() failure); OK otherwise.
  const Status& setup_error() const { return setup_error_; }

  // Sends `state`: newline-separated KEY=VALUE assignments (sd_notify(3)). Errors:
  // Unavailable when the socket cannot be reached, InvalidArgument for a bad path.
  Status Notify(const std::string& state);

  // READY=1 and, when `status` is not empty, STATUS=`status`, in one message: the
  // service is up (systemd ends "activating" and starts units ordered after it).
  Status Ready(const std::string& status = "");
  // STATUS=`text`, shown by `systemctl status`. Newlines become spaces.
  Status SetStatus(const std::string& text);
  // STOPPING=1 (and STATUS=`status` when not empty): the service began its shutdown.
  Status Stopping(const std::string& status = "");
  // RELOADING=1 with MONOTONIC_USEC= (and STATUS=): a reload began; send Ready() when
  // it is done.
  Status Reloading(const std::string& status = "");
  // WATCHDOG=1: the service is alive.
  Status WatchdogPing();
  // EXTEND_TIMEOUT_USEC=: asks for `extra` more time for the current start-up or
  // shutdown step (systemd >= 236; ignored by older ones).
  Status ExtendTimeout(std::chrono::microseconds extra);

 private:
  std::string socket_path_;
  std::optional<std::chrono::microseconds> watchdog_;
  Status setup_error_;
  int fd_ = -1;
};

struct WatchdogOptions {
  // Time between pings. Default (zero): half of the notifier's watchdog_interval(), as
  // sd_watchdog_enabled(3) recommends.
  std::chrono::microseconds ping_interval{0};
  // Called before each ping on the io_context's thread; a ping is sent only when it
  // returns true, so a component that is wedged elsewhere (e.g. another loop thread)
  // can get the daemon restarted too. Default: none (always ping).
  std::function<bool()> healthy;
};

class Watchdog {
 public:
  // `notifier` is not owned and must outlive the Watchdog.
  Watchdog(boost::asio::io_context& io, Notifier* notifier, WatchdogOptions options = {});
  // Cancels the timer.
  ~Watchdog();

  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // True when pings will be sent: the notifier is enabled and an interval is known.
  bool enabled() const { return interval_.count() > 0; }
  std::chrono::microseconds ping_interval() const { return interval_; }

  // Sends one ping now and then one per interval from the io_context. No-op when not
  // enabled or already started.
  void Start();
  // Stops the pings. A graceful shutdown should leave them running until the loop
  // ends, because systemd may still be watching while the service stops.
  void Stop();
  bool running() const { return running_; }

 private:
  void Arm();

  boost::asio::steady_timer timer_;
  Notifier* notifier_;
  WatchdogOptions options_;
  std::chrono::microseconds interval_{0};
  bool running_ = false;
};

}  // namespace systemd
}  // namespace traintl
