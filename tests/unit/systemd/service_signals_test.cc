// ServiceSignals with real signals raised at this process.
#include "daemon/systemd/service_signals.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <chrono>
#include <vector>

#include <catch2/catch.hpp>

namespace asio = boost::asio;
using traintl::systemd::ReceivedSignal;
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
  h.reload = [&](const ReceivedSignal&) { events.push_back("reload"); };
  h.stop = [&](const ReceivedSignal& s) {
    events.push_back(s.signo == SIGTERM ? "stop:TERM" : "stop:INT");
  };
  h.hurry = [&](const ReceivedSignal& s) {
    events.push_back(s.signo == SIGTERM ? "hurry:TERM" : "hurry:INT");
  };
  ServiceSignals signals(io, h);
  REQUIRE(signals.Start().ok());

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
  h.stop = [&](const ReceivedSignal&) { ++stops; };
  ServiceSignals signals(io, h);
  REQUIRE(signals.Start().ok());
  ::raise(SIGHUP);  // would terminate the test binary if it were not handled
  ::raise(SIGTERM);
  RunUntil(io, [&] { return stops == 1; });
  CHECK(stops == 1);
  signals.Cancel();
}

TEST_CASE("the handler learns the sender's pid and name") {
  asio::io_context io;
  std::vector<ReceivedSignal> got;
  ServiceSignalHandlers h;
  h.stop = [&](const ReceivedSignal& s) { got.push_back(s); };
  h.hurry = h.stop;
  ServiceSignals signals(io, h);
  REQUIRE(signals.Start().ok());

  ::raise(SIGTERM);
  RunUntil(io, [&] { return got.size() == 1; });
  REQUIRE(got.size() == 1);
  CHECK(got[0].sender_pid == ::getpid());
  CHECK(got[0].Describe().rfind("SIGTERM from pid " + std::to_string(::getpid()) + " (", 0) == 0);

  // A child that names itself, sends SIGINT to its parent and waits to be reaped: the
  // name is read while it still exists.
  int go[2];
  REQUIRE(::pipe(go) == 0);
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::prctl(PR_SET_NAME, "stray-killer");
    ::kill(::getppid(), SIGINT);
    char c;
    ssize_t n = ::read(go[0], &c, 1);  // until the parent has looked
    ::_exit(n == 1 ? 0 : 1);
  }
  RunUntil(io, [&] { return got.size() == 2; });
  ssize_t n = ::write(go[1], "x", 1);
  CHECK(n == 1);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(go[0]);
  ::close(go[1]);
  REQUIRE(got.size() == 2);
  CHECK(got[1].signo == SIGINT);
  CHECK(got[1].sender_pid == child);
  CHECK(got[1].Describe() == "SIGINT from pid " + std::to_string(child) + " (stray-killer)");
  signals.Cancel();
}

TEST_CASE("only one ServiceSignals is started at a time") {
  asio::io_context io;
  ServiceSignalHandlers h;
  h.stop = [](const ReceivedSignal&) {};
  ServiceSignals first(io, h);
  ServiceSignals second(io, h);
  REQUIRE(first.Start().ok());
  CHECK(second.Start().code() == traintl::Status::Code::kFailedPrecondition);
  first.Cancel();
  CHECK(second.Start().ok());
  second.Cancel();
}
