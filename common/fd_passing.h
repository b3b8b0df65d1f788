// Passing a file descriptor over a Unix socket (SCM_RIGHTS) together with bytes: how the
// agent hands a warm worker the rank's log with its launch (worker/warm_start.h).
//
// Thread-safety: free functions.
#pragma once

#include <string>

#include "common/status.h"

namespace traintl {

// Sends `data` with `fd` attached in one sendmsg(2) (MSG_NOSIGNAL | `flags`). A short
// write is an error: the caller sends what fits a socket buffer.
Status SendWithFd(int socket, const std::string& data, int fd, int flags = 0);

}  // namespace traintl
