#include "daemon/consensus/raft_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace traintl::raft_internal {

// Splits "host:port"; port must be a decimal number in [0, 65535].
Status SplitHostPort(const std::string& address, std::string* host, int* port) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return Status::InvalidArgument("raft address '" + address + "' is not host:port");
  }
  std::string port_text = address.substr(colon + 1);
  if (port_text.size() > 5 || port_text.find_first_not_of("0123456789") != std::string::npos) {
    return Status::InvalidArgument("raft address '" + address + "' has a bad port");
  }
  int p = std::stoi(port_text);
  if (p > 65535) return Status::InvalidArgument("raft address '" + address + "' has a bad port");
  *host = address.substr(0, colon);
  *port = p;
  return Status::Ok();
}

// True for "localhost" and IPv4 127.0.0.0/8 literals.
bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost") return true;
  in_addr a{};
  return inet_pton(AF_INET, host.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

// A port of `host` that is free right now (bind to port 0, read it back, close). Another
// process could take it before raft listens on it; Start then fails with a clear error.
Result<int> PickFreePort(const std::string& host) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  if (inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1) {
    return Status::InvalidArgument("raft address port 0 needs an IPv4 literal host, not '" + host +
                                   "'");
  }
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Internal(std::string("socket: ") + std::strerror(errno));
  sa.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    Status st = Status::Unavailable("bind " + host + ":0: " + std::strerror(errno));
    ::close(fd);
    return st;
  }
  socklen_t len = sizeof sa;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    Status st = Status::Internal(std::string("getsockname: ") + std::strerror(errno));
    ::close(fd);
    return st;
  }
  ::close(fd);
  return static_cast<int>(ntohs(sa.sin_port));
}

// C-Raft reports a failed listen as a bare "I/O error"; this tells the usual cause.
bool AddressInUse(const std::string& address) {
  std::string host;
  int port = 0;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  if (!SplitHostPort(address, &host, &port).ok() || port == 0 ||
      inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1) {
    return false;
  }
  sa.sin_port = htons(static_cast<uint16_t>(port));
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // as libuv does
  bool in_use = ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 && errno == EADDRINUSE;
  ::close(fd);
  return in_use;
}

}  // namespace traintl::raft_internal
