// traintl::torch::AsyncCheckpointer: checkpoints of tensors whose cost to the training loop
// is one memory copy - the staging torch.distributed.checkpoint.async_save does.
//
//   traintl::torch::AsyncCheckpointer checkpointer;
//   for (...) {
//     ... train ...
//     checkpointer.save({{"loss", loss}}, {{"model", model->parameters()}, ...});
//   }
//
// save() reserves this rank's next report (traintl::report_deferred: the report keeps its
// place among the rank's reports), copies each tensor into a CPU buffer of its own - kept
// and reused by later saves, so only the first save allocates (pinned memory for CUDA
// tensors, whose copy then runs at PCIe speed) - and returns. A thread then writes each
// buffer with torch::save into the report's directory (<name>.pt; a vector of tensors is
// one file) and sends the report; the checkpoint is committed like any other, once every
// rank's files are durable. The next save() first waits for that thread: the buffers are
// reused, and at most one upload per rank is in flight.
//
// Why a thread and not a fork (CheckFreq, some Python snapshotters fork to copy-on-write the
// state): forking a process that runs LibTorch, OpenMP, Gloo/NCCL and CUDA threads copies
// their locks in whatever state they are (a child can deadlock on them), and a CUDA context
// does not survive fork. The copy on the caller's thread is what makes a thread safe here:
// while save() copies, the loop is not running, so no optimizer step writes the tensors;
// afterwards the writer thread reads only its own buffers, never a tensor the loop uses,
// and torch::save of CPU tensors touches no shared autograd or allocator state that the
// loop's thread could race on.
//
// Thread-safety: one AsyncCheckpointer is used by one thread at a time (the training loop).
#pragma once

#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "traintl/train.h"

namespace traintl {
namespace torch {

class AsyncCheckpointer {
 public:
  // A name (the file is <name>.pt) and its tensors.
  using Item = std::pair<std::string, std::vector<::torch::Tensor>>;

  AsyncCheckpointer() = default;
  AsyncCheckpointer(const AsyncCheckpointer&) = delete;
  AsyncCheckpointer& operator=(const AsyncCheckpointer&) = delete;
  // Waits for the background write (the training function's end waits for the report too).
  ~AsyncCheckpointer() {
    if (writer_.joinable()) writer_.join();
  }

  // Reports `metrics` with a checkpoint of `items`; returns once the tensors are copied.
  // Throws what report_deferred throws (an older worker; an earlier upload that failed).
  void save(const nlohmann::json& metrics, const std::vector<Item>& items) {
    wait();
    auto pending = std::make_shared<DeferredCheckpoint>(report_deferred(metrics));
    last_dir_ = pending->dir();
    try {
      Stage(items);
    } catch (const std::exception& e) {
      pending->fail(std::string("staging the tensors failed: ") + e.what());
      throw;
    }
    auto buffers = buffers_;  // shared tensors: the same storage, not a copy
    writer_ = std::thread([pending, buffers] {
      try {
        for (const auto& [name, tensors] : buffers)
          ::torch::save(tensors, pending->dir() + "/" + name + ".pt");
        pending->done();
      } catch (const std::exception& e) {
        pending->fail(e.what());
      }
    });
  }

  // Waits until the last save's files are written and its report queued.
  void wait() {
    if (writer_.joinable()) writer_.join();
  }

  // The directory of the last save's files (in the staging area; complete after wait()).
  const std::string& last_dir() const { return last_dir_; }

 private:
  void Stage(const std::vector<Item>& items) {
    ::torch::NoGradGuard no_grad;
    bool same = buffers_.size() == items.size();
    for (size_t i = 0; same && i < items.size(); ++i) {
      same = buffers_[i].first == items[i].first &&
             buffers_[i].second.size() == items[i].second.size();
      for (size_t j = 0; same && j < items[i].second.size(); ++j) {
        const auto& b = buffers_[i].second[j];
        const auto& t = items[i].second[j];
        same = b.sizes() == t.sizes() && b.dtype() == t.dtype();
      }
    }
    if (!same) {
      buffers_.clear();
      for (const auto& [name, tensors] : items) {
        std::vector<::torch::Tensor> copies;
        for (const auto& t : tensors) {
          auto options = t.options().device(::torch::kCPU);
          if (t.is_cuda()) options = options.pinned_memory(true);
          copies.push_back(::torch::empty(t.sizes(), options));
        }
        buffers_.emplace_back(name, std::move(copies));
      }
    }
    for (size_t i = 0; i < items.size(); ++i) {
      for (size_t j = 0; j < items[i].second.size(); ++j)
        buffers_[i].second[j].copy_(items[i].second[j].detach());
    }
  }

  std::vector<Item> buffers_;  // reused from save to save
  std::thread writer_;
  std::string last_dir_;
};

}  // namespace torch
}  // namespace traintl
