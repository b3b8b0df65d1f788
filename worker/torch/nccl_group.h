// The NCCL process group of GPU jobs: traintl::torch::ProcessGroup over the NCCL
// communicator in libtraintl_nccl.so (nccl/nccl_communicator.h), which is loaded with
// dlopen() on first use so that CPU jobs never need CUDA libraries.
//
// Thread-safety: as ProcessGroup (one caller at a time; a mutex serializes the calls).
#pragma once

#include <memory>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "traintl/torch.h"
#include "worker/torch/runtime.h"

namespace traintl {
namespace torch {
namespace detail {

// Builds the group: rank 0 makes the NCCL unique id and publishes it in `store`; every
// rank then joins on cuda:<device>. Throws CollectiveError (with the reason: library not
// found, no device, NCCL init failed or timed out).
std::unique_ptr<ProcessGroup> MakeNcclGroup(const c10::intrusive_ptr<c10d::Store>& store,
                                            const RuntimeOptions& options, int device);

}  // namespace detail
}  // namespace torch
}  // namespace traintl
