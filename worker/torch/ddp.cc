// prepare_model: gradient averaging overlapped with backward, and the data-loader sharding.
//
// The scheme is c10d::Reducer's (the engine of torch DDP), written against public autograd
// APIs because the Reducer is internal and not fully shipped by Debian:
//  - parameters are grouped into buckets of about bucket_cap_bytes (the first one
//    first_bucket_cap_bytes), in reverse order (backward produces the last layers'
//    gradients first);
//  - a hook on each parameter receives its gradient of this backward pass and copies it
//    into the bucket's flat buffer, divided by the world size on the way; when a bucket is
//    complete its (sum) allreduce starts
//    (asynchronously), but only in bucket order, so every rank issues the same collectives
//    in the same order whatever order its hooks fire in;
//  - the first hook of a backward pass queues an autograd-engine final callback, which runs
//    once backward is done: parameters that got no gradient contribute zeros, so no rank
//    waits for a bucket that never completes; then every allreduce is awaited and the
//    averages are added to .grad, all before backward() returns.
// The hooks are tensor hooks, not post-hooks on the AccumulateGrad nodes as in the Reducer:
// torch::load() into a prepared module (resuming from a checkpoint) replaces those nodes
// and their hooks with them, while tensor hooks stay. A tensor hook sees the gradient
// before it is accumulated, so it hands AccumulateGrad a zero instead and the average is
// accumulated at the end: .grad ends as (.grad before) + average of this pass's gradients.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <numeric>

#include <torch/csrc/autograd/engine.h>

#include "traintl/torch.h"
#include "worker/torch/progress.h"
#include "worker/torch/runtime.h"

namespace traintl {
namespace torch {
namespace detail {
namespace {

// The gradient hooks and buckets of one prepared module.
//
// Thread-safety: hooks may run on autograd worker threads (one per device); every member
// is guarded by mu_.
class GradientSynchronizer : public std::enable_shared_from_this<GradientSynchronizer> {
 public:
  GradientSynchronizer(std::vector<at::Tensor> params, ProcessGroup* group,
                       const PrepareModelOptions& options)
      : params_(std::move(params)),
        group_(group),
        world_size_(group->world_size()),
        world_(at::scalar_tensor(static_cast<double>(world_size_), at::kDouble)) {
    bucket_of_.resize(params_.size());
    offset_.resize(params_.size());
    ready_.assign(params_.size(), 0);
    size_t bytes = 0;
    for (size_t k = params_.size(); k-- > 0;) {
      const at::Tensor& p = params_[k];
      const size_t cap =
          buckets_.size() <= 1 ? options.first_bucket_cap_bytes : options.bucket_cap_bytes;
      const bool fits = !buckets_.empty() && bytes < cap &&
                        buckets_.back().dtype == p.scalar_type() &&
                        buckets_.back().device == p.device();
      if (!fits) {
        buckets_.emplace_back();
        buckets_.back().dtype = p.scalar_type();
        buckets_.back().device = p.device();
        bytes = 0;
      }
      Bucket& b = buckets_.back();
      bucket_of_[k] = buckets_.size() - 1;
      offset_[k] = b.numel;
      b.params.push_back(k);
      b.numel += p.numel();
      bytes += static_cast<size_t>(p.numel()) * p.element_size();
    }
    for (Bucket& b : buckets_) {
      b.flat = at::zeros({b.numel}, at::TensorOptions().dtype(b.dtype).device(b.device));
      b.pending = b.params.size();
    }
  }

  // Hooks hold a weak reference: the synchronizer may go away while an old autograd graph
  // still references the parameters.
  void Install() {
    std::weak_ptr<GradientSynchronizer> weak = weak_from_this();
    for (size_t i = 0; i < params_.size(); ++i) {
      params_[i].register_hook([weak, i](const at::Tensor& grad) -> at::Tensor {
        auto self = weak.lock();
        if (self == nullptr) return at::Tensor();  // undefined: the gradient is unchanged
        return self->OnGrad(i, grad);
      });
    }
  }

  // Forgets a backward pass a failed collective left half done (its final callback may
  // never have run): the next pass starts clean.
  void Reset() {
    std::lock_guard<std::mutex> lock(mu_);
    ResetLocked();
  }

 private:
  struct Bucket {
    at::ScalarType dtype = at::kFloat;
    at::Device device = at::kCPU;
    std::vector<size_t> params;  // indices into params_
    int64_t numel = 0;
    at::Tensor flat;
    size_t pending = 0;  // parameters whose gradient is not in flat yet
    std::shared_ptr<Work> work;
  };

  // Takes parameter i's gradient of this backward pass; returns what AccumulateGrad adds.
  at::Tensor OnGrad(size_t i, const at::Tensor& grad) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!in_backward_) {
      in_backward_ = true;
      // An elastic job's group may have shrunk or grown since the last pass.
      if (group_->world_size() != world_size_) {
        world_size_ = group_->world_size();
        world_ = at::scalar_tensor(static_cast<double>(world_size_), at::kDouble);
      }
      std::weak_ptr<GradientSynchronizer> weak = weak_from_this();
      ::torch::autograd::Engine::get_default_engine().queue_callback([weak] {
        if (auto self = weak.lock()) self->Finalize();
      });
    }
    if (ready_[i]) {
      throw std::logic_error(
          "traintl::torch::prepare_model: a parameter received two gradients in one backward "
          "pass (reentrant backward is not supported)");
    }
    MarkReady(i, grad);
    // A zero-strided zero: no memory, and AccumulateGrad turns it into a dense .grad when
    // there is none yet.
    return at::zeros({}, grad.options()).expand(grad.sizes());
  }

  // Puts parameter i's gradient (undefined: zeros) into its bucket. Requires mu_.
  void MarkReady(size_t i, const at::Tensor& grad) {
    ready_[i] = 1;
    Bucket& b = buckets_[bucket_of_[i]];
    at::Tensor slot = b.flat.narrow(0, offset_[i], params_[i].numel());
    {
      ::torch::NoGradGuard no_grad;
      if (grad.defined()) {
        // The 1/world scale rides on the copy: one pass over the gradient instead of a
        // copy now and a division of the whole bucket after the allreduce. Exact for a
        // power-of-two world; otherwise as close as dividing the sum.
        at::div_out(slot, grad.reshape({-1}), world_);
      } else {
        slot.zero_();
      }
    }
    --b.pending;
    while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
      Bucket& next = buckets_[next_launch_++];
      next.work = group_->allreduce_async({next.flat}, ReduceOp::kSum);
    }
  }

  void Finalize() {
    std::lock_guard<std::mutex> lock(mu_);
    // Whatever happens, the next backward pass starts from a clean state.
    struct Cleanup {
      GradientSynchronizer* s;
      ~Cleanup() { s->ResetLocked(); }
    } cleanup{this};
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!ready_[i]) MarkReady(i, at::Tensor());
    }
    ::torch::NoGradGuard no_grad;
    for (Bucket& b : buckets_) {
      // No work: its launch threw in a hook, and that error already failed backward.
      if (b.work == nullptr) throw CollectiveError("gradient allreduce was not started");
      b.work->wait();
      for (size_t i : b.params) {
        at::Tensor& param = params_[i];
        at::Tensor avg = b.flat.narrow(0, offset_[i], param.numel()).view(param.sizes());
        if (param.grad().defined()) {
          param.mutable_grad().add_(avg);
        } else {
          param.mutable_grad() = avg.clone();
        }
      }
    }
    detail::StepDone();
  }

  void ResetLocked() {
    in_backward_ = false;
    next_launch_ = 0;
    std::fill(ready_.begin(), ready_.end(), 0);
    for (Bucket& b : buckets_) {
      b.pending = b.params.size();
      b.work.reset();
    }
  }

  std::mutex mu_;
  std::vector<at::Tensor> params_;
  ProcessGroup* group_;
  int world_size_;
  at::Tensor world_;  // 0-dim: divides without changing the gradient's dtype
  std::vector<size_t> bucket_of_;
  std::vector<int64_t> offset_;
  std::vector<Bucket> buckets_;
  std::vector<char> ready_;
  size_t next_launch_ = 0;
  bool in_backward_ = false;
};

// Keeps each prepared module's synchronizer alive as long as the module is.
struct Registry {
  std::mutex mu;
  std::vector<std::pair<std::weak_ptr<::torch::nn::Module>,
                        std::shared_ptr<GradientSynchronizer>>>
      entries;  // guarded by mu
};

Registry& GetRegistry() {
  static Registry* registry = new Registry;  // leaked: hooks may outlive static destructors
  return *registry;
}

// A fingerprint of the parameters' shapes and dtypes, to catch ranks running different
// models before they exchange mismatched buffers.
int64_t ShapeFingerprint(const std::vector<at::Tensor>& tensors) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    h ^= v;
    h *= 1099511628211ull;
  };
  for (const auto& t : tensors) {
    mix(static_cast<uint64_t>(t.scalar_type()));
    mix(static_cast<uint64_t>(t.dim()));
    for (int64_t s : t.sizes()) mix(static_cast<uint64_t>(s));
  }
  int64_t out;
  std::memcpy(&out, &h, sizeof out);
  return out;
}

void CheckSameModelEverywhere(ProcessGroup& group, const std::vector<at::Tensor>& tensors) {
  const int64_t numel =
      std::accumulate(tensors.begin(), tensors.end(), int64_t{0},
                      [](int64_t n, const at::Tensor& t) { return n + t.numel(); });
  at::Tensor mine = at::tensor(
      {static_cast<int64_t>(tensors.size()), numel, ShapeFingerprint(tensors)}, at::kLong);
  at::Tensor lo = mine.clone(), hi = mine.clone();
  group.allreduce(lo, ReduceOp::kMin);
  group.allreduce(hi, ReduceOp::kMax);
  if (!at::equal(lo, hi)) {
    throw std::invalid_argument("traintl::torch::prepare_model: the ranks' models differ (rank " +
                                std::to_string(group.rank()) + " has " +
                                std::to_string(tensors.size()) + " parameter/buffer tensors, " +
                                std::to_string(numel) + " elements)");
  }
}

}  // namespace

void PrepareModule(const std::shared_ptr<::torch::nn::Module>& module,
                   const PrepareModelOptions& options) {
  if (module == nullptr) throw std::invalid_argument("prepare_model: null module");
  Registry& registry = GetRegistry();
  {
    std::lock_guard<std::mutex> lock(registry.mu);
    auto& e = registry.entries;
    e.erase(std::remove_if(e.begin(), e.end(), [](const auto& x) { return x.first.expired(); }),
            e.end());
    for (const auto& x : e) {
      if (x.first.lock() == module) return;  // already prepared: hooks are in place
    }
  }
  if (options.move_to_device) module->to(get_device());
  if (WorldSize() == 1) return;

  ProcessGroup& group = process_group();
  std::vector<at::Tensor> state;
  for (const auto& p : module->parameters()) state.push_back(p.detach());
  for (const auto& b : module->buffers()) state.push_back(b.detach());
  for (const auto& t : state) {
    if (t.is_sparse()) throw std::invalid_argument("prepare_model: sparse tensors unsupported");
  }
  // A replacement rank gets its parameters from a survivor (run_steps), which takes no
  // part in these collectives.
  if (!Joining()) {
    CheckSameModelEverywhere(group, state);
    group.broadcast(state, /*root=*/0);
  }

  std::vector<at::Tensor> trainable;
  for (const auto& p : module->parameters()) {
    if (p.requires_grad()) trainable.push_back(p);
  }
  if (trainable.empty()) return;
  auto sync = std::make_shared<GradientSynchronizer>(std::move(trainable), &group, options);
  sync->Install();
  std::lock_guard<std::mutex> lock(registry.mu);
  registry.entries.emplace_back(module, std::move(sync));
}

void ResetGradientSynchronizers() {
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mu);
  for (auto& [module, sync] : registry.entries) sync->Reset();
}

std::vector<int64_t> ShardIndices(int64_t dataset_size, int rank, int world_size, bool shuffle,
                                  int64_t seed, int64_t epoch, bool drop_last) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw std::invalid_argument("ShardIndices: rank " + std::to_string(rank) + " of " +
                                std::to_string(world_size));
  }
  if (dataset_size < 0) throw std::invalid_argument("ShardIndices: negative dataset size");
  if (dataset_size == 0) return {};
  std::vector<int64_t> order(static_cast<size_t>(dataset_size));
  if (shuffle) {
    // The same generator and call as torch.utils.data.DistributedSampler, so a shuffle
    // matches PyTorch's for the same seed and epoch.
    auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed + epoch));
    at::Tensor perm = at::randperm(dataset_size, gen, at::kLong);
    std::memcpy(order.data(), perm.data_ptr<int64_t>(), order.size() * sizeof(int64_t));
  } else {
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  const int64_t per_rank =
      drop_last ? dataset_size / world_size : (dataset_size + world_size - 1) / world_size;
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(per_rank));
  for (int64_t k = rank; k < per_rank * world_size; k += world_size) {
    out.push_back(order[static_cast<size_t>(k % dataset_size)]);  // wraps around to pad
  }
  return out;
}

}  // namespace detail
}  // namespace torch
}  // namespace traintl
