// The process group of CPU jobs whose ranks share a node: collectives within each node go
// through shared memory (shm_communicator.h); across nodes, each node's leader (its local
// rank 0) runs them over a Gloo group of the leaders, and the node's other ranks wait for
// it in shared memory (hierarchical allreduce: reduce in the node, allreduce between the
// leaders, everyone copies the result out).
//
// Summation order: within a node by local rank, across nodes Gloo's order, so results are
// bit-identical across ranks and deterministic for a fixed placement, but differ from a
// flat Gloo allreduce in the last bits of floating-point sums.
//
// TRAINTL_SHM_COLLECTIVES=0 in the job's env turns it off (flat Gloo);
// TRAINTL_SHM_CHUNK_KB sets the chunk (default 256 on one node, 4096 across nodes);
// TRAINTL_SHM_ASYNC=0|1 runs collectives on the caller's thread or the group's (default:
// the caller's on one node, the group's across nodes, to overlap the network).
//
// Thread-safety: as ProcessGroup. Collectives run in order on one thread of the group;
// allreduce_async returns at once.
#pragma once

#include <functional>
#include <memory>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "traintl/torch.h"
#include "worker/torch/runtime.h"

namespace traintl {
namespace torch {
namespace detail {

// A c10d ProcessGroupGloo of `size` ranks over `store`, on the interface traintl::torch
// picks for `options` (GLOO_SOCKET_IFNAME, loopback for a single-host job, else the
// address that routes to the master), with options.collective_timeout.
c10::intrusive_ptr<c10d::ProcessGroupGloo> MakeGlooGroup(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    const RuntimeOptions& options);

// Builds a Gloo group of `size` ranks over `store` (the leaders' group).
using GlooFactory = std::function<c10::intrusive_ptr<c10d::ProcessGroupGloo>(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size)>;

// A rendezvous of every rank (all must call it when any does). Returns nullptr, the same on
// every rank, when shared memory brings nothing (one rank per node), is turned off, or a
// rank could not map its node's segment; the caller then builds a flat Gloo group. Throws
// (std::exception) when the rendezvous itself fails.
std::unique_ptr<ProcessGroup> MakeShmGroup(const c10::intrusive_ptr<c10d::Store>& store,
                                           const RuntimeOptions& options,
                                           const GlooFactory& make_gloo);

}  // namespace detail
}  // namespace torch
}  // namespace traintl
