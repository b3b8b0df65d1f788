// NotifyListener: what systemd does on its side of the sd_notify protocol, for tests.
//
// Thread-safety: one thread at a time.
#pragma once

#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace traintl {
namespace systemd {
namespace testing {

using namespace std::chrono_literals;

// A bound datagram socket that collects messages, as systemd binds NOTIFY_SOCKET.
class NotifyListener {
 public:
  // abstract: bind "@name" in the abstract namespace instead of a file.
  explicit NotifyListener(bool abstract = false) {
    std::random_device rd;
    std::string tag = std::to_string(::getpid()) + "-" + std::to_string(rd());
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    socklen_t len;
    if (abstract) {
      path_ = "@traintl-notify-test-" + tag;
      std::memcpy(addr.sun_path + 1, path_.data() + 1, path_.size() - 1);
      len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path_.size());
    } else {
      char tmpl[] = "/tmp/traintl-notify-XXXXXX";
      REQUIRE(::mkdtemp(tmpl) != nullptr);
      dir_ = tmpl;
      path_ = dir_ + "/notify";
      std::memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
      len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path_.size() + 1);
    }
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) == 0);
  }
  ~NotifyListener() {
    ::close(fd_);
    if (!dir_.empty()) {
      ::unlink(path_.c_str());
      ::rmdir(dir_.c_str());
    }
  }

  const std::string& path() const { return path_; }

  // The next message, or "" when none arrives within `timeout` (a generous bound; the
  // tests never assert on how fast a message comes).
  std::string Receive(std::chrono::milliseconds timeout = 10s) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return "";
    char buf[4096];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  }
  // Every message already queued.
  std::vector<std::string> Drain() {
    std::vector<std::string> out;
    for (;;) {
      char buf[4096];
      ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
      if (n <= 0) return out;
      out.emplace_back(buf, static_cast<size_t>(n));
    }
  }
  // Waits for `count` WATCHDOG=1 messages; false when one does not come in time.
  bool ReceivePings(int count) {
    for (int i = 0; i < count; ++i) {
      std::string m = Receive();
      if (m.empty()) return false;
      if (m != "WATCHDOG=1") {
        UNSCOPED_INFO("unexpected message: " << m);
        return false;
      }
    }
    return true;
  }

 private:
  int fd_ = -1;
  std::string dir_;
  std::string path_;
};

}  // namespace testing
}  // namespace systemd
}  // namespace traintl
