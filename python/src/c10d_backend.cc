// traintl._c10d: traintl's process group as a torch.distributed backend ("traintl"), so
// that Python training functions (torch DDP, dist.all_reduce, ...) get the shared-memory
// collectives of traintl::torch (worker/torch/shm_group.h) among the ranks of a node and,
// across nodes, Gloo between one leader per node. traintl.train.torch registers it with
// torch.distributed.Backend.register_backend for CPU jobs of several ranks.
//
// The adaptor runs each collective to completion before it returns (within a node they are
// memory copies on the caller's core; see ShmProcessGroup) and hands back a finished Work
// with a completed future, which is what DDP's reducer waits on.
//
// Thread-safety: as c10d::ProcessGroup; traintl's group serializes its collectives.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>

#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "python/src/progress_hooks.h"
#include "traintl/torch.h"
#include "worker/torch/runtime.h"
#include "worker/torch/shm_group.h"

namespace {

namespace tt = traintl::torch;

// A collective that already ran: its future holds the output tensors.
class DoneWork final : public c10d::Work {
 public:
  DoneWork(std::vector<at::Tensor> outputs, c10d::OpType type)
      : c10d::Work(-1, type),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {
    future_->markCompleted(c10::IValue(outputs_));
  }
  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds) override { return true; }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

tt::ReduceOp FromC10d(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return tt::ReduceOp::kSum;
    case c10d::ReduceOp::AVG:
      return tt::ReduceOp::kAvg;
    case c10d::ReduceOp::PRODUCT:
      return tt::ReduceOp::kProduct;
    case c10d::ReduceOp::MIN:
      return tt::ReduceOp::kMin;
    case c10d::ReduceOp::MAX:
      return tt::ReduceOp::kMax;
    default:
      throw std::invalid_argument("the traintl backend supports SUM, AVG, PRODUCT, MIN, MAX");
  }
}

// Brackets a collective for the rank's progress: entered, then waiting until it returns.
class InCollective {
 public:
  explicit InCollective(const traintl_progress_hooks* hooks) : hooks_(hooks) {
    if (hooks_ == nullptr) return;
    hooks_->collective_entered();
    hooks_->wait(1);
  }
  ~InCollective() {
    if (hooks_ != nullptr) hooks_->wait(0);
  }
  InCollective(const InCollective&) = delete;
  InCollective& operator=(const InCollective&) = delete;

 private:
  const traintl_progress_hooks* hooks_;
};

class TraintlProcessGroup final : public c10d::ProcessGroup {
 public:
  TraintlProcessGroup(std::unique_ptr<tt::ProcessGroup> group, int rank, int size,
                      const traintl_progress_hooks* progress)
      : c10d::ProcessGroup(rank, size), group_(std::move(group)), progress_(progress) {}

  const std::string getBackendName() const override { return "traintl"; }

  // The transport under the backend: "shm" or "shm+gloo".
  std::string transport() const { return group_->backend(); }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    InCollective in(progress_);
    group_->allreduce_async(tensors, FromC10d(opts.reduceOp))->wait();
    return c10::make_intrusive<DoneWork>(tensors, c10d::OpType::ALLREDUCE);
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    InCollective in(progress_);
    group_->allreduce_async(tensors, FromC10d(opts.reduceOp))->wait();
    return c10::make_intrusive<DoneWork>(tensors, c10d::OpType::ALLREDUCE_COALESCED);
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    InCollective in(progress_);
    group_->broadcast(tensors, static_cast<int>(opts.rootRank));
    return c10::make_intrusive<DoneWork>(tensors, c10d::OpType::BROADCAST);
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions&) override {
    InCollective in(progress_);
    if (inputs.size() != 1 || outputs.size() != 1 ||
        outputs[0].size() != static_cast<size_t>(getSize())) {
      throw std::invalid_argument("traintl allgather: one input and world_size outputs");
    }
    auto gathered = group_->allgather(inputs[0]);
    for (size_t q = 0; q < gathered.size(); ++q) outputs[0][q].copy_(gathered[q]);
    return c10::make_intrusive<DoneWork>(outputs[0], c10d::OpType::ALLGATHER);
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions&) override {
    InCollective in(progress_);
    auto gathered = group_->allgather(input);
    output.copy_(at::cat(gathered).view(output.sizes()));
    return c10::make_intrusive<DoneWork>(std::vector<at::Tensor>{output},
                                         c10d::OpType::_ALLGATHER_BASE);
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    InCollective in(progress_);
    group_->barrier();
    return c10::make_intrusive<DoneWork>(std::vector<at::Tensor>{}, c10d::OpType::BARRIER);
  }

 private:
  std::unique_ptr<tt::ProcessGroup> group_;
  const traintl_progress_hooks* progress_;  // traintl._native's; null outside a worker
};

// The creator register_backend calls: (store, rank, world_size, timeout), plus the rank's
// placement, which traintl.train.torch binds from the job's context.
c10::intrusive_ptr<c10d::ProcessGroup> Create(const c10::intrusive_ptr<c10d::Store>& store,
                                              int rank, int size,
                                              const std::chrono::duration<float>& timeout,
                                              int local_rank, int local_world_size, int node_rank,
                                              int world_size, const std::string& master_addr,
                                              const traintl_progress_hooks* progress) {
  tt::detail::RuntimeOptions o;
  o.rank = rank;
  o.world_size = size;
  o.local_rank = local_rank;
  o.local_world_size = local_world_size;
  o.node_rank = node_rank;
  o.master_addr = master_addr;
  o.collective_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  o.rendezvous_timeout = o.collective_timeout;
  auto make_gloo = [&o](const c10::intrusive_ptr<c10d::Store>& s, int r, int n) {
    return tt::detail::MakeGlooGroup(s, r, n, o);
  };
  // A subgroup (dist.new_group) has no node layout of its own: plain Gloo.
  if (size == world_size) {
    if (auto shm = tt::detail::MakeShmGroup(store, o, make_gloo)) {
      return c10::make_intrusive<TraintlProcessGroup>(std::move(shm), rank, size, progress);
    }
  }
  return make_gloo(store, rank, size);
}

}  // namespace

PYBIND11_MODULE(_c10d, m) {
  m.doc() = "traintl's collectives as a torch.distributed backend";
  // The base class must be registered (by torch) before the subclass.
  py::module::import("torch.distributed");
  py::class_<TraintlProcessGroup, c10d::ProcessGroup, c10::intrusive_ptr<TraintlProcessGroup>>(
      m, "ProcessGroupTraintl")
      .def_property_readonly("transport", &TraintlProcessGroup::transport);
  m.def(
      "create",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         const std::chrono::duration<float>& timeout, int local_rank, int local_world_size,
         int node_rank, int world_size, const std::string& master_addr, py::object progress) {
        const traintl_progress_hooks* hooks = nullptr;
        if (!progress.is_none()) {
          hooks = static_cast<const traintl_progress_hooks*>(
              PyCapsule_GetPointer(progress.ptr(), traintl::python::kProgressHooksCapsule));
          if (hooks == nullptr) throw py::error_already_set();
        }
        py::gil_scoped_release no_gil;  // the rendezvous blocks
        return Create(store, rank, size, timeout, local_rank, local_world_size, node_rank,
                      world_size, master_addr, hooks);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("local_rank"),
      py::arg("local_world_size"), py::arg("node_rank"), py::arg("world_size"),
      py::arg("master_addr"), py::arg("progress") = py::none());
}
