#include "common/fd_passing.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include <cstring>

namespace traintl {

Status SendWithFd(int socket, const std::string& data, int fd, int flags) {
  iovec iov{const_cast<char*>(data.data()), data.size()};
  char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  ssize_t n;
  do {
    n = ::sendmsg(socket, &msg, MSG_NOSIGNAL | flags);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Status::Unavailable(std::string("sendmsg: ") + ::strerror(errno));
  if (n != static_cast<ssize_t>(data.size())) return Status::Unavailable("short sendmsg");
  return Status::Ok();
}

}  // namespace traintl
