// libtest_ddp.so: a small real data-parallel LibTorch loop (traintl::torch's DDP over its
// process group: shared memory among a node's ranks) for the end-to-end tests of progress
// (stragglers and stalled collectives) and of the shared-memory collectives. Its reports
// carry the process group's backend ("backend").
//
// train_loop_config (all optional):
//   steps (200): training steps; each is a forward/backward of a small linear model on
//     random data, its gradients averaged across ranks by the DDP wrapper
//   slow_rank (-1 = none), slow_ms (0): that rank sleeps this long in every step, before
//     its backward pass (a straggler: the others wait for it in the gradient allreduce)
//   report_every (20): steps between reports (metrics: step, loss)
//   pid_dir (""): each rank writes its pid to <pid_dir>/rank_<R>.pid (tests SIGSTOP one)
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include <torch/torch.h>

#include "traintl/torch.h"
#include "traintl/train.h"

namespace {

void train_loop(const nlohmann::json& config) {
  const int steps = config.value("steps", 200);
  const int slow_rank = config.value("slow_rank", -1);
  const int slow_ms = config.value("slow_ms", 0);
  const int report_every = std::max(1, config.value("report_every", 20));
  const std::string pid_dir = config.value("pid_dir", "");
  const auto ctx = traintl::get_context();
  const int rank = ctx.world_rank();
  if (!pid_dir.empty())
    std::ofstream(pid_dir + "/rank_" + std::to_string(rank) + ".pid") << getpid();

  torch::manual_seed(rank);
  auto model = traintl::torch::prepare_model(torch::nn::Linear(64, 8));
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01));
  for (int step = 0; step < steps && !traintl::should_stop(); ++step) {
    auto x = torch::randn({32, 64});
    auto y = torch::randn({32, 8});
    optimizer.zero_grad();
    auto loss = torch::mse_loss(model->forward(x), y);
    if (rank == slow_rank && slow_ms > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
    loss.backward();
    optimizer.step();
    if ((step + 1) % report_every == 0)
      traintl::report({{"step", step + 1},
                       {"loss", loss.item<double>()},
                       {"backend", traintl::torch::process_group().backend()}});
  }
}

}  // namespace

TRAINTL_ENTRYPOINT(train_loop)
