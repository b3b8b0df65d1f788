// ForkWithDefaultSignals with real processes and signals: a signal that reaches the child
// before it is ready must act on the child, never run the parent's handler there.
#include "common/signal_safe_fork.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

namespace {

int g_pipe_write = -1;

// The daemon's kind of handler: the signal goes into a self-pipe.
void WriteToPipe(int) {
  ssize_t ignored = ::write(g_pipe_write, "s", 1);
  (void)ignored;
}

// Forks with `fork_fn`, SIGTERMs the child while it waits with the signal blocked or
// handled, then lets it go on to UnblockAllSignals and _exit(0). Returns what the
// parent's self-pipe received, and the child's wait status in `status`.
template <class ForkFn>
std::string StopAChildBeforeItIsReady(ForkFn fork_fn, int* status) {
  int self_pipe[2], go[2];
  REQUIRE(::pipe2(self_pipe, O_NONBLOCK) == 0);
  REQUIRE(::pipe(go) == 0);
  g_pipe_write = self_pipe[1];
  struct sigaction sa = {}, old = {};
  sa.sa_handler = WriteToPipe;
  sigemptyset(&sa.sa_mask);
  REQUIRE(::sigaction(SIGTERM, &sa, &old) == 0);

  const pid_t child = fork_fn();
  REQUIRE(child >= 0);
  if (child == 0) {
    char c;
    while (::read(go[0], &c, 1) < 0) {
    }
    traintl::UnblockAllSignals();
    ::_exit(0);
  }
  ::kill(child, SIGTERM);
  // Give a wrongly inherited handler time to run before the child is released.
  ::usleep(50 * 1000);
  ssize_t n = ::write(go[1], "g", 1);
  CHECK(n == 1);
  REQUIRE(::waitpid(child, status, 0) == child);
  ::sigaction(SIGTERM, &old, nullptr);
  std::string got;
  char buf[16];
  for (ssize_t r; (r = ::read(self_pipe[0], buf, sizeof buf)) > 0;) got.append(buf, r);
  for (int fd : {self_pipe[0], self_pipe[1], go[0], go[1]}) ::close(fd);
  return got;
}

}  // namespace

TEST_CASE("a signal sent before the child is ready kills the child, not the parent's pipe") {
  int status = 0;
  const std::string got = StopAChildBeforeItIsReady(traintl::ForkWithDefaultSignals, &status);
  CHECK(got.empty());
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGTERM);
}

TEST_CASE("with plain fork the parent's handler runs in the child (what the helper prevents)") {
  int status = 0;
  const std::string got = StopAChildBeforeItIsReady(::fork, &status);
  CHECK(got == "s");  // the parent would believe it was signalled
  REQUIRE(WIFEXITED(status));
}

TEST_CASE("the parent's signal mask is unchanged") {
  sigset_t before, after;
  ::pthread_sigmask(SIG_SETMASK, nullptr, &before);
  const pid_t child = traintl::ForkWithDefaultSignals();
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(0);
  ::pthread_sigmask(SIG_SETMASK, nullptr, &after);
  int status = 0;
  ::waitpid(child, &status, 0);
  for (int s = 1; s < NSIG; ++s) CHECK(sigismember(&before, s) == sigismember(&after, s));
}
