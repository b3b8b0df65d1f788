// ServiceSignals with real signals raised at this process.
#include "daemon/systemd/service_signals.h"

#include <signal.h>

#include <boost/asio.hpp>
#include <chrono>
#include <vector>

#include <catch2/catch.hpp>

namespace asio = boost::asio;
using traintl::systemd::ServiceSignalHandlers;
using traintl::systemd::ServiceSignals;

namespace {

// Runs the loop until `done` or until it has nothing left to do.
template <class Pred>
void RunUntil(asio::io_context& io, Pred done) {
  while (!done()) {
    io.restart();
    if (io.run_one_for(std::chrono::seconds(10)) == 0) return;
  }
}

}  // namespace

TEST_CASE("SIGHUP reloads, SIGTERM stops once, another stop signal hurries") {
  asio::io_context io;
  std::vector<std::string> events;
  ServiceSignalHandlers h;
  h.reload = [&] { events.push_back("reload"); };
  h.stop = [&](int sig) { events.push_back(sig == SIGTERM ? "stop:TERM" : "stop:INT"); };
  h.hurry = [&](int sig) { events.push_back(sig == SIGTERM ? "hurry:TERM" : "hurry:INT"); };
  ServiceSignals signals(io, h);
  signals.Start();

  ::raise(SIGHUP);
  RunUntil(io, [&] { return events.size() == 1; });
  ::raise(SIGHUP);
  RunUntil(io, [&] { return events.size() == 2; });
  CHECK_FALSE(signals.stopping());
  ::raise(SIGTERM);
  RunUntil(io, [&] { return events.size() == 3; });
  CHECK(signals.stopping());
  ::raise(SIGINT);
  RunUntil(io, [&] { return events.size() == 4; });
  ::raise(SIGHUP);  // still reloads while stopping
  RunUntil(io, [&] { return events.size() == 5; });
  CHECK(events == std::vector<std::string>{"reload", "reload", "stop:TERM", "hurry:INT", "reload"});
  signals.Cancel();
}

TEST_CASE("without a reload handler SIGHUP is ignored, not fatal") {
  asio::io_context io;
  int stops = 0;
  ServiceSignalHandlers h;
  h.stop = [&](int) { ++stops; };
  ServiceSignals signals(io, h);
  signals.Start();
  ::raise(SIGHUP);  // would terminate the test binary if it were not handled
  ::raise(SIGTERM);
  RunUntil(io, [&] { return stops == 1; });
  CHECK(stops == 1);
  signals.Cancel();
}
