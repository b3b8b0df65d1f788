// ServiceSignals: the signals a service manager sends traintld, handled on its event
// loop. SIGTERM or SIGINT asks for a graceful stop (once; another one while stopping asks
// to hurry), SIGHUP for a reload of what can change at run time (`systemctl reload`).
// Each handler learns who sent the signal (pid and command name), so that the log says
// "received SIGTERM from pid 1 (systemd)" and a stray kill can be traced to its sender.
//
// The signals are caught by an SA_SIGINFO handler that writes the siginfo into a pipe,
// which the event loop reads; at most one ServiceSignals may be started at a time in a
// process (the handler is process-wide).
//
// Thread-safety: construct, Start and Cancel on the io_context's thread (or before it
// runs); the handlers run there too.
#pragma once

#include <sys/types.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"

namespace traintl {
namespace systemd {

// A signal as it arrived.
struct ReceivedSignal {
  int signo = 0;
  // The sender's pid; 0 when the kernel sent it or the sender is outside this process's
  // PID namespace (a container's host, for example).
  pid_t sender_pid = 0;
  // /proc/<pid>/comm of the sender when it was read; empty when it was already gone.
  std::string sender_name;

  // "SIGTERM from pid 1 (systemd)", "SIGINT from outside this PID namespace".
  std::string Describe() const;
};

struct ServiceSignalHandlers {
  // The first SIGTERM or SIGINT. Required.
  std::function<void(const ReceivedSignal&)> stop;
  // SIGTERM or SIGINT while stopping. Default: none (ignored).
  std::function<void(const ReceivedSignal&)> hurry;
  // SIGHUP. Default: none (ignored, so SIGHUP never kills the daemon).
  std::function<void(const ReceivedSignal&)> reload;
};

class ServiceSignals {
 public:
  ServiceSignals(boost::asio::io_context& io, ServiceSignalHandlers handlers);
  ~ServiceSignals();

  ServiceSignals(const ServiceSignals&) = delete;
  ServiceSignals& operator=(const ServiceSignals&) = delete;

  // Catches SIGTERM, SIGINT and SIGHUP from now on. Fails when the pipe cannot be made
  // or another ServiceSignals is started.
  Status Start();
  // Stops handling them: the default actions apply again.
  void Cancel();
  bool stopping() const { return stopping_; }

 private:
  // The bytes the signal handler writes for one signal (less than PIPE_BUF: atomic).
  struct Record {
    int32_t signo;
    int32_t pid;
  };

  void ReadNext();
  void Dispatch(const Record& record);

  boost::asio::posix::stream_descriptor reader_;
  ServiceSignalHandlers handlers_;
  int write_fd_ = -1;
  Record record_{};
  bool started_ = false;
  bool stopping_ = false;
};

}  // namespace systemd
}  // namespace traintl
