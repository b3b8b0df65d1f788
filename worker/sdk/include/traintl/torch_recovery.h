// traintl::torch::run_steps: a data-parallel training loop that survives the death of a rank
// without a restart (peer recovery, run_config.failure_config.peer_recovery).
//
//   auto model = traintl::torch::prepare_model(Net());
//   torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
//   int64_t first = 0;  // the step after the restored checkpoint's, when resuming
//   traintl::torch::run_steps(first, num_steps,
//                             traintl::torch::module_state(model, optimizer),
//                             [&](int64_t step) {
//                               optimizer.zero_grad();
//                               auto [x, y] = batch_for(step);  // deterministic in step
//                               torch::mse_loss(model->forward(x), y).backward();
//                               optimizer.step();
//                             });
//
// Without peer recovery (or with one rank) this is a plain loop over the steps. With it,
// when a rank dies the head starts a replacement on the dead rank's node (a warm worker
// where the node keeps some: traintld --warm-workers) and tells the survivors. A
// survivor's step fails in its next collective (Gloo over TCP sees the peer's sockets
// close); run_steps then waits for the head's word, rebuilds the process group with the
// replacement, and every rank takes the state of the survivor that completed the most
// steps (sent over the group, no disk round trip). The loop goes on from the step after
// it: at most the one step in progress is redone, and no committed report or checkpoint
// is lost. With a deterministic step (its data a function of the step and the rank), the
// final weights are bit-identical to a run without the death.
//
// What a step must do for that:
//  - change the state only after its last collective, as the usual order does (backward's
//    gradient allreduce, then optimizer.step()): a step that fails part-way is redone
//    from the state before it;
//  - start with zero_grad() (a failed backward may leave part of its gradients);
//  - take its data from the step number (and the rank), not from an iterator's position.
// The state is what `state.save` writes (module_state: the module's parameters and
// buffers and the optimizer's state). The report sequence follows the state: a replacement
// continues the sequence of the survivor it took the state from.
//
// Elastic jobs (scaling_config.num_workers {"min", "max"}) go through the same regroups:
// when a node is lost and at least min ranks are left, the group goes on smaller (each
// rank's place and the group's size change: process_group().rank() and world_size()); when
// capacity returns, the ranks that left start again and take a survivor's state. To keep
// the global batch, a step takes its part of it by batch_slice() (below).
//
// When no survivor holds the state (every replica died), or the rendezvous with the
// replacement fails (another rank dies during it), the error stands: the attempt fails and
// restarts from its latest checkpoint, as failure_config allows. Peer recovery needs the
// CPU (Gloo) process group: a use_gpu job with peer_recovery or an elastic size is refused
// at submit.
//
// Thread-safety: call from the training thread, one run_steps at a time.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>

#include "traintl/torch.h"

namespace traintl {
namespace torch {

// The training state a replacement rank takes from a survivor: `save` writes it into an
// archive, `load` reads it back into this rank's objects (in place: what holds references
// to the tensors keeps them).
struct StepState {
  std::function<void(::torch::serialize::OutputArchive&)> save;
  std::function<void(::torch::serialize::InputArchive&)> load;
};

// The state of a prepared module (parameters and buffers) and its optimizer (e.g. momentum
// buffers). Both must outlive the returned object.
template <typename ModelType>
StepState module_state(const ModelType& model, ::torch::optim::Optimizer& optimizer) {
  std::shared_ptr<::torch::nn::Module> module;
  if constexpr (::torch::detail::is_module_holder<std::decay_t<ModelType>>::value) {
    module = model.ptr();
  } else {
    module = model;
  }
  ::torch::optim::Optimizer* opt = &optimizer;
  StepState state;
  state.save = [module, opt](::torch::serialize::OutputArchive& archive) {
    ::torch::serialize::OutputArchive m, o;
    module->save(m);
    opt->save(o);
    archive.write("model", m);
    archive.write("optimizer", o);
  };
  state.load = [module, opt](::torch::serialize::InputArchive& archive) {
    ::torch::serialize::InputArchive m, o;
    archive.read("model", m);
    archive.read("optimizer", o);
    module->load(m);
    opt->load(o);
  };
  return state;
}

// This rank's part of a global batch of `global_batch` rows among the group's ranks as the
// group is now: rows [begin, begin + size); the first global_batch % world_size ranks get one
// row more. A step that draws its global batch from the step number and trains on its slice
// keeps the global batch (and the averaged gradient) whatever the group's size.
struct BatchSlice {
  int64_t begin = 0;
  int64_t size = 0;
};
// The part of rank `rank` of `world_size` ranks.
inline BatchSlice batch_slice(int64_t global_batch, int rank, int world_size) {
  const int64_t w = world_size, r = rank;
  const int64_t base = global_batch / w, extra = global_batch % w;
  return {r * base + std::min(r, extra), base + (r < extra ? 1 : 0)};
}
inline BatchSlice batch_slice(int64_t global_batch) {
  ProcessGroup& group = process_group();
  return batch_slice(global_batch, group.rank(), group.world_size());
}

// Runs step(i) for i = first_step, first_step + 1, ... while i < end_step and the job was not
// asked to stop, recovering from a peer's death as above. Returns the step it would run
// next (end_step when every step ran). Throws what a step throws when that was not a peer's
// death (or the recovery failed).
int64_t run_steps(int64_t first_step, int64_t end_step, const StepState& state,
                  const std::function<void(int64_t step)>& step);

}  // namespace torch
}  // namespace traintl
