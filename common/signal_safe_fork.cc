#include "common/signal_safe_fork.h"

#include <errno.h>
#include <signal.h>
#include <unistd.h>

namespace traintl {

pid_t ForkWithDefaultSignals() {
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t pid = ::fork();
  if (pid == 0) {
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    // SIGKILL and SIGSTOP refuse; nothing else does.
    for (int s = 1; s < NSIG; ++s) ::sigaction(s, &dfl, nullptr);
    return 0;
  }
  const int saved_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  errno = saved_errno;
  return pid;
}

void UnblockAllSignals() {
  sigset_t none;
  sigemptyset(&none);
  ::pthread_sigmask(SIG_SETMASK, &none, nullptr);
}

}  // namespace traintl
