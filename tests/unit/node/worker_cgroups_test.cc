// WorkerCgroups on the machine's real cgroup v2 file system (skipped, saying why, where
// the test process cannot create cgroups), and its parsing of /proc texts.
#include "daemon/node/worker_cgroups.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>

#include "common/crypto.h"
#include "common/file_util.h"

using traintl::WorkerCgroups;

namespace {

bool Alive(pid_t pid) {
  // A zombie is dead for this purpose: reap it if it is our child; an orphan's zombie
  // waits for init, so read its state.
  int status;
  if (::waitpid(pid, &status, WNOHANG) == pid) return false;
  auto stat = traintl::ReadFile("/proc/" + std::to_string(pid) + "/stat");
  if (!stat.ok()) return false;
  size_t paren = stat->rfind(')');
  return paren != std::string::npos && paren + 2 < stat->size() && (*stat)[paren + 2] != 'Z';
}

bool WaitGone(pid_t pid) {
  for (int i = 0; i < 500; ++i) {
    if (!Alive(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Forks a child that joins `procs` and then starts a grandchild in a session of its own
// (setsid: out of reach of process-group kills); returns the child, writes the grandchild.
// `close_fd` (a reaper's socket) is closed in the children, as exec would.
pid_t StartEscapingChild(const std::string& procs, pid_t* grandchild, int close_fd = -1) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (close_fd >= 0) ::close(close_fd);
    if (WorkerCgroups::AttachSelf(procs.c_str()) != 0) ::_exit(3);
    pid_t g = ::fork();
    if (g == 0) {
      ::setsid();
      for (;;) ::pause();
    }
    ssize_t unused = ::write(fds[1], &g, sizeof g);
    (void)unused;
    for (;;) ::pause();
  }
  ::close(fds[1]);
  REQUIRE(::read(fds[0], grandchild, sizeof *grandchild) == sizeof *grandchild);
  ::close(fds[0]);
  return pid;
}

}  // namespace

TEST_CASE("WorkerCgroups finds the cgroup2 mount and this process's path") {
  WorkerCgroups none;
  auto st = none.Init("k", "36 35 0:31 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n", "0::/\n");
  CHECK_FALSE(st.ok());
  CHECK(st.message().find("no cgroup v2") != std::string::npos);
  CHECK_FALSE(none.enabled());
  WorkerCgroups no_path;
  st = no_path.Init("k", "1 2 0:1 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "1:cpu:/\n");
  CHECK(st.message().find("no cgroup v2 path") != std::string::npos);
}

TEST_CASE("a worker's cgroup ends everything it started, setsid escapes included") {
  WorkerCgroups cg;
  auto st = cg.Init("test-" + traintl::RandomHex(6));
  if (!st.ok()) {
    WARN("skipped: cgroups are unavailable here: " << st.message());
    return;
  }
  auto dir = cg.CreateWorker("job1", 1, 0);
  REQUIRE(dir.ok());
  pid_t grandchild = -1;
  pid_t child = StartEscapingChild(*dir + "/cgroup.procs", &grandchild);
  auto members = WorkerCgroups::Members(cg.AttemptPath("job1", 1));
  CHECK(members.size() == 2);
  // The worker exits (here: killed), its escaped grandchild lives on until the cgroup goes.
  ::kill(child, SIGKILL);
  REQUIRE(WaitGone(child));
  CHECK(Alive(grandchild));
  REQUIRE(cg.KillWorker("job1", 1, 0).ok());
  CHECK(WaitGone(grandchild));
  CHECK_FALSE(traintl::PathExists(cg.AttemptPath("job1", 1)));  // its last worker was gone
  CHECK(cg.KillAll().ok());
  ::rmdir(cg.root().c_str());
}

TEST_CASE("a restarted daemon (same key) kills what its predecessor left") {
  const std::string key = "test-" + traintl::RandomHex(6);
  pid_t child = -1, grandchild = -1;
  std::string root;
  {
    WorkerCgroups before;
    if (!before.Init(key).ok()) {
      WARN("skipped: cgroups are unavailable here");
      return;
    }
    auto dir = before.CreateWorker("job2", 3, 1);
    REQUIRE(dir.ok());
    child = StartEscapingChild(*dir + "/cgroup.procs", &grandchild);
    root = before.root();
  }  // the daemon "died": nothing was killed
  CHECK(Alive(grandchild));
  WorkerCgroups after;
  REQUIRE(after.Init(key).ok());
  CHECK(WaitGone(child));
  CHECK(WaitGone(grandchild));
  CHECK(WorkerCgroups::Members(root).empty());
  ::rmdir(root.c_str());
}

TEST_CASE("the reaper kills the cgroups and process groups of a daemon that died") {
  // The "daemon" is a forked child that starts the reaper and a worker, then dies by
  // SIGKILL; the reaper (its child) must clean up after it.
  const std::string key = "test-" + traintl::RandomHex(6);
  WorkerCgroups probe;
  const bool have_cgroups = probe.Init(key).ok();
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  pid_t daemon = ::fork();
  REQUIRE(daemon >= 0);
  if (daemon == 0) {
    WorkerCgroups cg;
    (void)cg.Init(key);
    traintl::OrphanReaper reaper;
    if (!reaper.Start(cg.root())) ::_exit(2);
    pid_t pids[3] = {-1, -1, -1};  // group worker, its group child, escaped grandchild
    pids[0] = ::fork();
    if (pids[0] == 0) {
      ::close(reaper.fd());  // as exec would (close-on-exec)
      ::setpgid(0, 0);
      for (;;) ::pause();
    }
    ::setpgid(pids[0], pids[0]);
    reaper.Track(pids[0]);
    if (cg.enabled()) {
      auto dir = cg.CreateWorker("job3", 1, 0);
      if (!dir.ok()) ::_exit(4);
      pids[1] = StartEscapingChild(*dir + "/cgroup.procs", &pids[2], reaper.fd());
    }
    ssize_t unused = ::write(fds[1], pids, sizeof pids);
    (void)unused;
    for (;;) ::pause();
  }
  ::close(fds[1]);
  pid_t pids[3];
  REQUIRE(::read(fds[0], pids, sizeof pids) == sizeof pids);
  ::close(fds[0]);
  for (pid_t p : pids)
    if (p > 0) CHECK(Alive(p));
  ::kill(daemon, SIGKILL);
  ::waitpid(daemon, nullptr, 0);
  for (pid_t p : pids) {
    if (p <= 0) continue;
    INFO("pid " << p);
    CHECK(WaitGone(p));
  }
  if (have_cgroups) {
    CHECK(WorkerCgroups::Members(probe.root()).empty());
    ::rmdir(probe.root().c_str());
  } else {
    WARN("cgroups unavailable: only the process-group part was tested");
  }
}
