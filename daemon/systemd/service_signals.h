// ServiceSignals: the signals a service manager sends traintld, handled on its event
// loop. SIGTERM or SIGINT asks for a graceful stop (once; another one while stopping asks
// to hurry), SIGHUP for a reload of what can change at run time (`systemctl reload`).
//
// Thread-safety: construct, Start and Cancel on the io_context's thread (or before it
// runs); the handlers run there too.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <functional>

namespace traintl {
namespace systemd {

struct ServiceSignalHandlers {
  // The first SIGTERM or SIGINT (the signal number is passed). Required.
  std::function<void(int signal)> stop;
  // SIGTERM or SIGINT while stopping. Default: none (ignored).
  std::function<void(int signal)> hurry;
  // SIGHUP. Default: none (ignored, so SIGHUP never kills the daemon).
  std::function<void()> reload;
};

class ServiceSignals {
 public:
  ServiceSignals(boost::asio::io_context& io, ServiceSignalHandlers handlers);

  ServiceSignals(const ServiceSignals&) = delete;
  ServiceSignals& operator=(const ServiceSignals&) = delete;

  // Starts waiting for SIGTERM, SIGINT and SIGHUP.
  void Start();
  // Stops handling them (the default actions apply again once every set is gone).
  void Cancel();
  bool stopping() const { return stopping_; }

 private:
  void Wait();

  boost::asio::signal_set signals_;
  ServiceSignalHandlers handlers_;
  bool stopping_ = false;
  bool cancelled_ = false;
};

}  // namespace systemd
}  // namespace traintl
