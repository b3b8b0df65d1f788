// Agent: the node role of traintld. It turns the head's plan for this node (which ranks
// of which attempt) into running traintl-worker processes - context files, log files,
// environment - and passes their events up to its listener (the head).
//
// Thread-safety: not thread-safe; everything runs on the daemon's io_context thread.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "common/safe_fs.h"
#include "common/status.h"
#include "daemon/node/rabit_tracker.h"
#include "daemon/node/worker_pool.h"
#include "proto/launch_plan.h"

namespace traintl {

// The part of an attempt that runs on this node.

struct AgentOptions {
  std::string data_dir;  // logs and contexts go to <data_dir>/jobs/<job>/attempt_<n>/
  // Passed through to workers when set in the daemon's environment; nothing else is.
  std::vector<std::string> passthrough_env = {"LD_LIBRARY_PATH", "HOME", "TZ"};
};

class Agent {
 public:
  Agent(AgentOptions options, WorkerPool* pool) : options_(std::move(options)), pool_(pool) {}

  // Writes every rank's context and starts the workers. On failure, the ranks already
  // started are stopped and the error says which rank could not start. Directories are
  // made with common/safe_fs.h: <data_dir> and the storage path (the trial dir's parent)
  // are trusted prefixes; jobs/<id>/attempt_<n> below the data dir must be the daemon's,
  // the trial dir and its .staging/attempt_<n> the daemon's or the worker user's, and none
  // of them a symlink (PermissionDenied "refusing to follow a symlink at ..." otherwise).
  // Also removes the staging areas of earlier attempts (RemoveStaleStaging).
  // A python or command plan with a code blob has its working_dir unpacked into
  // <data_dir>/workdirs/<sha256> first (common/code_archive.h), shared by every job with
  // that content. A tensorflow plan's ranks get TF_CONFIG; the ports the head reserved for
  // this node's ranks must be free (Unavailable naming the port when not, which fails the
  // attempt as retryable).
  // Returns the rendezvous port (TCPStore of rank 0): the plan's master_port, or, when it
  // is 0 and this node runs rank 0, a free port of master_addr chosen here (the head
  // cannot bind another machine's address). The port is not held until rank 0 binds it; a
  // clash fails the attempt, which restarts. An xgboost attempt's rank-0 node instead
  // starts the attempt's rabit tracker (rabit_tracker.h), bound to master_addr, and its
  // port is the master_port (DMLC_TRACKER_PORT of every rank); the tracker goes away with
  // the attempt (Stop, the job's next attempt, every rank shutting it down, or
  // SweepTrackers once no worker of the attempt runs here).
  Result<int> Launch(const NodeAttemptPlan& plan);
  // A free TCP port on `address` (loopback when it is not an IPv4 literal), below the
  // kernel's ephemeral range when it can; 0 when none.
  static int PickFreePort(const std::string& address);
  // Stops the trackers no longer needed (each Stop joins its thread, which takes
  // milliseconds): those whose ranks all shut down, and those whose attempt has had no
  // worker on this node for `linger` (a job of one rank never connects, ranks that never
  // finalize never shut it down, and a successful attempt gets no stop). Called
  // periodically by whoever runs the node (the head's tick, an agent's heartbeat).
  void SweepTrackers(std::chrono::milliseconds linger = std::chrono::seconds(60));
  // Stops the attempt's workers here (`urgent`: SIGTERM at once, WorkerPool::StopAttempt),
  // and its rabit tracker when this node runs it. `final` (default): the head ended the
  // attempt, so a launch of it (or of an earlier one) that arrives after this stop, having
  // raced it (a library fetch, another thread of the head's pool), is refused. Not final:
  // the stop of a fenced node, whose head may still run the attempt.
  void Stop(const std::string& job_id, int attempt, bool urgent = false, bool final = true);
  void Ack(const std::string& job_id, int attempt, int rank, int seq) {
    pool_->Ack(job_id, attempt, rank, seq);
  }

  // Peer recovery: the attempt's live workers here regroup as `generation`.
  void Regroup(const std::string& job_id, int attempt, const events::Regroup& regroup) {
    pool_->Regroup(job_id, attempt, regroup);
  }
  int LiveWorkers(const std::string& job_id, int attempt) const {
    return pool_->LiveWorkers(job_id, attempt);
  }

  std::vector<std::pair<std::string, int>> LiveAttempts() const { return pool_->LiveAttempts(); }

  // Where this node keeps a job's attempts (their contexts and logs).
  std::string JobDir(const std::string& job_id) const;
  std::string AttemptDir(const std::string& job_id, int attempt) const;
  std::string LogPath(const std::string& job_id, int attempt, int rank) const;
  static std::string StagingDir(const std::string& trial_dir, int attempt);

  // Removes the staging areas (`attempt_<K>` below `staging_root`, a trial dir's .staging)
  // of attempts K < `attempt`, without following any symlink (RemoveAllAt). Launch calls it:
  // the head removes an attempt's staging when the attempt ends, which a killed daemon never
  // did. Other entries are left alone. Returns the first error; removes what it can.
  static Status RemoveStaleStaging(const SafeDir& staging_root, int attempt);

  // TF_CONFIG of `rank`: every rank's host:port as the cluster's "worker" list.
  static nlohmann::json TfConfig(const NodeAttemptPlan& plan, int rank);

 private:
  // Who may own a job's directories besides root and the daemon's user: the worker user.
  OwnerPolicy JobOwners() const;
  // When workers run as another account: gives them `dir`, one of the job's own that
  // Launch just made (through its descriptor, so a path swapped meanwhile changes nothing);
  // OK when it is theirs already. Refuses one that was there already and is not theirs
  // (a directory of root's that a worker moved to the job's path, to be handed it) and
  // one made here that is not empty (swapped in between mkdir and open).
  Status GiveToWorker(const SafeDir& dir) const;
  // The plan's trial dir, made (with its missing parents) with the worker user's file
  // access when the submitter chose its storage path (NodeAttemptPlan::trial_dir_as_worker),
  // else with the daemon's.
  Result<SafeDir> MakeTrialDir(const NodeAttemptPlan& plan) const;
  // MakeDirsBelow(parent, name) given to the worker, for a dir inside the worker's trial
  // dir: an empty one it cannot be given (a launch that died before it gave it away left
  // it, root's) is removed and made again.
  Result<SafeDir> MakeWorkerDirBelow(const SafeDir& parent, const std::string& name) const;
  // <data_dir>/data_index: the row index the node's jobs share (RankContext::data_index_dir).
  std::string DataIndexDir() const;
  // Binds each of this node's ranks' TF_CONFIG ports once to see that it is free.
  static Status CheckWorkerPorts(const NodeAttemptPlan& plan);

  // Starts the rabit tracker of an xgboost attempt whose rank 0 runs here, on master_addr
  // and a port of its own, which becomes the attempt's master_port (DMLC_TRACKER_PORT).
  Result<std::unique_ptr<RabitTracker>> StartTracker(const NodeAttemptPlan& plan);
  // Keeps `tracker` as the job's (a previous attempt's is stopped), then SweepTrackers.
  void KeepTracker(const std::string& job_id, int attempt, std::unique_ptr<RabitTracker> tracker);

  const AgentOptions options_;
  WorkerPool* const pool_;

  struct Tracker {
    int attempt = 0;
    std::unique_ptr<RabitTracker> tracker;
    // Since when no worker of the attempt runs here; max() while one does.
    std::chrono::steady_clock::time_point idle_since = std::chrono::steady_clock::time_point::max();
  };
  // Job id -> its attempt's tracker. A tracker lives from its attempt's launch until every
  // rank shut it down, the attempt is stopped, the job's next attempt starts here, or its
  // attempt has had no worker here for a while (SweepTrackers).
  std::map<std::string, Tracker> trackers_;
  // Job id -> the latest attempt stopped for good here (Stop's `final`), the oldest
  // forgotten past kMaxStoppedJobs (in stopped_order_).
  std::map<std::string, int> stopped_;
  std::deque<std::string> stopped_order_;
};

}  // namespace traintl
