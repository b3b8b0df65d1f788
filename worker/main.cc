// traintl-worker: one process per rank. Loads the user's training library, calls its entry
// point, and serves the SDK calls over the channel to the node agent (fd 3).
// The contract with the agent is docs/WORKER_PROTOCOL.md.
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "common/file_util.h"
#include "common/lease_clock.h"
#include "common/logging.h"
#include "proto/rank_context.h"
#include "traintl/abi.h"
#include "worker/agent_channel.h"
#include "worker/command_runner.h"
#include "worker/library_loader.h"
#include "worker/warm_start.h"
#include "worker/worker_host.h"

namespace traintl {
namespace worker {
namespace {

constexpr int kChannelFd = 3;
// Exit codes of docs/WORKER_PROTOCOL.md.
constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitLibrary = 3;
constexpr int kExitEntry = 4;
// Room for an exception message with a LibTorch backtrace.
constexpr size_t kErrorBufferSize = 64 * 1024;

constexpr char kUsage[] =
    "usage: traintl-worker --context FILE | --warm\n"
    "Runs one rank of a traintl job; started by traintld with the agent channel on fd 3.\n"
    "--warm: loads LibTorch and Python first, then waits on fd 3 for the rank to run.\n";

// Ends the process without running static destructors: the library's threads (Gloo, NCCL,
// data loaders) may still run, and LibTorch's exit-time teardown can hang or crash then.
[[noreturn]] void Exit(int code) {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(code);
}

// The reason line users see last in the rank's log.
void PrintReason(const std::string& reason) {
  std::fflush(stdout);
  std::string line = "traintl-worker: " + reason + "\n";
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

// Fails before or without running the entry point: tells the agent (when the channel is
// up) and exits with `code`.
[[noreturn]] void Fail(AgentChannel* channel, int code, const std::string& reason, bool retryable) {
  PrintReason(reason);
  if (channel != nullptr) {
    Status ignored = channel->Send(events::Done{false, reason, retryable});
    (void)ignored;
  }
  Exit(code);
}

// Exposes the rank to the library and anything it starts; for a library only TRAINTL_*
// names, so that nothing the user set (or a launcher convention such as RANK) is
// overridden (but the framework's: TF_CONFIG, DMLC_*); python and command ranks also get
// torchrun's.
void SetEnvironment(const RankContext& c) {
  for (const auto& [name, value] : RankEnvironment(c)) ::setenv(name.c_str(), value.c_str(), 1);
  for (const auto& [name, value] : FrameworkEnvironment(c))
    ::setenv(name.c_str(), value.c_str(), 1);
  if (c.entry_kind == "library") return;
  for (const auto& [name, value] : LauncherEnvironment(c)) ::setenv(name.c_str(), value.c_str(), 1);
}

// <prefix>/lib/traintl beside <prefix>/bin/traintl-worker: the Python entry shim and the
// traintl package (python/CMakeLists.txt puts them there in the build tree too).
std::string RuntimeLibDir() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "/usr/lib/traintl";
  std::string exe(buf, static_cast<size_t>(n));
  std::string bin = exe.substr(0, exe.rfind('/'));
  return bin.substr(0, bin.rfind('/')) + "/lib/traintl";
}

// A warm worker's command line ("traintl-worker --warm <spaces>") becomes the one a worker
// started for the rank has ("traintl-worker --context FILE"), in place: ps and anything
// that finds a job's workers by their context file see the rank. The arguments lie
// contiguously in memory; what does not fit stays as it was.
void ShowLaunchedCommandLine(int argc, char** argv, const std::string& context_path) {
  if (argc < 2) return;
  char* begin = argv[1];
  char* end = argv[argc - 1] + std::strlen(argv[argc - 1]);  // the last argument's NUL
  const std::string title = std::string("--context") + '\0' + context_path;
  if (title.size() > static_cast<size_t>(end - begin)) return;
  std::memcpy(begin, title.data(), title.size());
  std::memset(begin + title.size(), 0, static_cast<size_t>(end - begin) - title.size() + 1);
}

// A command entry point: the program runs as this process's child and owns the channel
// (command_runner.h); this process says hello, then done when it ends.
[[noreturn]] void RunCommandEntry(AgentChannel* channel, const RankContext& c,
                                  const std::string& context_path) {
  const char* path_env = std::getenv("PATH");
  auto program = ResolveProgram(c.command[0], path_env != nullptr ? path_env : "", c.working_dir);
  if (!program.ok()) Fail(channel, kExitEntry, program.status().message(), false);
  // The child reads the channel; an agent that hangs up must still end us (and with us,
  // through PR_SET_PDEATHSIG, the child). POLLRDHUP reports the hang-up without reading.
  std::thread([] {
    pollfd p{kChannelFd, POLLRDHUP, 0};
    for (;;) {
      int n = ::poll(&p, 1, -1);
      if (n > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) {
        PrintReason("the agent closed the channel; exiting");
        Exit(AgentChannel::kAgentGoneExitCode);
      }
    }
  }).detach();
  std::string pythonpath = RuntimeLibDir() + "/python";
  if (const char* old = std::getenv("PYTHONPATH"); old != nullptr && *old != '\0')
    pythonpath += std::string(":") + old;
  std::vector<std::string> argv = c.command;
  argv[0] = *program;
  Status hello = channel->Send(events::Hello{c.world_rank, ::getpid()});
  if (!hello.ok()) Fail(nullptr, kExitFailed, hello.message(), true);
  auto end =
      RunChild(argv, c.working_dir, kChannelFd,
               {"TRAINTL_CONTEXT_FILE=" + context_path,
                "TRAINTL_CHANNEL_FD=" + std::to_string(kChannelFd), "PYTHONPATH=" + pythonpath});
  if (!end.ok()) Fail(channel, kExitFailed, end.status().message(), true);
  if (end->signal != 0) {
    // It may have died in the middle of a line: end that line, so that "done" is whole.
    ssize_t ignored = ::write(kChannelFd, "\n", 1);
    (void)ignored;
  }
  if (!end->ok) {
    PrintReason(end->reason);
    events::Done done{false, end->reason, true};
    if (end->signal != 0) {
      done.command_signal = end->signal;
    } else {
      done.command_exit_code = end->exit_code;
    }
    Status ignored = channel->Send(done);
    (void)ignored;
    Exit(kExitFailed);
  }
  Status ignored = channel->Send(events::Done{true, "", true});
  (void)ignored;
  Exit(kExitOk);
}

int Run(int argc, char** argv) {
  // The log files are what users read: a line must reach them as soon as it is printed.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // The agent sets this before exec too; set it again in case we were started otherwise.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // A peer that died must be an error where the rank writes to it, not SIGPIPE: Gloo
  // writes to its peers with writev(2), and a survivor killed so cannot recover its group
  // (peer recovery). Python does the same at start-up; commands get the default back
  // (ForkWithDefaultSignals).
  ::signal(SIGPIPE, SIG_IGN);

  std::string context_path;
  bool warm = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return kExitOk;
    } else if (arg == "--warm") {
      warm = true;
    } else if (warm && arg.find_first_not_of(' ') == std::string::npos) {
      // Room for the command line the rank shows once launched (ShowLaunchedCommandLine).
    } else if (arg == "--context" && i + 1 < argc) {
      context_path = argv[++i];
    } else if (arg.rfind("--context=", 0) == 0) {
      context_path = arg.substr(std::strlen("--context="));
    } else {
      std::fputs(kUsage, stderr);
      Fail(nullptr, kExitUsage, "unexpected argument: " + arg, false);
    }
  }
  if (context_path.empty() == !warm) {
    std::fputs(kUsage, stderr);
    Fail(nullptr, kExitUsage, warm ? "--warm takes no --context" : "missing --context FILE", false);
  }

  const int fd_flags = ::fcntl(kChannelFd, F_GETFD);
  if (fd_flags < 0) {
    Fail(nullptr, kExitUsage, "fd 3 (the channel to the agent) is not open", false);
  }
  if (warm) {
    const std::string not_loaded = PreloadRuntimes(RuntimeLibDir());
    auto launch = ReceiveWarmLaunch(kChannelFd);
    if (!launch.ok()) {
      const bool gone = launch.status().code() == Status::Code::kUnavailable;
      Fail(nullptr, gone ? AgentChannel::kAgentGoneExitCode : kExitUsage, launch.status().message(),
           false);
    }
    // From here on the rank's log is stdout and stderr.
    if (Status st = ApplyWarmLaunch(*launch); !st.ok())
      Fail(nullptr, kExitUsage, st.message(), false);
    if (!not_loaded.empty())
      PrintReason("warm start without what could not be preloaded: " + not_loaded);
    context_path = launch->context_path;
    ShowLaunchedCommandLine(argc, argv, context_path);
  }
  // Processes the training code starts must not keep the agent's channel open.
  ::fcntl(kChannelFd, F_SETFD, fd_flags | FD_CLOEXEC);
  auto* channel = new AgentChannel(kChannelFd);  // lives until _exit

  auto text = ReadFile(context_path);
  if (!text.ok()) {
    Fail(channel, kExitUsage, "cannot read the context file: " + text.status().message(), false);
  }
  auto parsed = ParseRankContext(*text);
  if (!parsed.ok()) {
    Fail(channel, kExitUsage, context_path + ": " + parsed.status().message(), false);
  }
  RankContext context = std::move(parsed).value();

  // Before any thread exists: setenv is not thread-safe.
  SetEnvironment(context);
  SetLogTag("rank " + std::to_string(context.world_rank));
  if (context.lease_ms > 0) {
    Status lease = StartLeaseWatchdog(context.lease_fd, context.lease_ms, context.cgroup_kill);
    if (!lease.ok()) Fail(channel, kExitUsage, lease.message(), false);
  }
  if (context.entry_kind == "command") RunCommandEntry(channel, context, context_path);
  channel->Start();
  const bool python = context.entry_kind == "python";
  if (python) {
    // The Python entry point is a training library too: the shim embeds the interpreter
    // and runs module:function (python/python_entry.cc).
    context.library = RuntimeLibDir() + "/libtraintl_python.so";
    context.function = "python";
    context.library_name = "";
    if (::access(context.library.c_str(), R_OK) != 0) {
      Fail(channel, kExitEntry,
           "this traintl has no Python support: " + context.library +
               " is missing (install python3-traintl)",
           false);
    }
  }

  // A library on a hung file system (or swapped for a FIFO after the check) must fail the
  // attempt, not leave it starting forever.
  static std::atomic<bool> loading{true};
  const std::chrono::seconds load_timeout(context.library_load_timeout_s);
  std::thread([channel, load_timeout] {
    const auto deadline = std::chrono::steady_clock::now() + load_timeout;
    while (loading.load() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    bool expected = true;
    if (loading.compare_exchange_strong(expected, false)) {
      Fail(channel, kExitLibrary,
           "loading the library took longer than " + std::to_string(load_timeout.count()) + " s",
           false);
    }
  }).detach();
  auto library = LoadTrainingLibrary(context.library, context.function, context.library_name);
  bool expected = true;
  if (!loading.compare_exchange_strong(expected, false)) {
    for (;;) ::pause();  // the watchdog is failing the attempt
  }
  if (!library.ok()) {
    Fail(channel, python ? kExitEntry : kExitLibrary, library.status().message(), false);
  }

  const int rank = context.world_rank;
  const std::string python_entry = context.python;
  auto* host = new WorkerHost(std::move(context), channel);  // lives until _exit
  Status hello = channel->Send(events::Hello{rank, ::getpid()});
  if (!hello.ok()) Fail(nullptr, kExitFailed, hello.message(), true);

  std::vector<char> err(kErrorBufferSize, '\0');
  const int rc = library->entry(host->api(), err.data(), err.size());
  err.back() = '\0';
  std::string message = err.data();

  if (rc == TRAINTL_ENTRY_OK) {
    // A job must not end with its last checkpoint still in the upload queue.
    Status uploaded = host->FinishReports();
    if (!uploaded.ok()) Fail(channel, kExitFailed, uploaded.message(), true);
    Status ignored = channel->Send(events::Done{true, "", true});
    (void)ignored;
    Exit(kExitOk);
  }
  if (message.empty()) message = "the entry point returned " + std::to_string(rc);
  if (rc == TRAINTL_ENTRY_INCOMPATIBLE) {
    // The Python shim says so when the module or function cannot be used.
    if (python) Fail(channel, kExitEntry, message, false);
    Fail(channel, kExitLibrary, library->function + ": " + message, false);
  }
  if (python) {
    // The shim printed the traceback to the log already: the reason line there is its
    // last line; `done` (and so `traintl status`) carries the whole traceback.
    std::string last = message;
    while (!last.empty() && last.back() == '\n') last.pop_back();
    if (auto nl = last.rfind('\n'); nl != std::string::npos) last = last.substr(nl + 1);
    PrintReason(python_entry + " failed: " + last);
    Status ignored = channel->Send(
        events::Done{false, python_entry + " failed:\n" + message, host->bad_data_error().empty()});
    (void)ignored;
    Exit(kExitFailed);
  }
  // Bad data fails every attempt alike: do not burn restarts on it.
  const std::string bad_data = host->bad_data_error();
  Fail(channel, kExitFailed, library->function + " failed: " + message, bad_data.empty());
}

}  // namespace
}  // namespace worker
}  // namespace traintl

int main(int argc, char** argv) { return traintl::worker::Run(argc, argv); }
