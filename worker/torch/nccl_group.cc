#include "worker/torch/nccl_group.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "worker/torch/nccl/nccl_communicator.h"

namespace traintl {
namespace torch {
namespace detail {
namespace {

constexpr char kLibrary[] = "libtraintl_nccl.so";

struct NcclApi {
  decltype(&traintl_nccl_abi_version) abi_version = nullptr;
  decltype(&traintl_nccl_device_count) device_count = nullptr;
  decltype(&traintl_nccl_unique_id) unique_id = nullptr;
  decltype(&traintl_nccl_create) create = nullptr;
};

// The directory libtraintl_torch.so was loaded from: libtraintl_nccl.so is installed
// beside it.
std::string OwnDirectory() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&OwnDirectory), &info) == 0 || info.dli_fname == nullptr)
    return "";
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

// Loads the library once per process (never unloaded: communicators live until exit).
const NcclApi& LoadApi() {
  static const NcclApi api = [] {
    void* handle = nullptr;
    std::string errors;
    for (const std::string& candidate : {OwnDirectory() + kLibrary, std::string(kLibrary)}) {
      handle = ::dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle != nullptr) break;
      const char* e = ::dlerror();
      errors += std::string(errors.empty() ? "" : "; ") + (e ? e : candidate);
    }
    if (handle == nullptr) {
      throw CollectiveError("use_gpu needs NCCL, but this traintl::torch cannot load " +
                            std::string(kLibrary) +
                            " (built only when CMake finds CUDA with NCCL): " + errors);
    }
    NcclApi a;
    a.abi_version =
        reinterpret_cast<decltype(a.abi_version)>(::dlsym(handle, "traintl_nccl_abi_version"));
    a.device_count =
        reinterpret_cast<decltype(a.device_count)>(::dlsym(handle, "traintl_nccl_device_count"));
    a.unique_id =
        reinterpret_cast<decltype(a.unique_id)>(::dlsym(handle, "traintl_nccl_unique_id"));
    a.create = reinterpret_cast<decltype(a.create)>(::dlsym(handle, "traintl_nccl_create"));
    if (!a.abi_version || !a.device_count || !a.unique_id || !a.create)
      throw CollectiveError(std::string(kLibrary) + " lacks its entry points");
    if (a.abi_version() != nccl::kAbiVersion) {
      throw CollectiveError(std::string(kLibrary) + " has ABI version " +
                            std::to_string(a.abi_version()) + ", this traintl::torch needs " +
                            std::to_string(nccl::kAbiVersion));
    }
    return a;
  }();
  return api;
}

nccl::DataType ToNccl(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return nccl::DataType::kFloat32;
    case at::kDouble:
      return nccl::DataType::kFloat64;
    case at::kHalf:
      return nccl::DataType::kFloat16;
    case at::kBFloat16:
      return nccl::DataType::kBFloat16;
    case at::kChar:
      return nccl::DataType::kInt8;
    case at::kByte:
      return nccl::DataType::kUInt8;
    case at::kBool:
      return nccl::DataType::kUInt8;
    case at::kInt:
      return nccl::DataType::kInt32;
    case at::kLong:
      return nccl::DataType::kInt64;
    default:
      throw std::invalid_argument(std::string("NCCL: unsupported dtype ") + at::toString(t));
  }
}

nccl::ReduceOp ToNccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return nccl::ReduceOp::kSum;
    case ReduceOp::kAvg:
      return nccl::ReduceOp::kAvg;
    case ReduceOp::kMin:
      return nccl::ReduceOp::kMin;
    case ReduceOp::kMax:
      return nccl::ReduceOp::kMax;
    case ReduceOp::kProduct:
      return nccl::ReduceOp::kProd;
  }
  return nccl::ReduceOp::kSum;
}

class NcclProcessGroup;

class NcclWork final : public Work {
 public:
  explicit NcclWork(NcclProcessGroup* group) : group_(group) {}
  void wait() override;

 private:
  NcclProcessGroup* group_;
};

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(std::unique_ptr<nccl::Communicator> comm, int rank, int world, int device)
      : comm_(std::move(comm)), rank_(rank), world_(world), device_(device) {}

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend() const override { return "nccl"; }

  std::shared_ptr<Work> allreduce_async(std::vector<at::Tensor> tensors, ReduceOp op) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& t : tensors) {
      Check(t, "allreduce");
      if (op == ReduceOp::kAvg && !at::isFloatingType(t.scalar_type()))
        throw std::invalid_argument("allreduce: kAvg needs floating-point tensors");
      OrThrow(comm_->AllReduce(t.data_ptr(), static_cast<size_t>(t.numel()),
                               ToNccl(t.scalar_type()), ToNccl(op)),
              "allreduce");
    }
    return std::make_shared<NcclWork>(this);
  }

  void broadcast(std::vector<at::Tensor> tensors, int root) override {
    if (root < 0 || root >= world_)
      throw std::invalid_argument("broadcast: root " + std::to_string(root) + " out of range");
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& t : tensors) {
      Check(t, "broadcast");
      OrThrow(comm_->Broadcast(t.data_ptr(), static_cast<size_t>(t.numel()),
                               ToNccl(t.scalar_type()), root),
              "broadcast");
    }
    OrThrow(comm_->Wait(), "broadcast");
  }

  void barrier() override {
    at::Tensor one =
        at::ones({1}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, device_));
    allreduce_async({one}, ReduceOp::kSum)->wait();
  }

  void Wait() {
    std::lock_guard<std::mutex> lock(mu_);
    OrThrow(comm_->Wait(), "wait");
  }

 private:
  void Check(const at::Tensor& t, const char* what) const {
    if (!t.defined() || !t.is_cuda() || !t.is_contiguous() || t.is_sparse()) {
      throw std::invalid_argument(std::string("nccl ") + what +
                                  ": tensors must be dense, contiguous and on the GPU");
    }
  }

  void OrThrow(const std::string& error, const char* what) const {
    if (!error.empty()) {
      throw CollectiveError("nccl " + std::string(what) + " (rank " + std::to_string(rank_) +
                            " of " + std::to_string(world_) + ") failed: " + error);
    }
  }

  std::mutex mu_;
  std::unique_ptr<nccl::Communicator> comm_;  // guarded by mu_
  const int rank_;
  const int world_;
  const int device_;
};

void NcclWork::wait() { group_->Wait(); }

}  // namespace

std::unique_ptr<ProcessGroup> MakeNcclGroup(const c10::intrusive_ptr<c10d::Store>& store,
                                            const RuntimeOptions& o, int device) {
  const NcclApi& api = LoadApi();
  if (api.device_count() <= device) {
    throw CollectiveError("use_gpu: CUDA device " + std::to_string(device) +
                          " is not visible to this process (" + std::to_string(api.device_count()) +
                          " devices)");
  }
  char err[1024] = {0};
  std::vector<uint8_t> id(nccl::kUniqueIdBytes);
  if (o.rank == 0) {
    if (api.unique_id(id.data(), err, sizeof err) != 0) throw CollectiveError(err);
    store->set("nccl_unique_id", id);
  } else {
    id = store->get("nccl_unique_id");
    if (id.size() != nccl::kUniqueIdBytes)
      throw CollectiveError("the rendezvous store holds a malformed NCCL id");
  }
  nccl::Communicator* comm = nullptr;
  if (api.create(o.rank, o.world_size, id.data(), device, o.collective_timeout.count(), &comm, err,
                 sizeof err) != 0) {
    throw CollectiveError(std::string("nccl: ") + err);
  }
  return std::make_unique<NcclProcessGroup>(std::unique_ptr<nccl::Communicator>(comm), o.rank,
                                            o.world_size, device);
}

}  // namespace detail
}  // namespace torch
}  // namespace traintl
