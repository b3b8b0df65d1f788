// The progress calls of traintl._native (its ProgressRecorder: see
// worker/sdk/include/traintl/progress_recorder.h), handed to traintl._c10d in a PyCapsule
// named kProgressHooksCapsule, so that the "traintl" torch.distributed backend marks the
// time a rank spends in its collectives (which it runs to completion inside DDP's
// gradient hooks) as waiting for its peers. Plain C function pointers: the two modules are
// separate shared objects with hidden symbols.
//
// Thread-safety: the functions may be called from any thread.
#pragma once

extern "C" {
struct traintl_progress_hooks {
  void (*collective_entered)(void);
  void (*wait)(int begins);  // 1: the rank begins waiting for its peers; 0: it stops
};
}

namespace traintl {
namespace python {
constexpr const char* kProgressHooksCapsule = "traintl.progress_hooks";
}  // namespace python
}  // namespace traintl
