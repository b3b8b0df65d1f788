// Running a command entry point (`"entrypoint": {"command": [...]}`, DESIGN §8): the rank's
// traintl-worker starts the program as its child, with torchrun's environment (set by the
// agent) and, so that the program may `import traintl`, the agent channel and context file
// (TRAINTL_CHANNEL_FD, TRAINTL_CONTEXT_FILE) and the Python package on PYTHONPATH.
//
// The child owns the channel while it runs: the worker reads nothing from it (the child's
// traintl module answers acks and stops), watches only for the agent hanging up, and after
// the child ends sends "done" itself.
//
// Thread-safety: called once, from the worker's main thread.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"
#include "proto/rank_context.h"

namespace traintl {
namespace worker {

// Where `program` is found: itself when it contains a '/' (relative to `cwd`), else the
// first executable regular file of that name in PATH (`path_env`), then in `cwd`.
// NotFound "command not found: X (searched PATH and the working_dir)" or
// PermissionDenied "X is not executable".
Result<std::string> ResolveProgram(const std::string& program, const std::string& path_env,
                                   const std::string& cwd);

// How a child ended, as the worker reports it.
struct CommandEnd {
  bool ok = false;
  std::string reason;  // "" when ok
  int signal = 0;      // the signal that killed the child, 0 when it exited
  int exit_code = 0;   // its exit code when it exited
};

// Starts `argv` (argv[0] already resolved) in `cwd` with `channel_fd` inherited and the
// current environment plus `extra_env`, waits for it and says how it ended. The child
// dies with the worker (PR_SET_PDEATHSIG) and stays in its process group, so the agent's
// stop reaches it. Unavailable when it cannot be started.
Result<CommandEnd> RunChild(const std::vector<std::string>& argv, const std::string& cwd,
                            int channel_fd, const std::vector<std::string>& extra_env);

}  // namespace worker
}  // namespace traintl
