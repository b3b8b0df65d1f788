#include "worker/torch/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <thread>

namespace traintl {
namespace nccl {
namespace {

using Clock = std::chrono::steady_clock;

std::string CudaError(const char* what, cudaError_t e) {
  return std::string(what) + ": " + cudaGetErrorString(e);
}

std::string NcclError(const char* what, ncclResult_t r, ncclComm_t comm = nullptr) {
  std::string msg = std::string(what) + ": " + ncclGetErrorString(r);
  if (comm != nullptr) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && *last != '\0') msg += std::string(" (") + last + ")";
  }
  return msg;
}

ncclDataType_t ToNccl(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kInt8:
      return ncclInt8;
    case DataType::kUInt8:
      return ncclUint8;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t ToNccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kProd:
      return ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kAvg:
      return ncclAvg;
  }
  return ncclSum;
}

void CopyError(const std::string& msg, char* err, size_t err_len) {
  if (err == nullptr || err_len == 0) return;
  const size_t n = std::min(msg.size(), err_len - 1);
  std::memcpy(err, msg.data(), n);
  err[n] = '\0';
}

// The communicator is non-blocking (ncclConfig_t::blocking = 0): every NCCL call may
// return ncclInProgress, and completion is polled with ncclCommGetAsyncError, which is
// what lets init and collectives give up after a deadline instead of hanging.
class NcclCommunicatorImpl final : public Communicator {
 public:
  NcclCommunicatorImpl(int device, std::chrono::milliseconds timeout)
      : device_(device), timeout_(timeout) {}

  ~NcclCommunicatorImpl() override {
    if (comm_ != nullptr) {
      // Abort, not destroy: destroy synchronizes with peers, which may be gone.
      ncclCommAbort(comm_);
    }
    if (before_ != nullptr) cudaEventDestroy(before_);
    if (after_ != nullptr) cudaEventDestroy(after_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  std::string Init(int rank, int world, const unsigned char* id) {
    if (cudaError_t e = cudaSetDevice(device_); e != cudaSuccess)
      return CudaError("cudaSetDevice", e);
    if (cudaError_t e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
        e != cudaSuccess)
      return CudaError("cudaStreamCreate", e);
    for (cudaEvent_t* ev : {&before_, &after_}) {
      if (cudaError_t e = cudaEventCreateWithFlags(ev, cudaEventDisableTiming); e != cudaSuccess)
        return CudaError("cudaEventCreate", e);
    }
    ncclUniqueId uid;
    static_assert(sizeof(uid) == kUniqueIdBytes, "ncclUniqueId changed size");
    std::memcpy(&uid, id, sizeof uid);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&comm_, world, uid, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      comm_ = nullptr;
      return NcclError("ncclCommInitRankConfig", r);
    }
    return AwaitComm("NCCL communicator init (rank " + std::to_string(rank) + " of " +
                     std::to_string(world) + ")");
  }

  std::string AllReduce(void* data, size_t count, DataType type, ReduceOp op) override {
    return Enqueue("allreduce", [&] {
      return ncclAllReduce(data, data, count, ToNccl(type), ToNccl(op), comm_, stream_);
    });
  }

  std::string Broadcast(void* data, size_t count, DataType type, int root) override {
    return Enqueue("broadcast", [&] {
      return ncclBroadcast(data, data, count, ToNccl(type), root, comm_, stream_);
    });
  }

  std::string Wait() override {
    if (!error_.empty()) return error_;
    const auto deadline = Clock::now() + timeout_;
    for (;;) {
      cudaError_t e = cudaEventQuery(after_);
      if (e == cudaSuccess) return "";
      if (e != cudaErrorNotReady) return Fail(CudaError("waiting for NCCL", e));
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress)
        return Fail(NcclError("NCCL collective failed", async, comm_));
      if (Clock::now() > deadline)
        return Fail("NCCL collective did not finish within " + std::to_string(timeout_.count()) +
                    " ms (a peer is gone or stuck)");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  // Polls a non-blocking communicator until its last call has been issued.
  std::string AwaitComm(const std::string& what) {
    const auto deadline = Clock::now() + timeout_;
    for (;;) {
      ncclResult_t state = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) return Fail(NcclError(what.c_str(), r, comm_));
      if (state == ncclSuccess) return "";
      if (state != ncclInProgress) return Fail(NcclError(what.c_str(), state, comm_));
      if (Clock::now() > deadline)
        return Fail(what + " did not finish within " + std::to_string(timeout_.count()) + " ms");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  template <typename Fn>
  std::string Enqueue(const char* what, Fn&& call) {
    if (!error_.empty()) return error_;
    if (cudaError_t e = cudaSetDevice(device_); e != cudaSuccess)
      return Fail(CudaError("cudaSetDevice", e));
    // After what LibTorch queued on the default stream ...
    if (cudaError_t e = cudaEventRecord(before_, cudaStreamLegacy); e != cudaSuccess)
      return Fail(CudaError("cudaEventRecord", e));
    if (cudaError_t e = cudaStreamWaitEvent(stream_, before_, 0); e != cudaSuccess)
      return Fail(CudaError("cudaStreamWaitEvent", e));
    ncclResult_t r = call();
    if (r == ncclInProgress) {
      std::string st = AwaitComm(std::string("NCCL ") + what);
      if (!st.empty()) return st;
    } else if (r != ncclSuccess) {
      return Fail(NcclError(what, r, comm_));
    }
    // ... and before what it queues next.
    if (cudaError_t e = cudaEventRecord(after_, stream_); e != cudaSuccess)
      return Fail(CudaError("cudaEventRecord", e));
    if (cudaError_t e = cudaStreamWaitEvent(cudaStreamLegacy, after_, 0); e != cudaSuccess)
      return Fail(CudaError("cudaStreamWaitEvent", e));
    return "";
  }

  // Once a collective failed the communicator is unusable: abort it and keep the error.
  std::string Fail(std::string message) {
    if (error_.empty()) error_ = std::move(message);
    if (comm_ != nullptr) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    return error_;
  }

  const int device_;
  const std::chrono::milliseconds timeout_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t before_ = nullptr;
  cudaEvent_t after_ = nullptr;
  std::string error_;  // the first failure; every later call returns it
};

}  // namespace
}  // namespace nccl
}  // namespace traintl

extern "C" {

int traintl_nccl_abi_version() { return traintl::nccl::kAbiVersion; }

int traintl_nccl_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

int traintl_nccl_unique_id(unsigned char out[traintl::nccl::kUniqueIdBytes], char* err,
                           size_t err_len) {
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) {
    traintl::nccl::CopyError(traintl::nccl::NcclError("ncclGetUniqueId", r), err, err_len);
    return -1;
  }
  std::memcpy(out, &id, sizeof id);
  return 0;
}

int traintl_nccl_create(int rank, int world, const unsigned char id[traintl::nccl::kUniqueIdBytes],
                        int device, int64_t timeout_ms, traintl::nccl::Communicator** out,
                        char* err, size_t err_len) {
  *out = nullptr;
  auto comm = new (std::nothrow)
      traintl::nccl::NcclCommunicatorImpl(device, std::chrono::milliseconds(timeout_ms));
  if (comm == nullptr) {
    traintl::nccl::CopyError("out of memory", err, err_len);
    return -1;
  }
  std::string st = comm->Init(rank, world, id);
  if (!st.empty()) {
    delete comm;
    traintl::nccl::CopyError(st, err, err_len);
    return -1;
  }
  *out = comm;
  return 0;
}

}  // extern "C"
