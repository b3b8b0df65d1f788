// The runtime of traintl::torch: options from the worker context, the device, and the
// process group: c10d ProcessGroupGloo over our rendezvous store, or NCCL (nccl_group.h).
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <sstream>

#include <torch/csrc/utils/tensor_flatten.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "common/logging.h"
#include "traintl/host.h"
#include "traintl/torch.h"
#include "traintl/train.h"
#include "worker/torch/coalesce.h"
#include "worker/torch/nccl_group.h"
#include "worker/torch/progress.h"
#include "worker/torch/runtime.h"
#include "worker/torch/shm_group.h"
#include "worker/torch/store.h"

namespace traintl {
namespace torch {
namespace detail {
namespace {

constexpr std::chrono::seconds kDefaultTimeout{300};

// The group of a peer-recovery job: delegates to the current generation's Gloo group, so
// that what holds on to process_group() (prepared modules' gradient hooks) follows a
// regroup. Replaced groups are leaked: destroying one joins threads that may be stuck on
// the dead peer.
//
// Thread-safety: as ProcessGroup; Replace may be called from any thread, but not while
// a collective of the old generation is being issued (run_steps calls it between steps).
class GenerationGroup final : public ProcessGroup {
 public:
  explicit GenerationGroup(ProcessGroup* first) : current_(first) {}

  void Replace(ProcessGroup* next) { current_.store(next); }

  int rank() const override { return current_.load()->rank(); }
  int world_size() const override { return current_.load()->world_size(); }
  std::string backend() const override { return current_.load()->backend(); }
  std::shared_ptr<Work> allreduce_async(std::vector<at::Tensor> tensors, ReduceOp op) override {
    return current_.load()->allreduce_async(std::move(tensors), op);
  }
  void broadcast(std::vector<at::Tensor> tensors, int root) override {
    current_.load()->broadcast(std::move(tensors), root);
  }
  void barrier() override { current_.load()->barrier(); }
  std::vector<at::Tensor> allgather(const at::Tensor& tensor) override {
    return current_.load()->allgather(tensor);
  }

 private:
  std::atomic<ProcessGroup*> current_;
};

// Process-wide state. Deliberately leaked: destroying a process group at exit joins its
// threads, which can block on a peer that is already gone.
struct RuntimeState {
  std::mutex mu;
  bool resolved = false;          // guarded by mu
  RuntimeOptions options;         // guarded by mu; valid once resolved
  std::mutex group_mu;            // held while building the group (a blocking rendezvous)
  ProcessGroup* group = nullptr;  // guarded by group_mu
  // Peer recovery (guarded by group_mu): the stable group process_group() returns, rank
  // 0's store server (it outlives every generation's group), the generation in use.
  GenerationGroup* generations = nullptr;
  StoreServer* server = nullptr;
  int server_port = 0;
  int generation = 0;
  std::atomic<bool> joined{false};  // see Joining()
};

RuntimeState& State() {
  static RuntimeState* state = new RuntimeState;
  return *state;
}

// Reads the options from the worker context. Outside a worker (no host API: a user's own
// test of their model code) the process is a job of one rank on the CPU.
RuntimeOptions OptionsFromContext() {
  RuntimeOptions options;
  if (traintl::internal::current_host_api == nullptr) return options;
  const Context ctx = traintl::get_context();
  options.rank = ctx.world_rank();
  options.world_size = ctx.world_size();
  options.local_rank = ctx.local_rank();
  options.local_world_size = ctx.local_world_size();
  options.node_rank = ctx.node_rank();
  options.master_addr = ctx.master_addr().empty() ? "127.0.0.1" : ctx.master_addr();
  options.master_port = ctx.master_port();
  const int timeout_s = ctx.collective_timeout_s();
  options.collective_timeout =
      timeout_s > 0 ? std::chrono::milliseconds(std::chrono::seconds(timeout_s)) : kDefaultTimeout;
  options.rendezvous_timeout = options.collective_timeout;
  options.use_gpu = ctx.use_gpu();
  const nlohmann::json& j = ctx.json();
  options.peer_recovery = j.value("peer_recovery", false);
  options.join_generation = j.value("regroup_generation", 0);
  if (auto g = j.find("group_ranks"); g != j.end() && g->is_array() && !g->empty()) {
    const std::vector<int> ranks = g->get<std::vector<int>>();
    const auto at = std::find(ranks.begin(), ranks.end(), options.rank);
    if (at != ranks.end()) {
      options.job_rank = options.rank;
      options.rank = static_cast<int>(at - ranks.begin());
      options.world_size = static_cast<int>(ranks.size());
    }
  }
  return options;
}

Status Validate(const RuntimeOptions& o) {
  if (o.world_size < 1) return Status::InvalidArgument("world_size must be >= 1");
  if (o.local_world_size < 1 || o.local_rank < 0 || o.local_rank >= o.local_world_size ||
      o.node_rank < 0) {
    return Status::InvalidArgument("local rank " + std::to_string(o.local_rank) + " of " +
                                   std::to_string(o.local_world_size) + " on node " +
                                   std::to_string(o.node_rank) + " is not a valid placement");
  }
  if (o.rank < 0 || o.rank >= o.world_size) {
    return Status::InvalidArgument("rank " + std::to_string(o.rank) + " is not in [0, " +
                                   std::to_string(o.world_size) + ")");
  }
  if (o.world_size > 1 && o.file_store_path.empty() &&
      (o.master_port <= 0 || o.master_port > 65535)) {
    return Status::InvalidArgument("master_port " + std::to_string(o.master_port) +
                                   " is not a valid port");
  }
  if (o.collective_timeout.count() <= 0 || o.rendezvous_timeout.count() <= 0) {
    return Status::InvalidArgument("timeouts must be positive");
  }
  return Status::Ok();
}

bool IsLoopback(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return false;
  bool loopback = false;
  for (addrinfo* a = res; a != nullptr && !loopback; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      loopback = (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    } else if (a->ai_family == AF_INET6) {
      loopback =
          IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr);
    }
  }
  freeaddrinfo(res);
  return loopback;
}

// The local address this host uses to reach `host`: connect(2) on a UDP socket picks the
// route without sending anything.
std::optional<std::string> LocalAddressTowards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) {
    return std::nullopt;
  }
  std::optional<std::string> out;
  for (addrinfo* a = res; a != nullptr && !out; a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET6_ADDRSTRLEN] = {0};
      const void* addr =
          local.ss_family == AF_INET
              ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(&local)->sin_addr)
              : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(&local)->sin6_addr);
      if (inet_ntop(local.ss_family, addr, buf, sizeof buf) != nullptr) out = buf;
    }
    close(fd);
  }
  freeaddrinfo(res);
  return out;
}

// The interface Gloo binds to for its peer connections: GLOO_SOCKET_IFNAME when set (as in
// PyTorch), loopback for a single-host job, else the address that routes to the master.
std::shared_ptr<::gloo::transport::Device> GlooDevice(const RuntimeOptions& o) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && *ifname) {
    std::string first(ifname);
    first = first.substr(0, first.find(','));
    return c10d::ProcessGroupGloo::createDeviceForInterface(first);
  }
  if (o.world_size == 1 || !o.file_store_path.empty() || IsLoopback(o.master_addr)) {
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  }
  if (auto local = LocalAddressTowards(o.master_addr, o.master_port)) {
    return c10d::ProcessGroupGloo::createDeviceForHostname(*local);
  }
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

c10d::ReduceOp ToC10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:  // Gloo has no AVG: a sum divided by the world size on wait()
      return c10d::ReduceOp::SUM;
    case ReduceOp::kProduct:
      return c10d::ReduceOp::PRODUCT;
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
  }
  return c10d::ReduceOp::SUM;
}

// A Work over c10d works; finishes averaging and unflattening on wait().
class C10dWork final : public Work {
 public:
  C10dWork(std::vector<c10::intrusive_ptr<c10d::Work>> works, std::vector<Coalesced> groups,
           ReduceOp op, int world_size, std::string what)
      : works_(std::move(works)),
        groups_(std::move(groups)),
        op_(op),
        world_size_(world_size),
        what_(std::move(what)) {}

  void wait() override {
    if (done_) return;
    done_ = true;
    WaitBegins();
    for (auto& w : works_) {
      try {
        w->wait();
      } catch (const std::exception& e) {
        WaitEnds();
        throw CollectiveError(what_ + " failed: " + e.what());
      }
    }
    WaitEnds();
    ::torch::NoGradGuard no_grad;
    for (auto& g : groups_) {
      if (op_ == ReduceOp::kAvg) g.buffer.div_(world_size_);
      g.CopyBack();
    }
  }

 private:
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  std::vector<Coalesced> groups_;
  ReduceOp op_;
  int world_size_;
  std::string what_;
  bool done_ = false;
};

// ProcessGroup over a c10d backend. A template so that it needs no common base class of
// the backends: in LibTorch 1.13 that is c10d::ProcessGroup, in 2.x c10d::Backend.
template <typename Backend>
class C10dProcessGroup final : public ProcessGroup {
 public:
  C10dProcessGroup(c10::intrusive_ptr<Backend> backend, std::string name, int rank, int world)
      : backend_(std::move(backend)), name_(std::move(name)), rank_(rank), world_(world) {}

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend() const override { return name_; }

  std::shared_ptr<Work> allreduce_async(std::vector<at::Tensor> tensors, ReduceOp op) override {
    ::torch::NoGradGuard no_grad;
    if (op == ReduceOp::kAvg) {
      for (const auto& t : tensors) {
        if (t.defined() && !at::isFloatingType(t.scalar_type()) &&
            !at::isComplexType(t.scalar_type())) {
          throw std::invalid_argument("allreduce: kAvg needs floating-point tensors");
        }
      }
    }
    auto groups = Coalesce(tensors, "allreduce");
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    c10d::AllreduceOptions opts;
    opts.reduceOp = ToC10d(op);
    for (auto& g : groups) {
      std::vector<at::Tensor> one{g.buffer};
      works.push_back(Launch("allreduce", [&] { return backend_->allreduce(one, opts); }));
    }
    return std::make_shared<C10dWork>(std::move(works), std::move(groups), op, world_,
                                      Describe("allreduce"));
  }

  void broadcast(std::vector<at::Tensor> tensors, int root) override {
    if (root < 0 || root >= world_) {
      throw std::invalid_argument("broadcast: root " + std::to_string(root) + " out of range");
    }
    ::torch::NoGradGuard no_grad;
    auto groups = Coalesce(tensors, "broadcast");
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    for (auto& g : groups) {
      std::vector<at::Tensor> one{g.buffer};
      works.push_back(Launch("broadcast", [&] { return backend_->broadcast(one, opts); }));
    }
    // Only the receivers need the result unflattened; the root's tensors are the source.
    if (rank_ == root) {
      for (auto& g : groups) g.flattened = false;
    }
    C10dWork(std::move(works), std::move(groups), ReduceOp::kSum, world_, Describe("broadcast"))
        .wait();
  }

  void barrier() override {
    auto work = Launch("barrier", [&] { return backend_->barrier(c10d::BarrierOptions()); });
    C10dWork({work}, {}, ReduceOp::kSum, world_, Describe("barrier")).wait();
  }

  std::vector<at::Tensor> allgather(const at::Tensor& tensor) override {
    if (!tensor.defined()) throw std::invalid_argument("allgather: undefined tensor");
    ::torch::NoGradGuard no_grad;
    std::vector<at::Tensor> in{tensor.detach().contiguous()};
    std::vector<std::vector<at::Tensor>> out(1);
    for (int q = 0; q < world_; ++q) out[0].push_back(at::empty_like(in[0]));
    auto work = Launch("allgather", [&] { return backend_->allgather(out, in); });
    C10dWork({work}, {}, ReduceOp::kSum, world_, Describe("allgather")).wait();
    return out[0];
  }

 private:
  std::string Describe(const char* what) const {
    std::ostringstream os;
    os << name_ << " " << what << " (rank " << rank_ << " of " << world_ << ")";
    return os.str();
  }

  template <typename Fn>
  c10::intrusive_ptr<c10d::Work> Launch(const char* what, Fn&& fn) {
    CollectiveEntered();
    try {
      return fn();
    } catch (const std::exception& e) {
      throw CollectiveError(Describe(what) + " failed to start: " + e.what());
    }
  }

  c10::intrusive_ptr<Backend> backend_;
  std::string name_;
  int rank_;
  int world_;
};

template <typename T>
T ValueOrThrow(Result<T> result) {
  if (!result.ok()) throw std::runtime_error(result.status().message());
  return std::move(result).value();
}

void OkOrThrow(const Status& status) {
  if (!status.ok()) throw std::runtime_error(status.message());
}

// c10d::Store over our StoreClient (see store.h for why not c10d::TCPStore). On rank 0 it
// also owns the server.
class RendezvousStore final : public c10d::Store {
 public:
  RendezvousStore(std::unique_ptr<StoreServer> server, std::unique_ptr<StoreClient> client,
                  std::chrono::milliseconds timeout)
      : c10d::Store(timeout), server_(std::move(server)), client_(std::move(client)) {}

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    OkOrThrow(client_->Set(key, value));
  }
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override {
    return ValueOrThrow(client_->CompareSet(key, expected, desired));
  }
  std::vector<uint8_t> get(const std::string& key) override {
    return ValueOrThrow(client_->Get(key, timeout_));
  }
  int64_t add(const std::string& key, int64_t value) override {
    return ValueOrThrow(client_->Add(key, value));
  }
  bool deleteKey(const std::string& key) override { return ValueOrThrow(client_->Delete(key)); }
  bool check(const std::vector<std::string>& keys) override {
    return ValueOrThrow(client_->Check(keys));
  }
  int64_t getNumKeys() override { return ValueOrThrow(client_->NumKeys()); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    OkOrThrow(client_->Wait(keys, timeout));
  }

 private:
  std::unique_ptr<StoreServer> server_;  // rank 0 only
  std::unique_ptr<StoreClient> client_;
};

// Rank 0 serves the store on master_addr:master_port, bound to that address only; should
// master_addr not be an address of this host, it falls back to every interface (as
// c10d::TCPStore always does) rather than failing the job.
std::unique_ptr<StoreServer> StartStoreServer(const RuntimeOptions& o) {
  auto started = StoreServer::Start(o.master_addr, o.master_port);
  if (!started.ok()) {
    auto fallback = StoreServer::Start("", o.master_port);
    if (!fallback.ok()) throw std::runtime_error(started.status().message());
    LOG_WARN << "traintl::torch: " << started.status().message()
             << "; serving the rendezvous store on every interface instead";
    started = std::move(fallback);
  }
  return std::move(started).value();
}

c10::intrusive_ptr<c10d::Store> MakeRendezvousStore(const RuntimeOptions& o) {
  std::unique_ptr<StoreServer> server;
  if (o.rank == 0) server = StartStoreServer(o);
  auto client =
      ValueOrThrow(StoreClient::Connect(o.master_addr, o.master_port, o.rendezvous_timeout));
  return c10::make_intrusive<RendezvousStore>(std::move(server), std::move(client),
                                              o.rendezvous_timeout);
}

}  // namespace

c10::intrusive_ptr<c10d::ProcessGroupGloo> MakeGlooGroup(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, const RuntimeOptions& o) {
  auto opts = c10d::ProcessGroupGloo::Options::create(o.collective_timeout);
  opts->devices.push_back(GlooDevice(o));
  opts->threads = 2;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, opts);
}

namespace {

// Generation `generation`'s Gloo group. Rank 0 serves the store once per process (a
// replacement rank 0 starts it again on the attempt's port, which its dead predecessor
// freed); every rank connects anew, since the old connection may have died with rank 0.
// Requires State().group_mu.
ProcessGroup* BuildGeneration(const RuntimeOptions& o, int generation) {
  RuntimeState& s = State();
  // Rank 0 of the group serves its store: the attempt's rank 0 on master_port, or in an
  // elastic job that lost it, the first rank left on the port the head reserved for it.
  if (o.rank == 0 && (s.server == nullptr || s.server_port != o.master_port)) {
    s.server = StartStoreServer(o).release();
    s.server_port = o.master_port;
  }
  auto client =
      ValueOrThrow(StoreClient::Connect(o.master_addr, o.master_port, o.rendezvous_timeout));
  c10::intrusive_ptr<c10d::Store> store =
      c10::make_intrusive<RendezvousStore>(nullptr, std::move(client), o.rendezvous_timeout);
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(
      "traintl/generation_" + std::to_string(generation), store);
  return new C10dProcessGroup<c10d::ProcessGroupGloo>(
      MakeGlooGroup(prefixed, o.rank, o.world_size, o), "gloo", o.rank, o.world_size);
}

std::unique_ptr<ProcessGroup> BuildGroup(const RuntimeOptions& o) {
  if (o.peer_recovery && o.world_size > 1 && o.file_store_path.empty()) {
    RuntimeState& s = State();
    s.generation = o.join_generation;
    auto group = std::make_unique<GenerationGroup>(BuildGeneration(o, s.generation));
    s.generations = group.get();
    return group;
  }
  c10::intrusive_ptr<c10d::Store> store;
  if (!o.file_store_path.empty()) {
    store = c10::make_intrusive<c10d::FileStore>(o.file_store_path, o.world_size);
    store->setTimeout(o.rendezvous_timeout);
  } else if (o.world_size == 1) {
    store = c10::make_intrusive<c10d::HashStore>();
  } else {
    store = MakeRendezvousStore(o);
  }
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("traintl/default_pg", store);

  if (o.use_gpu && ::torch::cuda::is_available()) {
    return MakeNcclGroup(prefixed, o, get_device().index());
  }
  auto make_gloo = [&o](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size) {
    return MakeGlooGroup(store, rank, size, o);
  };
  if (auto shm = MakeShmGroup(store, o, make_gloo)) return shm;
  return std::make_unique<C10dProcessGroup<c10d::ProcessGroupGloo>>(
      make_gloo(prefixed, o.rank, o.world_size), "gloo", o.rank, o.world_size);
}

}  // namespace

RuntimeOptions CurrentOptions() {
  RuntimeState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.resolved) {
    s.options = OptionsFromContext();
    if (s.options.job_rank < 0) s.options.job_rank = s.options.rank;
    s.resolved = true;
  }
  return s.options;
}

Status InitForTesting(const RuntimeOptions& options) {
  TRAINTL_RETURN_IF_ERROR(Validate(options));
  RuntimeState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.resolved) return Status::FailedPrecondition("traintl::torch is already initialized");
  s.options = options;
  if (s.options.job_rank < 0) s.options.job_rank = s.options.rank;
  s.resolved = true;
  return Status::Ok();
}

namespace {

// An elastic regroup's group (traintl_host_api.regroup_info): this rank's place in it, its
// size and its store replace the options in effect. Nothing changes for a peer-recovery
// regroup, which keeps every rank.
void ApplyRegroupInfo(int generation) {
  const traintl_host_api* api = traintl::internal::current_host_api;
  if (api == nullptr || !TRAINTL_HOST_API_HAS(api, regroup_info) || api->regroup_info == nullptr)
    return;
  const char* text = api->regroup_info(api->host);
  if (text == nullptr) return;
  const nlohmann::json info = nlohmann::json::parse(text, nullptr, false);
  if (!info.is_object() || info.value("generation", 0) != generation || !info.contains("ranks") ||
      !info["ranks"].is_array() || info["ranks"].empty())
    return;
  const std::vector<int> ranks = info["ranks"].get<std::vector<int>>();
  RuntimeState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  const auto at = std::find(ranks.begin(), ranks.end(), s.options.job_rank);
  if (at == ranks.end()) {
    throw CollectiveError("traintl::torch: rank " + std::to_string(s.options.job_rank) +
                          " is not in the group of generation " + std::to_string(generation));
  }
  s.options.rank = static_cast<int>(at - ranks.begin());
  s.options.world_size = static_cast<int>(ranks.size());
  s.options.master_addr = info.value("store_addr", s.options.master_addr);
  s.options.master_port = info.value("store_port", s.options.master_port);
}

}  // namespace

void RegroupProcessGroup(int generation) {
  RuntimeState& s = State();
  process_group();  // the first generation, when none was built yet
  ApplyRegroupInfo(generation);
  const RuntimeOptions o = CurrentOptions();
  std::lock_guard<std::mutex> lock(s.group_mu);
  if (s.generations == nullptr)
    throw std::logic_error("traintl::torch: regroup without peer recovery");
  ProcessGroup* next = nullptr;
  try {
    next = BuildGeneration(o, generation);
  } catch (const std::exception& e) {
    throw CollectiveError("traintl::torch: rendezvous of generation " + std::to_string(generation) +
                          " (rank " + std::to_string(o.rank) + ") failed: " + e.what());
  }
  s.generations->Replace(next);
  s.generation = generation;
  ResetGradientSynchronizers();
  LOG_INFO << "traintl::torch: regrouped as generation " << generation << " (rank " << o.rank
           << " of " << o.world_size << ")";
}

int CurrentGeneration() {
  RuntimeState& s = State();
  std::lock_guard<std::mutex> lock(s.group_mu);
  return s.generation;
}

bool Joining() { return CurrentOptions().join_generation > 0 && !State().joined.load(); }
void MarkJoined() { State().joined.store(true); }

int WorldRank() { return CurrentOptions().rank; }
int WorldSize() { return CurrentOptions().world_size; }

}  // namespace detail

::torch::Device get_device() {
  const detail::RuntimeOptions o = detail::CurrentOptions();
  if (o.use_gpu && ::torch::cuda::is_available()) {
    const auto count = static_cast<int>(::torch::cuda::device_count());
    return ::torch::Device(::torch::kCUDA, static_cast<c10::DeviceIndex>(o.local_rank % count));
  }
  return ::torch::Device(::torch::kCPU);
}

std::vector<::torch::Tensor> ProcessGroup::allgather(const ::torch::Tensor& tensor) {
  // Each rank fills its own row of zeros and the rows are summed: exact for any dtype, as
  // bytes, since every other rank adds zeros to them.
  if (!tensor.defined()) throw std::invalid_argument("allgather: undefined tensor");
  ::torch::NoGradGuard no_grad;
  at::Tensor src = tensor.detach().contiguous().reshape({-1});
  const int64_t bytes = src.numel() * static_cast<int64_t>(src.element_size());
  at::Tensor rows = at::zeros({world_size(), bytes}, src.options().dtype(at::kByte));
  rows[rank()].copy_(src.view(at::kByte));
  allreduce(rows, ReduceOp::kSum);
  std::vector<::torch::Tensor> out;
  for (int q = 0; q < world_size(); ++q) {
    out.push_back(rows[q].view(src.scalar_type()).view(tensor.sizes()));
  }
  return out;
}

ProcessGroup& process_group() {
  detail::RuntimeState& s = detail::State();
  const detail::RuntimeOptions o = detail::CurrentOptions();
  std::lock_guard<std::mutex> lock(s.group_mu);
  if (s.group != nullptr) return *s.group;
  Status valid = detail::Validate(o);
  if (!valid.ok()) throw std::invalid_argument("traintl::torch: " + valid.message());
  try {
    s.group = detail::BuildGroup(o).release();
  } catch (const CollectiveError&) {
    throw;
  } catch (const std::exception& e) {
    throw CollectiveError("traintl::torch: rendezvous of rank " + std::to_string(o.rank) + " of " +
                          std::to_string(o.world_size) + " failed: " + e.what());
  }
  LOG_INFO << "traintl::torch: process group ready (" << s.group->backend() << ", rank " << o.rank
           << " of " << o.world_size << ")";
  return *s.group;
}

}  // namespace torch
}  // namespace traintl
