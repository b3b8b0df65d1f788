// NcclCommunicator: one rank's NCCL communicator over raw device buffers, with bounded
// waits. It is traintl::torch's GPU collective backend, kept free of LibTorch so that it
// builds against any CUDA toolkit with NCCL (here: /usr/local/cuda) whatever LibTorch the
// rest is built with, and free of CUDA in its interface so that traintl::torch can load it
// with dlopen() only when a job asks for GPUs: a CPU-only user never needs libcudart.
//
// Ordering: each operation runs on the communicator's own stream, after all work already
// queued on the device's legacy default stream (where LibTorch runs unless told
// otherwise), and later work on that stream waits for it, as c10d's NCCL group arranges.
// Wait() blocks the host until everything queued so far is done; it fails after the
// collective timeout or on an asynchronous NCCL error (a peer gone), aborting the
// communicator, so that a dead peer never hangs a job.
//
// Thread-safety: not thread-safe; traintl::torch serializes calls on one group.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace traintl {
namespace nccl {

enum class DataType : int {
  kFloat32 = 0,
  kFloat64 = 1,
  kFloat16 = 2,
  kBFloat16 = 3,
  kInt8 = 4,
  kUInt8 = 5,
  kInt32 = 6,
  kInt64 = 7,
};

enum class ReduceOp : int { kSum = 0, kProd = 1, kMin = 2, kMax = 3, kAvg = 4 };

// Size of an NCCL unique id (ncclUniqueId), exchanged through the rendezvous store.
constexpr size_t kUniqueIdBytes = 128;

// Bumped on any change to the classes or functions below.
constexpr int kAbiVersion = 1;

// Errors are returned as messages ("" = success) rather than Status: this crosses a
// dlopen() boundary, and keeping it to standard types keeps both sides independent.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string AllReduce(void* data, size_t count, DataType type, ReduceOp op) = 0;
  virtual std::string Broadcast(void* data, size_t count, DataType type, int root) = 0;
  virtual std::string Wait() = 0;
};

}  // namespace nccl
}  // namespace traintl

// The library's entry points, looked up with dlsym. Each returns 0 on success, else writes
// a message into err (NUL-terminated, at most err_len bytes) and returns -1.
extern "C" {
int traintl_nccl_abi_version();
// CUDA devices visible to this process (0 when there is no driver or device).
int traintl_nccl_device_count();
// A fresh unique id (rank 0 makes it, every other rank gets it from the store).
int traintl_nccl_unique_id(unsigned char out[traintl::nccl::kUniqueIdBytes], char* err,
                           size_t err_len);
// Joins the communicator of `world` ranks as `rank` on CUDA device `device`. The init
// itself is bounded by timeout_ms too.
int traintl_nccl_create(int rank, int world, const unsigned char id[traintl::nccl::kUniqueIdBytes],
                        int device, int64_t timeout_ms, traintl::nccl::Communicator** out,
                        char* err, size_t err_len);
}
