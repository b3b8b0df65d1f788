// The launch plans of an attempt: what each node is told to start (NodeAttemptPlan,
// proto/launch_plan.h, with its wire form). Built from the job's
// record and definition and the scheduler's placement, with no I/O: unit-tested.
//
// Thread-safety: free functions over values.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "daemon/node/agent.h"
#include "daemon/state/records.h"
#include "proto/job_spec.h"

namespace traintl {

// What every node of the attempt shares (no ranks yet; master_port 0: rank 0's node
// chooses it when it launches).
struct AttemptBasics {
  int attempt = 0;
  int world_size = 1;
  std::string library_path;   // as this node resolves the job's library
  std::string restored_from;  // the checkpoint handed to get_checkpoint(), "" = none
  std::string master_addr;    // the host of rank 0's node
  int collective_timeout_s = 300;
  // The head's default storage path (JobManagerOptions::default_storage_path): a trial dir
  // elsewhere was the submitter's choice (run_config.storage_path). "": not known (every
  // trial dir is then made as before, with the daemon's access).
  std::string default_storage_path;
  // tensorflow jobs: every rank's host and the first of their reserved ports.
  std::vector<std::string> rank_hosts;
  int worker_port_base = 0;
};

// Ports the head hands to the ranks of tensorflow jobs (TF_CONFIG), rank r of an attempt
// getting base + r. Below Linux's ephemeral range (32768-60999 by default), so a port the
// kernel picks for some other socket never takes one between the head's choice and the
// rank's bind; blocks rotate through the range, so concurrent jobs do not share one.
inline constexpr int kWorkerPortLow = 20000;
inline constexpr int kWorkerPortHigh = 32000;
// The block of `world_size` ports following `previous_end` (the end of the last block
// handed out; 0 at first), wrapping to kWorkerPortLow.
int NextWorkerPortBase(int previous_end, int world_size);
NodeAttemptPlan BasePlan(const JobRecord& job, const JobSpec& spec, const AttemptBasics& basics);

// One plan per node, in the order of the nodes' first ranks (plan.node_rank), each with
// its contiguous world ranks and their GPU devices. `rank_nodes[r]` is rank r's node;
// `rank_gpus[r]` its devices (missing entries: none).
// The plan that starts a replacement for `rank` (peer recovery) on the node whose plan
// was `node_plan` (which holds `rank`): the rank keeps its local rank there, rendezvous on
// the attempt's `master_port`, and joins the survivors' group `generation`.
NodeAttemptPlan ReplacementPlan(const NodeAttemptPlan& node_plan, int rank, int master_port,
                                int generation);

std::vector<std::pair<std::string, NodeAttemptPlan>> NodePlans(
    const NodeAttemptPlan& base, const std::vector<std::string>& rank_nodes,
    const std::vector<std::vector<int>>& rank_gpus);

}  // namespace traintl
