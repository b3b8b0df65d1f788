// traintl::torch: data-parallel LibTorch training inside a traintl job.
//
// prepare_model() makes a module data-parallel (parameters broadcast from rank 0, gradients
// averaged across ranks by bucketed allreduce overlapped with backward), and
// prepare_data_loader() gives each rank its own shard of a dataset, as batches already on
// get_device(). Rendezvous needs no user setup: the process group is built on first use
// from the worker's context (rank 0 serves the c10d TCPStore at master_addr:master_port).
//
// Errors: like LibTorch itself, these functions throw (std::exception subclasses; a failed
// collective throws CollectiveError). The traintl entry point catches them and fails the
// attempt with the message, which is what a dead or hung peer must cause: a collective
// waits at most the job's collective timeout, then throws.
//
// Thread-safety: get_device(), process_group() and prepare_*() may be called from any
// thread. ProcessGroup's collectives must be issued in the same order on every rank, so
// call them from one thread per rank. A DistributedDataLoader is used by one thread.
#pragma once

#include <torch/torch.h>

#include "traintl/train.h"

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace traintl {
namespace torch {

// The device this rank computes on: cuda:<local_rank % device count> when the job asked
// for GPUs (use_gpu) and this LibTorch build sees CUDA devices, otherwise the CPU.
::torch::Device get_device();

enum class ReduceOp { kSum, kAvg, kProduct, kMin, kMax };

// A collective failed: a peer died, did not answer within the collective timeout, or the
// ranks disagreed (e.g. different models). The job's attempt should end.
class CollectiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A collective in flight. wait() blocks until it is done (throws CollectiveError when it
// failed); the tensors passed to the collective may be read only after wait().
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
};

// The ranks of this job as a collective group. For CPU tensors: shared memory among the
// ranks of each node, with a Gloo group of one leader per node across nodes ("shm", or
// "shm+gloo" when the job spans nodes), or c10d ProcessGroupGloo alone ("gloo": one rank
// per node, or TRAINTL_SHM_COLLECTIVES=0). For use_gpu jobs on a CUDA LibTorch, NCCL
// through libtraintl_nccl.so (built when CMake finds CUDA with NCCL; loaded only by GPU
// jobs).
//
// Each tensor in a list is reduced or broadcast independently (unlike c10d's multi-tensor
// convention); small tensors of one dtype are coalesced into one message. Tensors are
// modified in place.
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // "shm", "shm+gloo", "gloo" or "nccl".
  virtual std::string backend() const = 0;

  virtual std::shared_ptr<Work> allreduce_async(std::vector<::torch::Tensor> tensors,
                                                ReduceOp op = ReduceOp::kSum) = 0;
  void allreduce(std::vector<::torch::Tensor> tensors, ReduceOp op = ReduceOp::kSum) {
    allreduce_async(std::move(tensors), op)->wait();
  }
  void allreduce(const ::torch::Tensor& tensor, ReduceOp op = ReduceOp::kSum) {
    allreduce(std::vector<::torch::Tensor>{tensor}, op);
  }
  // Copies root's tensors into every other rank's tensors (same shapes and dtypes).
  virtual void broadcast(std::vector<::torch::Tensor> tensors, int root = 0) = 0;
  void broadcast(const ::torch::Tensor& tensor, int root = 0) {
    broadcast(std::vector<::torch::Tensor>{tensor}, root);
  }
  // Returns once every rank has called barrier().
  virtual void barrier() = 0;
  // Every rank's `tensor` (the same shape and dtype on every rank), in rank order.
  // (Appended last: libraries built against earlier headers keep their vtable slots.)
  virtual std::vector<::torch::Tensor> allgather(const ::torch::Tensor& tensor);
};

// This job's process group, built on first use (a collective rendezvous: every rank must
// call it, or call something that does, such as prepare_model with world_size > 1).
ProcessGroup& process_group();

struct PrepareModelOptions {
  // Gradients are averaged in buckets of about this many bytes, in reverse parameter order;
  // each bucket's allreduce starts as soon as backward has produced all of its gradients.
  // Default: 25 MiB, as torch.nn.parallel.DistributedDataParallel.
  size_t bucket_cap_bytes = 25u << 20;
  // The cap of the first bucket (the last layers, whose gradients come first), smaller so
  // that communication starts early in backward. Default: 1 MiB, as DDP.
  size_t first_bucket_cap_bytes = 1u << 20;
  // Move the module to get_device() first. Default: true.
  bool move_to_device = true;
};

namespace detail {

// Moves `module` to the device, broadcasts rank 0's parameters and buffers and installs the
// gradient hooks (see prepare_model). Buffers are broadcast once, not before every forward.
void PrepareModule(const std::shared_ptr<::torch::nn::Module>& module,
                   const PrepareModelOptions& options);

// This rank's position and count, from the worker context (or the testing override).
int WorldRank();
int WorldSize();

// The indices of `dataset_size` samples that belong to `rank` in `epoch`, as
// torch.utils.data.DistributedSampler: a permutation seeded with seed + epoch when
// shuffling (the same on every rank), padded by wrapping around (or truncated when
// drop_last) to a multiple of world_size, then every world_size-th index from rank.
std::vector<int64_t> ShardIndices(int64_t dataset_size, int rank, int world_size, bool shuffle,
                                  int64_t seed, int64_t epoch, bool drop_last);

template <typename T>
int64_t SizeOf(const T& size) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<int64_t>(size);
  } else {
    if (!size.has_value()) throw std::invalid_argument("prepare_data_loader: dataset has no size");
    return static_cast<int64_t>(*size);
  }
}

}  // namespace detail

// Makes `model` data-parallel and returns it (the same object and type: a module holder
// such as torch::nn::Linear or a TORCH_MODULE type, or a std::shared_ptr to a Module).
//
// It moves the module to get_device(), copies rank 0's parameters and buffers to every
// rank, and hooks every parameter that requires grad so that backward() leaves each rank
// with the gradients averaged over all ranks (the same result as one process on the
// concatenated batches): each .grad ends as its value before backward() plus the average
// of the ranks' gradients of that pass, as with plain accumulation. A parameter that gets
// no gradient on some rank contributes zeros there, so unused parameters never stall the
// others (their .grad is created if absent). Every rank must run backward the same number
// of times. Loading a checkpoint into the returned model (torch::load) is fine; preparing
// the same module twice does nothing the second time. With world_size 1 this only moves
// the module to the device.
template <typename ModelType>
ModelType prepare_model(ModelType model, const PrepareModelOptions& options = {}) {
  using Decayed = std::decay_t<ModelType>;
  if constexpr (::torch::detail::is_module_holder<Decayed>::value) {
    detail::PrepareModule(model.ptr(), options);
  } else {
    static_assert(std::is_convertible_v<Decayed, std::shared_ptr<::torch::nn::Module>>,
                  "prepare_model takes a module holder (e.g. torch::nn::Linear) or a "
                  "std::shared_ptr to a torch::nn::Module");
    detail::PrepareModule(model, options);
  }
  return model;
}

// Field order is part of the API: designated initializers such as
// {.batch_size = 64, .shuffle = true} must keep compiling.
struct DataLoaderOptions {
  // Samples per batch (on this rank). Default: 1.
  int64_t batch_size = 1;
  // Visit this rank's shard in a new order every epoch (see set_epoch). Default: false.
  bool shuffle = false;
  // Seed of the shuffle; the same on every rank. Default: 0.
  int64_t seed = 0;
  // Truncate the dataset to a multiple of world_size instead of padding it, and drop a
  // last batch smaller than batch_size. Default: false.
  bool drop_last = false;
  // Threads that load batches ahead of the training loop; 0 loads them on the caller's
  // thread. With N > 0, dataset.get() is called from N threads at once. Default: 0.
  int num_workers = 0;
};

// Iterates this rank's shard of a dataset in batches of stacked torch::data::Example<>
// (data and target), already on the device. Re-iterable: each range-for is one epoch.
//
// Thread-safety: not thread-safe; one iteration at a time.
template <typename Dataset>
class DistributedDataLoader {
 public:
  using Batch = ::torch::data::Example<>;

  DistributedDataLoader(Dataset dataset, DataLoaderOptions options, int rank, int world_size,
                        ::torch::Device device)
      : dataset_(std::make_shared<Dataset>(std::move(dataset))),
        options_(options),
        rank_(rank),
        world_size_(world_size),
        device_(device) {
    if (options_.batch_size < 1) throw std::invalid_argument("batch_size must be >= 1");
    if (options_.num_workers < 0) throw std::invalid_argument("num_workers must be >= 0");
  }

  // Selects the shuffle of the next iterations (all ranks must use the same epoch).
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  const DataLoaderOptions& options() const { return options_; }

  // This rank's sample indices for the current epoch.
  std::vector<int64_t> indices() const {
    return detail::ShardIndices(detail::SizeOf(dataset_->size()), rank_, world_size_,
                                options_.shuffle, options_.seed, epoch_, options_.drop_last);
  }
  // Batches per epoch on this rank (the same on every rank).
  size_t size() const {
    const int64_t n = detail::SizeOf(dataset_->size()), w = world_size_;
    const int64_t per_rank = options_.drop_last ? n / w : (n + w - 1) / w;
    const int64_t b = options_.batch_size;
    return static_cast<size_t>(options_.drop_last ? per_rank / b : (per_rank + b - 1) / b);
  }

  class Iterator;
  Iterator begin() { return Iterator(std::make_shared<Epoch>(this)); }
  Iterator end() { return Iterator(nullptr); }

 private:
  // One pass over the shard. Batches are made in order by the caller, or ahead of it by
  // worker threads that keep at most 2 * num_workers finished batches waiting.
  class Epoch {
   public:
    explicit Epoch(DistributedDataLoader* loader)
        : dataset_(loader->dataset_), device_(loader->device_), indices_(loader->indices()) {
      const size_t b = static_cast<size_t>(loader->options_.batch_size);
      batch_size_ = b;
      num_batches_ =
          loader->options_.drop_last ? indices_.size() / b : (indices_.size() + b - 1) / b;
      const size_t workers = static_cast<size_t>(loader->options_.num_workers);
      window_ = 2 * workers;
      for (size_t w = 0; w < workers && w < num_batches_; ++w) {
        threads_.emplace_back([this, w, workers] { Produce(w, workers); });
      }
    }
    ~Epoch() {
      {
        std::lock_guard<std::mutex> lock(mu_);
        stopping_ = true;
      }
      cv_.notify_all();
      for (auto& t : threads_) t.join();
    }
    Epoch(const Epoch&) = delete;
    Epoch& operator=(const Epoch&) = delete;

    size_t num_batches() const { return num_batches_; }

    // Returns batch `i` (0-based, in order).
    Batch Take(size_t i) {
      if (threads_.empty()) return Make(i);
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return ready_.count(i) > 0; });
      Slot slot = std::move(ready_.at(i));
      ready_.erase(i);
      consumed_ = i + 1;
      lock.unlock();
      cv_.notify_all();
      if (slot.error) std::rethrow_exception(slot.error);
      return std::move(slot.batch);
    }

   private:
    struct Slot {
      Batch batch;
      std::exception_ptr error;
    };

    Batch Make(size_t i) const {
      const size_t begin = i * batch_size_;
      const size_t end = std::min(begin + batch_size_, indices_.size());
      std::vector<::torch::Tensor> data, target;
      data.reserve(end - begin);
      target.reserve(end - begin);
      for (size_t k = begin; k < end; ++k) {
        auto example = dataset_->get(static_cast<size_t>(indices_[k]));
        data.push_back(std::move(example.data));
        target.push_back(std::move(example.target));
      }
      // Examples without targets (self-supervised data) give a batch without one.
      const bool has_target = std::all_of(target.begin(), target.end(),
                                          [](const ::torch::Tensor& t) { return t.defined(); });
      return Batch(::torch::stack(data).to(device_),
                   has_target ? ::torch::stack(target).to(device_) : ::torch::Tensor());
    }

    void Produce(size_t first, size_t stride) {
      for (size_t i = first; i < num_batches_; i += stride) {
        {
          std::unique_lock<std::mutex> lock(mu_);
          cv_.wait(lock, [&] { return stopping_ || i < consumed_ + window_; });
          if (stopping_) return;
        }
        Slot slot;
        try {
          slot.batch = Make(i);
        } catch (...) {
          slot.error = std::current_exception();
        }
        {
          std::lock_guard<std::mutex> lock(mu_);
          ready_.emplace(i, std::move(slot));
        }
        cv_.notify_all();
      }
    }

    std::shared_ptr<Dataset> dataset_;
    ::torch::Device device_;
    std::vector<int64_t> indices_;
    size_t batch_size_ = 1;
    size_t num_batches_ = 0;
    size_t window_ = 0;
    std::vector<std::thread> threads_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::map<size_t, Slot> ready_;  // guarded by mu_
    size_t consumed_ = 0;           // guarded by mu_
    bool stopping_ = false;         // guarded by mu_
  };

 public:
  // An input iterator over one epoch; *it is the current batch.
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = Batch*;
    using reference = Batch&;

    explicit Iterator(std::shared_ptr<Epoch> epoch) : epoch_(std::move(epoch)) {
      if (epoch_ != nullptr && epoch_->num_batches() == 0) epoch_.reset();
      if (epoch_ != nullptr) batch_ = epoch_->Take(0);
    }
    Batch& operator*() { return batch_; }
    Batch* operator->() { return &batch_; }
    Iterator& operator++() {
      if (++index_ < epoch_->num_batches()) {
        batch_ = epoch_->Take(index_);
      } else {
        epoch_.reset();
        batch_ = Batch();
      }
      return *this;
    }
    // Only comparison with end() (or between ended iterators) is meaningful.
    bool operator==(const Iterator& other) const {
      return epoch_ == other.epoch_ && (epoch_ == nullptr || index_ == other.index_);
    }
    bool operator!=(const Iterator& other) const { return !(*this == other); }

   private:
    std::shared_ptr<Epoch> epoch_;
    size_t index_ = 0;
    Batch batch_;
  };

 private:
  std::shared_ptr<Dataset> dataset_;
  DataLoaderOptions options_;
  int rank_;
  int world_size_;
  ::torch::Device device_;
  int64_t epoch_ = 0;
};

// Shards `dataset` (a torch::data dataset, or any type with get(size_t) returning
// torch::data::Example<> and size()) across the job's ranks, DistributedSampler-style:
// every rank gets the same number of samples, the dataset padded by wrapping around.
template <typename Dataset>
DistributedDataLoader<std::decay_t<Dataset>> prepare_data_loader(Dataset&& dataset,
                                                                 DataLoaderOptions options = {}) {
  return DistributedDataLoader<std::decay_t<Dataset>>(std::forward<Dataset>(dataset), options,
                                                      detail::WorldRank(), detail::WorldSize(),
                                                      get_device());
}

// ---- Datasets as tensors
//
// iter_torch_batches() streams this rank's shard of a job-spec dataset (see
// traintl::get_dataset_shard in traintl/train.h) as batches of tensors by column name, each
// of shape [rows, *row shape], as Ray Train's iter_torch_batches does:
//
//   auto shard = traintl::get_dataset_shard("train");
//   traintl::torch::TorchBatchOptions options;
//   options.iter.shuffle = true;
//   options.dtype = torch::kFloat32;
//   options.dtypes = {{"label", torch::kLong}};
//   for (int epoch = start; epoch < epochs; ++epoch) {
//     shard.set_epoch(epoch);
//     for (auto& batch : traintl::torch::iter_torch_batches(shard, 64, options)) {
//       auto loss = loss_fn(model->forward(batch["x"]), batch["label"]);  ...

// A batch of tensors by column name.
using TorchBatch = std::map<std::string, ::torch::Tensor>;

struct TorchBatchOptions {
  // How the epoch is read: drop_last, shuffle, seed, columns, prefetch_batches, ...
  ::traintl::IterOptions iter;
  // The tensor dtype of named columns. Default: none.
  std::map<std::string, ::torch::Dtype> dtypes;
  // The tensor dtype of the other columns. Default: none (a column keeps its own: float64,
  // float32, int64 or int32).
  std::optional<::torch::Dtype> dtype;
  // Where the tensors are. Default: get_device().
  std::optional<::torch::Device> device;
};

// One batch as tensors. A CPU tensor that keeps its column's dtype shares the batch's
// memory (no copy); the others are converted copies. Throws std::invalid_argument for a
// string column (select numeric ones with options.iter.columns) or a `dtypes` name that
// the batch does not have.
TorchBatch to_torch_batch(const ::traintl::Batch& batch, const TorchBatchOptions& options = {});

// One epoch of a shard as TorchBatch; a single-pass range (range-for), or next().
class TorchBatchIterable {
 public:
  class iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = TorchBatch;
    using difference_type = std::ptrdiff_t;
    using pointer = TorchBatch*;
    using reference = TorchBatch&;

    iterator() = default;
    explicit iterator(TorchBatchIterable* owner) : owner_(owner) {}
    TorchBatch& operator*() const { return *owner_->current_; }
    TorchBatch* operator->() const { return &*owner_->current_; }
    iterator& operator++() {
      if (!owner_->Advance()) owner_ = nullptr;
      return *this;
    }
    bool operator==(const iterator& other) const { return owner_ == other.owner_; }
    bool operator!=(const iterator& other) const { return owner_ != other.owner_; }

   private:
    TorchBatchIterable* owner_ = nullptr;
  };

  TorchBatchIterable(::traintl::BatchIterable batches, TorchBatchOptions options)
      : batches_(std::move(batches)), options_(std::move(options)) {}

  iterator begin() { return Advance() ? iterator(this) : iterator(); }
  iterator end() { return iterator(); }
  // The next batch, or nullopt at the end of the epoch.
  std::optional<TorchBatch> next() {
    if (!Advance()) return std::nullopt;
    return std::move(current_);
  }

 private:
  bool Advance() {
    current_.reset();
    std::optional<::traintl::Batch> batch = batches_.next();
    if (!batch) return false;
    current_ = to_torch_batch(*batch, options_);
    return true;
  }

  ::traintl::BatchIterable batches_;
  TorchBatchOptions options_;
  std::optional<TorchBatch> current_;
};

// One epoch of `shard` as tensors: shard.iter_batches(batch_size, options.iter), each batch
// converted by to_torch_batch. Throws traintl::DatasetError as iter_batches does.
TorchBatchIterable iter_torch_batches(::traintl::DatasetShard& shard, int64_t batch_size,
                                      const TorchBatchOptions& options = {});

}  // namespace torch
}  // namespace traintl
