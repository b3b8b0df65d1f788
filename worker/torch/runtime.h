// Internal to traintl::torch: where the rank, world size and rendezvous come from.
//
// In a job they come from the worker context (traintl::get_context()) the first time they
// are needed. Tests and benchmarks, which run without traintl-worker, install explicit
// options with InitForTesting() before any traintl::torch call.
//
// Thread-safety: every function may be called from any thread.
#pragma once

#include <chrono>
#include <string>

#include "common/status.h"

namespace traintl {
namespace torch {
namespace detail {

struct RuntimeOptions {
  // This rank and the number of ranks. Defaults: 0 of 1.
  int rank = 0;
  int world_size = 1;
  // Index of this rank on its node (selects the GPU), the number of this job's ranks on
  // the node, and the node's index among the job's nodes (0..nodes-1). Ranks with the same
  // node_rank share memory collectives. Defaults: 0, 1, 0.
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  // Rank 0 serves the c10d TCPStore on master_port; the others connect to master_addr.
  // Defaults: 127.0.0.1, port 0 (invalid for world_size > 1 without file_store_path).
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  // When non-empty, rendezvous through a c10d FileStore at this path instead of a TCPStore
  // (single-host tests: no port to agree on). Default: empty.
  std::string file_store_path;
  // How long one collective may wait for its peers before failing. Default: 300 s.
  std::chrono::milliseconds collective_timeout{std::chrono::seconds(300)};
  // How long building the process group may wait for every rank to arrive. Default: 300 s.
  std::chrono::milliseconds rendezvous_timeout{std::chrono::seconds(300)};
  // Compute on cuda:<local_rank> and use NCCL when available. Default: false.
  bool use_gpu = false;
  // Peer recovery (the context's "peer_recovery"): the group is c10d Gloo over TCP, whose
  // collectives fail as soon as a peer's process dies, behind a stable ProcessGroup that
  // RegroupProcessGroup() points at a new generation. Default: false.
  bool peer_recovery = false;
  // A replacement rank's first generation (the context's "regroup_generation"); 0 for the
  // attempt's ranks. Default: 0.
  int join_generation = 0;
  // The rank in the job; `rank` is the place in the group, which differs in an elastic
  // job's group of another size. -1: `rank` (set so when the options take effect).
  // Default: -1.
  int job_rank = -1;
};

// Replaces the worker context as the source of the options. Fails when the runtime has
// already been initialized (by a previous call or by first use) or the options are invalid.
Status InitForTesting(const RuntimeOptions& options);

// The options in effect: the testing override, else those read from the worker context.
RuntimeOptions CurrentOptions();

// Peer recovery: builds the group of `generation` (every live rank and the replacement
// must call it) and makes process_group() use it from now on; the old group is
// abandoned. Also resets prepared modules' gradient synchronization. Throws
// CollectiveError when the rendezvous fails.
void RegroupProcessGroup(int generation);
// The generation process_group() uses (0: the attempt's first).
int CurrentGeneration();
// True for a replacement rank until it took a survivor's state (MarkJoined): prepare_model
// then neither checks nor broadcasts (the survivors do not take part in that).
bool Joining();
void MarkJoined();
// Forgets prepared modules' half-done backward passes (a collective failed in one).
void ResetGradientSynchronizers();

}  // namespace detail
}  // namespace torch
}  // namespace traintl
