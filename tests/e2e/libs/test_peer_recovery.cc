// libtest_peer_recovery.so: a deterministic data-parallel LibTorch loop through
// traintl::torch::run_steps, for the end-to-end tests and the benchmark of peer recovery
// (failure_config.peer_recovery). A step's data is a function of (step, rank) only, so a run
// that loses a rank and recovers must end with the same weights as one that does not.
//
// train_loop_config (all optional):
//   steps (60): training steps (a two-layer MLP, SGD with momentum: the optimizer has
//     state that a replacement must receive too)
//   step_ms (0): each step sleeps this long after its forward pass (stands for compute)
//   kill_rank (-1), kill_step (-1): that rank SIGKILLs itself in the middle of that step
//     (after the forward pass, before the gradient allreduce), in the attempt's first
//     incarnation of the rank only (not in its replacement, nor in a restart)
//   report_every (10): steps between reports (metrics: step, loss; rank 0 also attaches a
//     checkpoint with the parameters when ckpt is true)
//   ckpt (false)
//   global_batch (0): when > 0 (elastic jobs), each step's data is one batch of that many
//     rows drawn from the step alone, split among the group's ranks by their place in the
//     group (process_group().rank() of world_size()), so the global batch stays whatever
//     the group's size
//   out_dir (""): each incarnation appends "<step> <unix ns>" to
//     <out_dir>/steps_rank<R>_gen<G>.txt when it completes a step (then the group's size);
//     the killed rank writes
//     the time of its death to <out_dir>/kill.txt; at the end every rank writes its
//     parameters' bytes to <out_dir>/final_rank<R>.bin
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <torch/torch.h>

#include "traintl/torch.h"
#include "traintl/torch_recovery.h"
#include "traintl/train.h"

namespace {

int64_t UnixNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(32, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 4));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

void WriteParams(const std::shared_ptr<Net>& model, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  for (const auto& p : model->parameters()) {
    const torch::Tensor t = p.detach().contiguous();
    out.write(static_cast<const char*>(t.data_ptr()),
              static_cast<std::streamsize>(t.numel() * t.element_size()));
  }
}

void train_loop(const nlohmann::json& config) {
  const int64_t steps = config.value("steps", 60);
  const int step_ms = config.value("step_ms", 0);
  const int kill_rank = config.value("kill_rank", -1);
  const int64_t kill_step = config.value("kill_step", -1);
  const int report_every = std::max(1, config.value("report_every", 10));
  const bool ckpt = config.value("ckpt", false);
  const std::string out_dir = config.value("out_dir", "");
  const int global_batch = config.value("global_batch", 0);
  const auto ctx = traintl::get_context();
  const int rank = ctx.world_rank();
  const int generation = ctx.json().value("regroup_generation", 0);
  const bool first_incarnation = generation == 0 && ctx.attempt() == 1;

  torch::manual_seed(0);
  auto model = traintl::torch::prepare_model(std::make_shared<Net>());
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  std::ofstream steps_log;
  if (!out_dir.empty()) {
    steps_log.open(out_dir + "/steps_rank" + std::to_string(rank) + "_gen" +
                       std::to_string(generation) + ".txt",
                   std::ios::app);
  }

  traintl::torch::run_steps(
      0, steps, traintl::torch::module_state(model, optimizer), [&](int64_t step) {
        optimizer.zero_grad();
        torch::Tensor x, y;
        auto& group = traintl::torch::process_group();
        if (global_batch > 0) {
          torch::manual_seed(static_cast<uint64_t>(step));
          const traintl::torch::BatchSlice slice = traintl::torch::batch_slice(global_batch);
          x = torch::randn({global_batch, 32}).narrow(0, slice.begin, slice.size);
          y = torch::randn({global_batch, 4}).narrow(0, slice.begin, slice.size);
        } else {
          torch::manual_seed(static_cast<uint64_t>(step * 1000 + rank));
          x = torch::randn({16, 32});
          y = torch::randn({16, 4});
        }
        const torch::Tensor loss = torch::mse_loss(model->forward(x), y);
        if (step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
        if (first_incarnation && rank == kill_rank && step == kill_step) {
          if (!out_dir.empty()) std::ofstream(out_dir + "/kill.txt") << UnixNanos() << "\n";
          ::raise(SIGKILL);
        }
        loss.backward();
        optimizer.step();
        if (steps_log.is_open())
          steps_log << step << " " << UnixNanos() << " " << group.world_size() << std::endl;
        if ((step + 1) % report_every == 0) {
          const nlohmann::json metrics = {{"step", step + 1}, {"loss", loss.item<double>()}};
          if (ckpt && rank == 0) {
            const std::string dir = ctx.trial_dir() + "/tmp_ckpt_" + std::to_string(getpid());
            std::filesystem::create_directories(dir);
            WriteParams(model, dir + "/params.bin");
            traintl::report(metrics, traintl::Checkpoint::from_directory(dir));
            std::filesystem::remove_all(dir);
          } else {
            traintl::report(metrics);
          }
        }
      });
  if (!out_dir.empty()) WriteParams(model, out_dir + "/final_rank" + std::to_string(rank) + ".bin");
}

}  // namespace

TRAINTL_ENTRYPOINT(train_loop)
