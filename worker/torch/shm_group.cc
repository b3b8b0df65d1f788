#include "worker/torch/shm_group.h"

#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <unordered_map>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "common/logging.h"
#include "worker/torch/coalesce.h"
#include "worker/torch/progress.h"
#include "worker/torch/shm_communicator.h"

namespace traintl {
namespace torch {
namespace detail {
namespace {

std::optional<ShmDtype> ToShm(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return ShmDtype::kFloat32;
    case at::kDouble:
      return ShmDtype::kFloat64;
    case at::kBFloat16:
      return ShmDtype::kBFloat16;
    case at::kHalf:
      return ShmDtype::kFloat16;
    case at::kInt:
      return ShmDtype::kInt32;
    case at::kLong:
      return ShmDtype::kInt64;
    case at::kByte:
      return ShmDtype::kUInt8;
    default:
      return std::nullopt;
  }
}

ShmOp ToShm(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:  // a sum, divided by the world size as it is copied out
      return ShmOp::kSum;
    case ReduceOp::kProduct:
      return ShmOp::kProduct;
    case ReduceOp::kMin:
      return ShmOp::kMin;
    case ReduceOp::kMax:
      return ShmOp::kMax;
  }
  return ShmOp::kSum;
}

c10d::ReduceOp ToGloo(ShmOp op) {
  switch (op) {
    case ShmOp::kSum:
      return c10d::ReduceOp::SUM;
    case ShmOp::kProduct:
      return c10d::ReduceOp::PRODUCT;
    case ShmOp::kMin:
      return c10d::ReduceOp::MIN;
    case ShmOp::kMax:
      return c10d::ReduceOp::MAX;
  }
  return c10d::ReduceOp::SUM;
}

std::string Str(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }
std::vector<uint8_t> ToBytes(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

// Runs a Gloo collective to completion, as a Status (the leaders' step never throws into
// the shared-memory code).
template <typename Fn>
Status RunGloo(const char* what, Fn&& fn) {
  try {
    fn()->wait();
    return Status::Ok();
  } catch (const std::exception& e) {
    return Status::Unavailable(std::string("inter-node ") + what + ": " + e.what());
  }
}

// A collective queued on the group's thread: done once the thread ran it.
struct Pending {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;  // guarded by mu
  std::string error;  // guarded by mu; empty when it succeeded

  void Finish(std::string err) {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
      error = std::move(err);
    }
    cv.notify_all();
  }
  // Waits; throws CollectiveError when the collective failed.
  void Wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    if (!error.empty()) throw CollectiveError(error);
  }
};

class ShmWork final : public Work {
 public:
  ShmWork(std::shared_ptr<Pending> pending, std::vector<Coalesced> groups)
      : pending_(std::move(pending)), groups_(std::move(groups)) {}

  void wait() override {
    if (done_) return;
    done_ = true;
    WaitBegins();
    try {
      pending_->Wait();
    } catch (...) {
      WaitEnds();
      throw;
    }
    WaitEnds();
    ::torch::NoGradGuard no_grad;
    for (auto& g : groups_) g.CopyBack();
  }

 private:
  std::shared_ptr<Pending> pending_;
  std::vector<Coalesced> groups_;
  bool done_ = false;
};

std::optional<bool> AsyncOverride();

// Where the group's ranks are, learned at the rendezvous.
struct Layout {
  int node = 0;                     // this rank's node index (node_rank)
  int nodes = 1;                    // the job's nodes
  std::vector<int> local_to_world;  // this node's ranks' world ranks, by local rank
};

class ShmProcessGroup final : public ProcessGroup {
 public:
  ShmProcessGroup(ShmSegment segment, ShmOptions shm, Layout layout,
                  c10::intrusive_ptr<c10d::ProcessGroupGloo> leaders,
                  c10::intrusive_ptr<c10d::Store> store, int rank, int world)
      : segment_(std::move(segment)),
        comm_(segment_.data(), std::move(shm)),
        layout_(std::move(layout)),
        leaders_(std::move(leaders)),
        store_(std::move(store)),
        rank_(rank),
        world_(world),
        inline_(!AsyncOverride().value_or(layout_.nodes > 1)) {
    if (!inline_) thread_ = std::thread([this] { Run(); });
  }

  ~ShmProcessGroup() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend() const override { return layout_.nodes > 1 ? "shm+gloo" : "shm"; }

  std::shared_ptr<Work> allreduce_async(std::vector<at::Tensor> tensors, ReduceOp op) override {
    ::torch::NoGradGuard no_grad;
    for (const auto& t : tensors) Check(t, "allreduce");
    if (op == ReduceOp::kAvg) {
      for (const auto& t : tensors) {
        if (!at::isFloatingType(t.scalar_type())) {
          throw std::invalid_argument("allreduce: kAvg needs floating-point tensors");
        }
      }
    }
    auto groups = Coalesce(tensors, "allreduce");
    std::vector<at::Tensor> buffers;
    for (const auto& g : groups) buffers.push_back(g.buffer);
    const double divisor = op == ReduceOp::kAvg ? world_ : 1;
    const ShmOp shm_op = ToShm(op);
    CollectiveEntered();
    auto pending = Enqueue([this, buffers, divisor, shm_op]() -> Status {
      for (const auto& b : buffers) {
        const ShmDtype dtype = *ToShm(b.scalar_type());
        ShmNodeStep step;
        if (layout_.nodes > 1) {  // every rank syncs around it; the leader runs it
          step = [this, &b, shm_op](void* chunk, size_t n) {
            at::Tensor view = at::from_blob(chunk, {static_cast<int64_t>(n)}, b.options());
            // Gloo has no 16-bit floats: the leaders reduce them widened to float32.
            const bool narrow =
                view.scalar_type() == at::kBFloat16 || view.scalar_type() == at::kHalf;
            std::vector<at::Tensor> one{narrow ? view.to(at::kFloat) : view};
            c10d::AllreduceOptions opts;
            opts.reduceOp = ToGloo(shm_op);
            Status s = RunGloo("allreduce", [&] { return leaders_->allreduce(one, opts); });
            if (s.ok() && narrow) view.copy_(one[0]);
            return s;
          };
        }
        TRAINTL_RETURN_IF_ERROR(comm_.Allreduce(b.data_ptr(), static_cast<size_t>(b.numel()), dtype,
                                                shm_op, divisor, step));
      }
      return Status::Ok();
    });
    return std::make_shared<ShmWork>(std::move(pending), std::move(groups));
  }

  void broadcast(std::vector<at::Tensor> tensors, int root) override {
    if (root < 0 || root >= world_) {
      throw std::invalid_argument("broadcast: root " + std::to_string(root) + " out of range");
    }
    ::torch::NoGradGuard no_grad;
    for (const auto& t : tensors) Check(t, "broadcast");
    auto groups = Coalesce(tensors, "broadcast");
    const auto [root_node, root_local] = Locate(root);
    std::vector<at::Tensor> buffers;
    for (const auto& g : groups) buffers.push_back(g.buffer);
    CollectiveEntered();
    auto pending = Enqueue([this, buffers, root_node = root_node, root_local = root_local] {
      for (const auto& b : buffers) {
        const size_t bytes = static_cast<size_t>(b.numel()) * b.element_size();
        ShmNodeStep step;
        if (layout_.nodes > 1) {  // every rank syncs around it; the leader runs it
          step = [this, root_node](void* chunk, size_t n) {
            at::Tensor view = at::from_blob(chunk, {static_cast<int64_t>(n)}, at::kByte);
            std::vector<at::Tensor> one{view};
            c10d::BroadcastOptions opts;
            opts.rootRank = root_node;
            return RunGloo("broadcast", [&] { return leaders_->broadcast(one, opts); });
          };
        }
        const int local_root = root_node == layout_.node ? root_local : -1;
        TRAINTL_RETURN_IF_ERROR(comm_.Broadcast(b.data_ptr(), bytes, local_root, step));
      }
      return Status::Ok();
    });
    // Only the receivers need the result unflattened; the root's tensors are the source.
    if (rank_ == root) {
      for (auto& g : groups) g.flattened = false;
    }
    ShmWork(std::move(pending), std::move(groups)).wait();
  }

  void barrier() override {
    CollectiveEntered();
    auto pending = Enqueue([this] {
      ShmNodeStep step;
      if (layout_.nodes > 1) {
        step = [this](void*, size_t) {
          return RunGloo("barrier", [&] { return leaders_->barrier(c10d::BarrierOptions()); });
        };
      }
      return comm_.Barrier(step);
    });
    ShmWork(std::move(pending), {}).wait();
  }

  std::vector<at::Tensor> allgather(const at::Tensor& tensor) override {
    // Across nodes: the zero-padded allreduce of the base class, hierarchical like any other.
    if (layout_.nodes > 1) return ProcessGroup::allgather(tensor);
    ::torch::NoGradGuard no_grad;
    Check(tensor, "allgather");
    at::Tensor src = tensor.detach().contiguous();
    const size_t bytes = static_cast<size_t>(src.numel()) * src.element_size();
    at::Tensor by_local = at::empty({comm_.local_size(), static_cast<int64_t>(bytes)},
                                    src.options().dtype(at::kByte));
    CollectiveEntered();
    auto pending = Enqueue([this, src, by_local, bytes] {
      return comm_.Allgather(src.data_ptr(), bytes, by_local.data_ptr());
    });
    ShmWork(std::move(pending), {}).wait();
    std::vector<at::Tensor> out(static_cast<size_t>(world_));
    for (int q = 0; q < static_cast<int>(layout_.local_to_world.size()); ++q) {
      out[layout_.local_to_world[q]] = by_local[q].view(src.scalar_type()).view(tensor.sizes());
    }
    return out;
  }

 private:
  void Check(const at::Tensor& t, const char* what) const {
    if (!t.defined()) throw std::invalid_argument(std::string(what) + ": undefined tensor");
    if (!t.device().is_cpu() || t.is_sparse()) {
      throw std::invalid_argument(std::string(what) +
                                  ": shared-memory collectives take dense CPU tensors");
    }
    if (!ToShm(t.scalar_type())) {
      throw std::invalid_argument(
          std::string(what) + ": dtype " + std::string(c10::toString(t.scalar_type())) +
          " is not supported by shared-memory collectives (float32, float64, bfloat16, "
          "float16, int32, int64, uint8); TRAINTL_SHM_COLLECTIVES=0 in the job's env uses "
          "Gloo");
    }
  }

  // The node and local rank of world rank `rank`, published at the rendezvous.
  std::pair<int, int> Locate(int rank) {
    for (int q = 0; q < static_cast<int>(layout_.local_to_world.size()); ++q) {
      if (layout_.local_to_world[q] == rank) return {layout_.node, q};
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = where_.find(rank);
      if (it != where_.end()) return it->second;
    }
    std::istringstream in(Str(store_->get("where/" + std::to_string(rank))));
    std::pair<int, int> at{-1, -1};
    in >> at.first >> at.second;
    if (!in) throw CollectiveError("broadcast: rank " + std::to_string(rank) + " is not placed");
    std::lock_guard<std::mutex> lock(mu_);
    where_.emplace(rank, at);
    return at;
  }

  std::shared_ptr<Pending> Enqueue(std::function<Status()> fn) {
    auto pending = std::make_shared<Pending>();
    if (Inline()) {
      std::lock_guard<std::mutex> lock(inline_mu_);
      // The rank is in the collective until it returns: progress counts it as waiting for
      // its peers (a stalled collective names the ranks that are not in it).
      WaitBegins();
      Execute(fn, *pending);
      WaitEnds();
      return pending;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.emplace_back(std::move(fn), pending);
    }
    cv_.notify_all();
    return pending;
  }

  // Within one node a collective is memory copies on the caller's core: a thread of its own
  // would overlap nothing on a rank that has one core, and waking it costs a scheduler
  // round trip while the rank's compute holds the core. Across nodes the thread overlaps
  // the network with compute. TRAINTL_SHM_ASYNC overrides (see AsyncOverride).
  bool Inline() const { return inline_; }

  void Execute(const std::function<Status()>& fn, Pending& pending) {
    Status s;
    try {
      s = fn();
    } catch (const std::exception& e) {
      s = Status::Internal(e.what());
    }
    pending.Finish(s.ok() ? ""
                          : "shm collective (rank " + std::to_string(rank_) + " of " +
                                std::to_string(world_) + ") failed: " + s.message());
  }

  void Run() {
    for (;;) {
      std::pair<std::function<Status()>, std::shared_ptr<Pending>> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      Execute(job.first, *job.second);
    }
  }

  // Constant after construction.
  ShmSegment segment_;
  ShmCommunicator comm_;  // used only on thread_
  const Layout layout_;
  const c10::intrusive_ptr<c10d::ProcessGroupGloo> leaders_;  // leaders only; else null
  const c10::intrusive_ptr<c10d::Store> store_;
  const int rank_;
  const int world_;
  const bool inline_;

  std::mutex inline_mu_;  // held while a collective runs inline: they run one at a time

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::function<Status()>, std::shared_ptr<Pending>>>
      queue_;                                           // guarded by mu_
  bool stopping_ = false;                               // guarded by mu_
  std::unordered_map<int, std::pair<int, int>> where_;  // guarded by mu_

  std::thread thread_;  // runs Run() unless inline_; started once the members above exist
};

// TRAINTL_SHM_ASYNC=1 runs every collective on the group's thread, =0 on the caller's.
std::optional<bool> AsyncOverride() {
  const char* v = std::getenv("TRAINTL_SHM_ASYNC");
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v) != "0";
}

bool Disabled() {
  const char* v = std::getenv("TRAINTL_SHM_COLLECTIVES");
  return v != nullptr && std::string(v) == "0";
}

// Within one node a small chunk keeps each step in cache. Across nodes every chunk is one
// Gloo allreduce of the leaders, whose fixed cost (a network round trip, waking the peers)
// wants few large chunks: 4 MiB gave 1.3x flat Gloo where 256 KiB gave 0.7x
// (bench/ddp/hier.sh). Every rank of a node computes the same: the leader announces it.
size_t ChunkBytes(const RuntimeOptions& o) {
  const char* v = std::getenv("TRAINTL_SHM_CHUNK_KB");
  const long kb = v != nullptr ? std::atol(v) : 0;
  if (kb > 0) return static_cast<size_t>(kb) << 10;
  return o.local_world_size < o.world_size ? 4u << 20 : ShmOptions().chunk_bytes;
}

}  // namespace

std::unique_ptr<ProcessGroup> MakeShmGroup(const c10::intrusive_ptr<c10d::Store>& base,
                                           const RuntimeOptions& o, const GlooFactory& make_gloo) {
  if (Disabled() || o.world_size < 2) return nullptr;
  auto store = c10::make_intrusive<c10d::PrefixStore>("traintl/shm", base);
  const std::string node = std::to_string(o.node_rank);
  const std::string seg_key = "seg/" + node;
  const bool leader = o.local_rank == 0;

  // The node's leader creates the segment; the others map it.
  ShmSegment segment;
  size_t chunk = ChunkBytes(o);
  std::string failure;
  if (o.local_world_size < 1 || o.local_world_size > 64 || o.local_rank < 0 ||
      o.local_rank >= o.local_world_size) {
    failure = "local rank " + std::to_string(o.local_rank) + " of " +
              std::to_string(o.local_world_size) + " is outside 1..64 ranks per node";
  } else if (leader) {
    auto created = ShmSegment::Create(ShmCommunicator::SegmentBytes(o.local_world_size, chunk));
    if (created.ok()) {
      segment = std::move(created).value();
      store->set(seg_key,
                 ToBytes(std::to_string(getpid()) + " " + std::to_string(segment.fd()) + " " +
                         std::to_string(segment.size()) + " " + std::to_string(chunk)));
    } else {
      failure = created.status().message();
      store->set(seg_key, ToBytes("none"));
    }
  } else {
    std::istringstream in(Str(store->get(seg_key)));
    pid_t pid = 0;
    int fd = -1;
    size_t bytes = 0;
    if (in >> pid >> fd >> bytes >> chunk) {
      auto opened = ShmSegment::Open(pid, fd, bytes);
      if (opened.ok()) {
        segment = std::move(opened).value();
      } else {
        failure = opened.status().message();
      }
    } else {
      failure = "the node's leader has no segment";
    }
  }
  const std::string me = std::to_string(o.rank);
  store->set("where/" + me, ToBytes(node + " " + std::to_string(o.local_rank)));
  store->set("local/" + node + "/" + std::to_string(o.local_rank),
             ToBytes(me + " " + std::to_string(getpid())));
  if (!failure.empty()) LOG_WARN << "traintl::torch: no shared-memory collectives: " << failure;
  store->add("failed", failure.empty() ? 0 : 1);
  if (leader) store->add("nodes", 1);
  if (store->add("arrived", 1) == o.world_size) store->set("ready", ToBytes("1"));
  store->wait({"ready"});
  const int64_t failed = store->add("failed", 0);
  const int64_t nodes = store->add("nodes", 0);
  // Nothing to share when every node has one rank; a failed rank makes everyone use Gloo.
  if (failed > 0 || nodes >= o.world_size) return nullptr;
  if (o.node_rank < 0 || o.node_rank >= nodes) {
    throw std::runtime_error("node_rank " + node + " is not below the job's " +
                             std::to_string(nodes) + " nodes");
  }

  Layout layout;
  layout.node = o.node_rank;
  layout.nodes = static_cast<int>(nodes);
  ShmOptions shm;
  for (int q = 0; q < o.local_world_size; ++q) {
    std::istringstream in(Str(store->get("local/" + node + "/" + std::to_string(q))));
    int world_rank = -1;
    pid_t pid = 0;
    in >> world_rank >> pid;
    layout.local_to_world.push_back(world_rank);
    shm.peer_pids.push_back(pid);
  }
  shm.local_rank = o.local_rank;
  shm.local_size = o.local_world_size;
  shm.chunk_bytes = chunk;
  shm.timeout = o.collective_timeout;

  c10::intrusive_ptr<c10d::ProcessGroupGloo> leaders;
  if (nodes > 1 && leader) {
    leaders = make_gloo(c10::make_intrusive<c10d::PrefixStore>("leaders", store), o.node_rank,
                        static_cast<int>(nodes));
  }
  return std::make_unique<ShmProcessGroup>(std::move(segment), std::move(shm), std::move(layout),
                                           std::move(leaders), store, o.rank, o.world_size);
}

}  // namespace detail
}  // namespace torch
}  // namespace traintl
