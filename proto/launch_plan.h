// NodeAttemptPlan: what the head tells one node to start of an attempt (its ranks, the
// library, the rendezvous), and its JSON form, the body of POST /v1/internal/launch
// (WIRE.md). Built by daemon/head/launch_plans.h, carried out by the node's Agent.
//
// Thread-safety: plain values and free functions.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace traintl {

struct NodeAttemptPlan {
  std::string job_id;
  std::string job_name;
  int attempt = 0;
  int world_size = 1;
  int node_rank = 0;
  std::vector<int> world_ranks;             // ranks on this node, in local-rank order
  std::vector<std::vector<int>> rank_gpus;  // GPU devices per local rank (may be empty)
  std::string entry_kind = "library";       // "library" | "python" | "command"
  // The job's code blob: the library, or for python and command the packed working_dir
  // (common/code_archive.h; "" = none). library_sha256 "" when library_path is used as-is
  // (a single node).
  std::string library_path;
  std::string library_sha256;
  std::string library_name;  // entrypoint.library as submitted, for messages
  std::string function;
  std::string python;                // "module:function"
  std::vector<std::string> command;  // the program and its arguments
  std::string framework;             // "" | "torch" | "tensorflow"
  // tensorflow: every rank's host (world_size entries) and the first of the ports the head
  // reserved for the job's ranks (rank r listens on worker_port_base + r).
  std::vector<std::string> rank_hosts;
  int worker_port_base = 0;
  nlohmann::json config = nlohmann::json::object();
  // The checkpoint the attempt starts from ("" = none), as the attempt record calls it;
  // the rank context hands it to the worker as "checkpoint_dir".
  std::string restored_from;
  std::string trial_dir;
  // The trial dir is not under the head's default storage path: the submitter chose where
  // it goes (run_config.storage_path), so where workers run as another user it is made
  // with that user's file access, never root's ("trial_dir_as_worker", optional: older
  // heads did not say). Default false.
  bool trial_dir_as_worker = false;
  std::string master_addr;  // the address of rank 0's node
  int master_port = 0;      // 0: rank 0's node chooses it (Agent::Launch)
  int collective_timeout_s = 300;
  bool use_gpu = false;
  nlohmann::json datasets = nlohmann::json::object();
  std::map<std::string, std::string> user_env;  // spec.env
  double cpus_per_worker = 1;
  // Each report waits for the head's decision on it ("hold_reports", optional): the job is
  // a tuning trial whose scheduler may stop it at any result (daemon/head/tune_controller.h),
  // so a rank must not train on before the decision. Default false.
  bool hold_reports = false;
  // failure_config.peer_recovery ("peer_recovery", optional). Default false.
  bool peer_recovery = false;
  // A replacement rank (peer recovery; "regroup_generation", optional): world_ranks is the
  // one rank replaced, which joins the survivors' group of this generation. 0: the
  // attempt's start. Default 0.
  int regroup_generation = 0;
  // The local ranks of world_ranks and the number of the job's ranks on this node
  // ("local_ranks", "local_world_size", optional): set for a replacement, which keeps the
  // place of the rank it replaces. Defaults: empty and 0, meaning 0..n-1 of n =
  // world_ranks.size().
  std::vector<int> local_ranks;
  int local_world_size = 0;
  // An elastic job growing back ("group_ranks", optional): the job's ranks in the group the
  // started rank joins, in group order; master_addr/master_port are where that group meets.
  // Empty: every rank of the world. Default empty.
  std::vector<int> group_ranks;
};

nlohmann::json NodeAttemptPlanToJson(const NodeAttemptPlan& plan);
// InvalidArgument "launch plan: <field>: ..." naming what is missing, mistyped or out of
// range (ranks outside the world, a relative trial dir).
Result<NodeAttemptPlan> NodeAttemptPlanFromJson(const nlohmann::json& j);

}  // namespace traintl
