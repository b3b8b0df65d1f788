#include "daemon/systemd/service_signals.h"

#include <signal.h>

#include <utility>

namespace traintl {
namespace systemd {

ServiceSignals::ServiceSignals(boost::asio::io_context& io, ServiceSignalHandlers handlers)
    : signals_(io, SIGTERM, SIGINT, SIGHUP), handlers_(std::move(handlers)) {}

void ServiceSignals::Start() {
  cancelled_ = false;
  Wait();
}

void ServiceSignals::Cancel() {
  cancelled_ = true;
  boost::system::error_code ec;
  signals_.cancel(ec);
}

void ServiceSignals::Wait() {
  signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
    if (ec || cancelled_) return;
    // Re-armed first: a handler may take a while, and signals meanwhile stay queued.
    Wait();
    if (sig == SIGHUP) {
      if (handlers_.reload) handlers_.reload();
    } else if (!stopping_) {
      stopping_ = true;
      handlers_.stop(sig);
    } else if (handlers_.hurry) {
      handlers_.hurry(sig);
    }
  });
}

}  // namespace systemd
}  // namespace traintl
