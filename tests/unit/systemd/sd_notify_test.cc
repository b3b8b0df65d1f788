// The sd_notify protocol against a real NOTIFY_SOCKET listener: a Unix datagram socket
// that this test binds, as systemd does for a Type=notify service.
#include "daemon/systemd/sd_notify.h"

#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "notify_listener.h"

namespace asio = boost::asio;
using traintl::systemd::Notifier;
using traintl::systemd::Watchdog;
using traintl::systemd::WatchdogOptions;
using traintl::systemd::testing::NotifyListener;
using namespace std::chrono_literals;

namespace {

// Sets environment variables for one test and restores them afterwards.
class ScopedEnv {
 public:
  ScopedEnv() {
    for (const char* name : {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"}) {
      const char* v = ::getenv(name);
      saved_.push_back({name, v != nullptr, v != nullptr ? v : ""});
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    for (const auto& s : saved_) {
      if (s.set) {
        ::setenv(s.name.c_str(), s.value.c_str(), 1);
      } else {
        ::unsetenv(s.name.c_str());
      }
    }
  }
  void Set(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }

 private:
  struct Saved {
    std::string name;
    bool set;
    std::string value;
  };
  std::vector<Saved> saved_;
};

// Runs an io_context on its own thread, as traintld's event loop.
class LoopThread {
 public:
  LoopThread() : guard_(asio::make_work_guard(io_)), thread_([this] { io_.run(); }) {}
  ~LoopThread() {
    guard_.reset();
    io_.stop();
    thread_.join();
  }
  asio::io_context& io() { return io_; }
  // Runs `fn` on the loop and waits for it.
  template <class F>
  void Sync(F fn) {
    std::promise<void> done;
    asio::post(io_, [&] {
      fn();
      done.set_value();
    });
    done.get_future().wait();
  }

 private:
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::thread thread_;
};

}  // namespace

TEST_CASE("a disabled notifier sends nothing and succeeds") {
  ScopedEnv env;
  Notifier n = Notifier::FromEnvironment();
  CHECK_FALSE(n.enabled());
  CHECK_FALSE(n.watchdog_interval().has_value());
  CHECK(n.setup_error().ok());
  CHECK(n.Ready("up").ok());
  CHECK(n.SetStatus("x").ok());
  CHECK(n.WatchdogPing().ok());
  CHECK(n.Stopping().ok());

  asio::io_context io;
  Watchdog wd(io, &n);
  CHECK_FALSE(wd.enabled());
  wd.Start();
  CHECK_FALSE(wd.running());
}

TEST_CASE("READY, STATUS, RELOADING, STOPPING reach the NOTIFY_SOCKET listener") {
  for (bool abstract : {false, true}) {
    SECTION(abstract ? "abstract socket" : "socket file") {
      NotifyListener listener(abstract);
      ScopedEnv env;
      env.Set("NOTIFY_SOCKET", listener.path());
      Notifier n = Notifier::FromEnvironment();
      REQUIRE(n.enabled());
      CHECK(n.socket_path() == listener.path());

      REQUIRE(n.Ready("role=head head=node-1").ok());
      CHECK(listener.Receive() == "READY=1\nSTATUS=role=head head=node-1");
      REQUIRE(n.Ready().ok());
      CHECK(listener.Receive() == "READY=1");
      REQUIRE(n.SetStatus("role=agent\nhead=node-2").ok());
      CHECK(listener.Receive() == "STATUS=role=agent head=node-2");  // one line
      REQUIRE(n.Reloading("reloading").ok());
      std::string reloading = listener.Receive();
      CHECK_THAT(reloading, Catch::StartsWith("RELOADING=1\nMONOTONIC_USEC="));
      CHECK_THAT(reloading, Catch::EndsWith("\nSTATUS=reloading"));
      REQUIRE(n.ExtendTimeout(20s).ok());
      CHECK(listener.Receive() == "EXTEND_TIMEOUT_USEC=20000000");
      REQUIRE(n.Stopping("stopping").ok());
      CHECK(listener.Receive() == "STOPPING=1\nSTATUS=stopping");
    }
  }
}

TEST_CASE("FromEnvironment takes the variables out of the environment") {
  NotifyListener listener;
  ScopedEnv env;
  env.Set("NOTIFY_SOCKET", listener.path());
  env.Set("WATCHDOG_USEC", "2000000");
  env.Set("WATCHDOG_PID", std::to_string(::getpid()));
  Notifier n = Notifier::FromEnvironment();
  REQUIRE(n.watchdog_interval().has_value());
  CHECK(n.watchdog_interval()->count() == 2000000);
  // Workers inherit the daemon's environment: they must not see them.
  CHECK(::getenv("NOTIFY_SOCKET") == nullptr);
  CHECK(::getenv("WATCHDOG_USEC") == nullptr);
  CHECK(::getenv("WATCHDOG_PID") == nullptr);

  asio::io_context io;
  Watchdog wd(io, &n);
  CHECK(wd.enabled());
  CHECK(wd.ping_interval().count() == 1000000);  // half of WATCHDOG_USEC
}

TEST_CASE("the watchdog is another process's when WATCHDOG_PID is not ours") {
  NotifyListener listener;
  ScopedEnv env;
  env.Set("NOTIFY_SOCKET", listener.path());
  env.Set("WATCHDOG_USEC", "2000000");
  env.Set("WATCHDOG_PID", std::to_string(::getpid() + 1));
  Notifier n = Notifier::FromEnvironment();
  CHECK(n.enabled());
  CHECK_FALSE(n.watchdog_interval().has_value());
  asio::io_context io;
  Watchdog wd(io, &n);
  CHECK_FALSE(wd.enabled());
}

TEST_CASE("a malformed environment disables what it names, with a reason") {
  ScopedEnv env;
  SECTION("bad WATCHDOG_USEC") {
    NotifyListener listener;
    env.Set("NOTIFY_SOCKET", listener.path());
    env.Set("WATCHDOG_USEC", "soon");
    Notifier n = Notifier::FromEnvironment();
    CHECK(n.enabled());
    CHECK_FALSE(n.watchdog_interval().has_value());
    CHECK_FALSE(n.setup_error().ok());
    CHECK_THAT(n.setup_error().message(), Catch::Contains("WATCHDOG_USEC"));
  }
  SECTION("a socket address that is not a path") {
    env.Set("NOTIFY_SOCKET", "vsock:2:1234");
    Notifier n = Notifier::FromEnvironment();
    CHECK_FALSE(n.enabled());
    CHECK_THAT(n.setup_error().message(), Catch::Contains("vsock:2:1234"));
  }
}

TEST_CASE("a listener that is gone is an error, not a crash") {
  std::string path;
  {
    NotifyListener listener;
    path = listener.path();
  }
  Notifier n(path);
  REQUIRE(n.enabled());
  traintl::Status st = n.Ready();
  CHECK(st.code() == traintl::Status::Code::kUnavailable);
  CHECK_THAT(st.message(), Catch::Contains(path));
}

TEST_CASE("watchdog pings come from the event loop and stop while it is blocked") {
  NotifyListener listener;
  ScopedEnv env;
  env.Set("NOTIFY_SOCKET", listener.path());
  env.Set("WATCHDOG_USEC", "100000");  // pings every 50 ms
  Notifier n = Notifier::FromEnvironment();
  LoopThread loop;
  Watchdog wd(loop.io(), &n);
  REQUIRE(wd.enabled());
  loop.Sync([&] { wd.Start(); });
  CHECK(listener.ReceivePings(3));

  // Wedge the loop. Once the blocking handler runs, no ping can be in flight: each one
  // is a synchronous sendto() on the loop thread, already queued at the listener.
  std::promise<void> blocked, release;
  std::shared_future<void> released = release.get_future().share();
  asio::post(loop.io(), [&blocked, released] {
    blocked.set_value();
    released.wait();
  });
  blocked.get_future().wait();
  listener.Drain();
  CHECK(listener.Receive(500ms).empty());  // 10 intervals: a ping would have come
  release.set_value();
  CHECK(listener.ReceivePings(2));  // the loop runs again: so do the pings

  loop.Sync([&] { wd.Stop(); });
  listener.Drain();
  CHECK(listener.Receive(300ms).empty());
}

TEST_CASE("the watchdog pings only while healthy() says so") {
  NotifyListener listener;
  Notifier n(listener.path(), std::chrono::microseconds(100000));
  std::atomic<bool> healthy{true};
  WatchdogOptions opts;
  opts.healthy = [&healthy] { return healthy.load(); };
  LoopThread loop;
  Watchdog wd(loop.io(), &n, opts);
  loop.Sync([&] { wd.Start(); });
  CHECK(listener.ReceivePings(2));

  healthy = false;
  loop.Sync([] {});  // a tick that read `true` has finished its ping
  listener.Drain();
  CHECK(listener.Receive(500ms).empty());
  healthy = true;
  CHECK(listener.ReceivePings(2));
  loop.Sync([&] { wd.Stop(); });
}

TEST_CASE("an explicit ping interval overrides half of WATCHDOG_USEC") {
  NotifyListener listener;
  Notifier n(listener.path(), std::chrono::microseconds(60000000));
  asio::io_context io;
  WatchdogOptions opts;
  opts.ping_interval = 20ms;
  Watchdog wd(io, &n, opts);
  CHECK(wd.ping_interval() == std::chrono::microseconds(20000));
  Watchdog by_default(io, &n);
  CHECK(by_default.ping_interval() == std::chrono::microseconds(30000000));
  // Start() pings at once, before the loop runs.
  wd.Start();
  CHECK(listener.Receive() == "WATCHDOG=1");
  wd.Stop();
}
