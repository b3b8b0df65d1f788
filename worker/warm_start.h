// Warm start: a traintl-worker started ahead of need (`--warm`) loads what is slow to load
// - LibTorch through libtraintl_torch.so, and Python with torch imported through the
// Python entry shim, where they are installed - and then waits on its channel (fd 3) for
// the launch message that makes it one rank (docs/WORKER_PROTOCOL.md, "Warm workers"):
// the context file, the working directory, the whole environment, and the rank's log as
// an SCM_RIGHTS descriptor. It then carries on exactly as a worker started with
// `--context`.
//
// Thread-safety: single-threaded use, before the worker starts any thread of its own.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"

namespace traintl {
namespace worker {

// The launch message of a warm worker.
struct WarmLaunch {
  std::string context_path;
  std::string workdir;
  std::vector<std::string> env;  // "NAME=value", the worker's whole environment
  int log_fd = -1;               // becomes stdout and stderr
};

// Loads LibTorch and Python (with `import torch`) where present, beside the runtime
// directory `runtime_lib_dir` (<prefix>/lib/traintl). Returns what could not be loaded
// ("" when everything that is installed loaded); never fails the worker.
std::string PreloadRuntimes(const std::string& runtime_lib_dir);

// Blocks until the launch message arrives on `fd`. Unavailable when the agent closed the
// channel first, InvalidArgument for a malformed message.
Result<WarmLaunch> ReceiveWarmLaunch(int fd);

// Applies `launch`: its log on stdout and stderr, its environment (the old one cleared),
// its working directory. OMP_NUM_THREADS of the new environment also reaches an OpenMP
// runtime that LibTorch loaded before it was set.
Status ApplyWarmLaunch(const WarmLaunch& launch);

// The line and descriptor of a launch message, as the agent sends them (tests use it to
// play the agent).
std::string EncodeWarmLaunch(const WarmLaunch& launch);

}  // namespace worker
}  // namespace traintl
