#include "worker/torch/progress.h"

#include "traintl/progress_recorder.h"
#include "traintl/train.h"

namespace traintl {
namespace torch {
namespace detail {
namespace {

ProgressRecorder& Recorder() {
  // Never destroyed: exit-safe. The host only copies the numbers.
  static ProgressRecorder* recorder = new ProgressRecorder(
      [](const traintl_progress& p) { SendProgress(traintl::internal::current_host_api, p); });
  return *recorder;
}

}  // namespace

void CollectiveEntered() { Recorder().CollectiveEntered(); }
void WaitBegins() { Recorder().WaitBegins(); }
void WaitEnds() { Recorder().WaitEnds(); }
void StepDone() { Recorder().StepDone(); }

}  // namespace detail
}  // namespace torch
}  // namespace traintl
