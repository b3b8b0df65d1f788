// libbench_small_train.so: the "small job" of the daemon memory benchmark
// (bench/startup/daemon_memory.py). No LibTorch, so a job is mostly the daemon's own work:
// scheduling, starting a worker, taking reports, recording the end.
//
// Entry point `small_loop`. train_loop_config: {"reports": 3}: how many metrics objects
// every rank reports ({"step": i, "loss": 1 / (i + 1)}).
#include <traintl/train.h>

namespace {

void SmallLoop(const nlohmann::json& config) {
  const int reports = config.value("reports", 3);
  for (int i = 0; i < reports; ++i) {
    traintl::report({{"step", i}, {"loss", 1.0 / (i + 1)}});
  }
}

}  // namespace

TRAINTL_ENTRYPOINT_AS(small_loop, SmallLoop)
