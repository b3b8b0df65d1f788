// Scheduler: pure gang placement. A snapshot of the nodes and the queue of pending jobs go
// in; a placement for every job that fits (all its workers at once, or none) and a reason
// for every job that waits come out. No I/O, no clock, no state: unit-tested on snapshots.
//
// Resources are scalar amounts by name ("CPU", "GPU", "memory" in bytes, custom names),
// as in Ray. Placement strategies follow Ray's placement groups: PACK (fewest nodes, best
// effort), SPREAD (round-robin over nodes, best effort), STRICT_PACK (one node),
// STRICT_SPREAD (a distinct node per worker).
//
// Thread-safety: free functions over values.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "proto/job_spec.h"

namespace traintl {

using ResourceMap = std::map<std::string, double>;

struct NodeSnapshot {
  std::string node_id;
  std::string host;  // where its workers can be reached (rank 0's node = DDP master)
  ResourceMap total;
  ResourceMap available;
  // Free fraction of each GPU device (index = device). A worker asking for a fraction
  // (< 1) shares one device; a worker asking for n >= 1 gets n whole free devices. Empty
  // when the node has no GPUs; kept consistent with available["GPU"].
  std::vector<double> gpu_free;
  bool alive = true;
};

struct PendingJob {
  std::string job_id;
  int num_workers = 1;
  // An elastic job (0 < min_workers < num_workers) is placed with the most workers in
  // [min_workers, num_workers] that fit. 0: all num_workers or none.
  int min_workers = 0;
  ResourceMap per_worker;
  PlacementStrategy strategy = PlacementStrategy::kPack;
};

struct Placement {
  std::string job_id;
  // Node of each world rank; ranks on one node are contiguous (local ranks 0..n-1).
  std::vector<std::string> rank_nodes;
  // GPU devices of each world rank on its node (empty without GPUs): what the worker gets
  // as CUDA_VISIBLE_DEVICES.
  std::vector<std::vector<int>> rank_gpus;
};

struct ScheduleResult {
  std::vector<Placement> placements;
  std::map<std::string, std::string> waiting;  // job id -> why it waits
};

// Places `queue` in order (highest priority first); an elastic job gets the most workers
// that fit, at least its minimum. A job that does not fit does not block
// later, smaller jobs. Resources taken by earlier placements are not available to later ones.
ScheduleResult Schedule(std::vector<NodeSnapshot> nodes, const std::vector<PendingJob>& queue);

// OK when the job (an elastic one: its minimum) could run on an otherwise idle cluster of
// these nodes; else
// FailedPrecondition saying what can never be satisfied.
Status CheckFeasible(const std::vector<NodeSnapshot>& nodes, const PendingJob& job);

// Takes `amount` GPUs from `gpu_free` (best fit for a fraction, whole free devices for
// n >= 1). Returns the devices, or nothing (and leaves gpu_free unchanged) when it cannot.
std::optional<std::vector<int>> TakeGpus(std::vector<double>& gpu_free, double amount);

// "CPU=2, GPU=0.5, memory=2.0GiB".
std::string FormatResources(const ResourceMap& r);

}  // namespace traintl
