// JobManager: the head's job lifecycle (DESIGN §4). It turns the state store's PENDING jobs
// into gang-started attempts (via the pure scheduler and the node agent) and follows each
// attempt. What an attempt's events mean (first failure, stop, node loss, when it ends)
// is decided by its AttemptTracker (attempt_tracker.h), a pure state machine; JobManager
// carries out the tracker's commands: Raft proposals, stopping workers, merging
// checkpoints, and lets the FSM decide between a restart and FAILED.
//
// Every state change goes through the CommandLog (Raft); the in-memory ActiveAttempt map
// only tracks what live processes are doing. After a restart that map is empty, so
// attempts the store still calls active are ended as lost (LostAttemptReason names why)
// and restarted from their latest checkpoint.
//
// The implementation is in two files: job_manager.cc (the job lifecycle) and
// job_manager_nodes.cc (the node registry, snapshots, node loss, launchers).
//
// Thread-safety: not thread-safe; every method and callback runs on the io_context thread.
#pragma once

#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/fs_identity.h"
#include "daemon/head/attempt_tracker.h"
#include "daemon/head/checkpoint_committer.h"
#include "daemon/head/command_log.h"
#include "daemon/head/job_queue.h"
#include "daemon/head/node_client.h"
#include "daemon/head/node_registry.h"
#include "daemon/head/rank_metrics.h"
#include "daemon/head/rank_progress.h"
#include "daemon/head/remote_nodes.h"
#include "daemon/metrics/prometheus_text.h"
#include "daemon/node/agent.h"
#include "daemon/node/blob_store.h"
#include "daemon/node/worker_pool.h"
#include "daemon/scheduler/scheduler.h"
#include "daemon/state/commands.h"
#include "daemon/state/state_store.h"
#include "proto/job_spec.h"

namespace traintl {

struct JobManagerOptions {
  std::string node_id = "node-1";  // this node (the only one, for now)
  // This node's host: where its workers listen (rank 0's TCPStore), as NodeStatus::host.
  std::string host = "127.0.0.1";
  std::string default_storage_path;     // required: where trial dirs go without storage_path
  ResourceMap node_resources;           // what this node offers
  int num_gpus = 0;                     // GPU devices of this node (indices 0..n-1)
  int collective_timeout_s = 300;       // bound on a collective stuck on a dead peer
  std::chrono::milliseconds tick{250};  // how often the queue is looked at
  size_t log_tail_bytes = 4096;         // log tail kept with a failed attempt
  // Multi-node (see SetCluster). This node's API address and role ("voter" | "agent") as
  // the node registry shows them.
  std::string api_address;
  std::string role = "voter";
  uint64_t raft_id = 0;                           // this node's Raft id (0: not a voter)
  nlohmann::json gpus = nlohmann::json::array();  // this node's GPUs as /v1/nodes shows them
  // A node silent for this long is LOST and its workers count as failed. Default 4 s.
  std::chrono::milliseconds node_loss_timeout{4000};
  // After becoming head, jobs that ran before wait this long before a new attempt starts,
  // so that every node that ran their old workers has either reported them (and been told
  // to stop them) or fenced itself. 0 for a single node.
  std::chrono::milliseconds settle{0};
  // When workers run as another account (traintld --worker-user), the files they wrote
  // (checkpoint staging, trial dirs) are merged and deleted with that account's file
  // access, never root's (see common/fs_identity.h). Default: unset (the daemon's own).
  std::optional<FsIdentity> worker_fs_identity;
  // What node-loss timeouts, settle periods and attempt durations are measured with;
  // timers that only schedule passes use the real clock. Default: null (SystemClock).
  const Clock* clock = nullptr;
  // The checkpoint file work (merges, retention deletes, cleanup). Default: null
  // (DiskCheckpointFiles); tests pass fakes. Must outlive the JobManager.
  CheckpointFiles* checkpoint_files = nullptr;
  // This daemon process's run id, recorded with every attempt it starts (see
  // LostAttemptReason). Default "": a random one.
  std::string run_id;
  // Retention of finished jobs (traintld --retain-jobs / --retain-days): beyond the newest
  // `retain_jobs` finished jobs, or ended more than `retain_for` ago, a job is deleted
  // (delete_job: its records and its logs here; its trial dir stays). 0: no such limit.
  // Default: both 0 (every job is kept).
  int retain_jobs = 0;
  std::chrono::milliseconds retain_for{0};
  // Reports kept in memory per rank of a job (RankMetrics, GET .../metrics?ranks=).
  // Default 1000.
  size_t metrics_per_rank = 1000;
  // Longest a held report (JobEventListener::HoldsReports) waits for ReleaseReports
  // before the head acks it anyway: a listener that never decides cannot stall a job.
  // Default 5 s.
  std::chrono::milliseconds max_report_hold{5000};
};

// What other parts of the head (the tune controller) hear of jobs, on the io_context
// thread, after the event committed. The head's periodic passes are their safety net: a
// listener must not rely on hearing of every event (a head change loses some).
class JobEventListener {
 public:
  virtual ~JobEventListener() = default;
  virtual void OnJobReported(const std::string& job_id) = 0;  // a report committed
  virtual void OnJobEnded(const std::string& job_id) = 0;     // the job reached an end state
  virtual void OnJobStarted(const std::string& job_id) {}     // an attempt was launched
  // Asked when an attempt of the job is launched: true makes its ranks wait after every
  // report until the listener calls JobManager::ReleaseReports (or max_report_hold
  // passes). Default false.
  virtual bool HoldsReports(const std::string& job_id) { return false; }
};

// The spec's policies the FSM applies, as stored with the job.
cmd::JobPolicy PolicyOf(const JobSpec& spec);

class JobManager : public WorkerPoolListener {
 public:
  JobManager(boost::asio::io_context& io, JobManagerOptions options, StateStore* store,
             CommandLog* log, Agent* agent);

  // Multi-node: other nodes are reached through `remote`; libraries are resolved by hash
  // in `blobs`. Call before Start. Without it the head only uses its own node.
  void SetCluster(RemoteNodes* remote, BlobStore* blobs) {
    remote_ = remote;
    blobs_ = blobs;
  }
  void Start();  // starts the scheduling tick
  void Shutdown();
  // Called when this node becomes the head (the ready Raft leader: true) or stops being it.
  void SetHead(bool head);
  bool is_head() const { return is_head_; }

  // Validated submission: proposes the job and calls `done` with its id (or the error).
  struct Submission {
    JobSpec spec;
    std::string library_sha256;
    std::string library_path;
    std::string submission_id;
    std::string trial_dir;                // "" = <storage path>/<name>-<id>
    std::optional<cmd::TrialLink> trial;  // a tuning trial's job
  };
  void Submit(Submission sub, std::function<void(Result<std::string>)> done);
  // Hears of reports and job ends from now on (null: nobody). Not owned.
  void SetJobEventListener(JobEventListener* listener) { listener_ = listener; }
  // A job whose reports are held (JobEventListener::HoldsReports): its ranks may go on
  // past every report committed so far. No-op for other jobs.
  void ReleaseReports(const std::string& job_id);
  // OK when this cluster could ever run the job; FailedPrecondition ("infeasible: ...").
  Status CheckFeasible(const JobSpec& spec) const;
  // Proposes stop_job and stops running workers; `done` gets the state afterwards.
  // `reason`: "" for a user's stop, else why (the job's message once stopped).
  void Stop(const std::string& job_id, const std::string& reason,
            std::function<void(Result<std::string>)> done);
  // Proposes delete_job for a finished job; `done` gets the answer (its trial dir and
  // checkpoint directories). With `remove_files` those are removed too (never through a
  // symlink), and every node's logs of the job. FailedPrecondition, before anything is
  // proposed, when a job that has not ended needs what would go (deletion_check.h).
  void Delete(const std::string& job_id, bool remove_files,
              std::function<void(Result<cmd::DeleteJobAnswer>)> done);
  // After a committed delete_job or delete_experiment: drops what this head keeps of the
  // jobs (their ranks' metrics, their logs here) and removes `dirs` (trial or experiment
  // dirs the user asked to remove), off the io thread.
  void ForgetDeleted(const std::vector<std::string>& job_ids, std::vector<std::string> dirs);
  // Node view for /v1/nodes.
  ResourceMap UsedResources() const;
  nlohmann::json NodesView() const;
  // A node's heartbeat (head only). Returns the answer: attempts it must stop, voters.
  nlohmann::json OnHeartbeat(NodeStatus status);
  // Worker events of another node (head only); `log_tail` accompanies an exit.
  void OnRemoteWorkerExit(const WorkerExit& exit, const std::string& log_tail);
  // Whether `node` is where the rank of the job's attempt runs now (head only): a worker
  // event from anywhere else is a late one of a worker the rank had before it was moved
  // (its node lost, then back), and must not count for the rank's new worker. True for an
  // attempt this head does not follow (the handlers ignore those anyway) and for "" (an
  // event of an older release's node, which does not say where it comes from).
  bool IsRankOn(const std::string& job_id, int attempt, int rank, const std::string& node);
  const NodeRegistry& registry() const { return registry_; }
  // Every rank's latest reports (rank_metrics.h), for GET /v1/jobs/{job}/metrics?ranks=.
  const RankMetrics& rank_metrics() const { return rank_metrics_; }
  // From a report with a checkpoint to its commit_checkpoint committed (merge included).
  const LatencyHistogram& checkpoint_commit_latency() const { return checkpoint_latency_; }
  const JobManagerOptions& options() const { return options_; }

  // The ranks' progress of the job's active attempt (RankProgress::View, plus "attempt");
  // null when none runs here or no rank has said anything.
  nlohmann::json ProgressView(const std::string& job_id) const;
  // The ranks in the collective group of the job's active attempt (fewer than placed after
  // an elastic job shrank, more after it grew); nullopt when none runs here.
  std::optional<int> GroupSize(const std::string& job_id) const;

  // WorkerPoolListener
  void OnWorkerHello(const std::string& job_id, int attempt, int rank) override;
  void OnWorkerProgress(const std::string& job_id, int attempt, int rank,
                        const events::Progress& progress) override;
  void OnWorkerReport(const std::string& job_id, int attempt, int rank,
                      const events::Report& report) override;
  void OnWorkerExit(const WorkerExit& exit) override;

 private:
  // An attempt this head started and follows: its state machine plus what the head
  // needs besides (resources for the scheduler's snapshots, restart backoff).
  struct ActiveAttempt {
    explicit ActiveAttempt(AttemptPlacement p) : tracker(std::move(p)) {}
    const std::string& job_id() const { return tracker.placement().job_id; }
    int attempt() const { return tracker.placement().attempt; }
    const std::vector<std::string>& rank_nodes() const { return tracker.placement().rank_nodes; }

    AttemptTracker tracker;
    std::string trial_dir;
    ResourceMap per_worker;
    std::vector<std::vector<int>> rank_gpus;          // devices of each rank
    std::map<int, std::string> remote_tails;          // log tails sent with remote exits
    std::chrono::steady_clock::time_point started{};  // when start_attempt was proposed
    double restart_backoff_s = 0;                     // the spec's failure_config
    double max_restart_backoff_s = 0;
    double time_limit_s = 0;      // the spec's run_config.time_limit_s (0: none)
    bool time_limit_hit = false;  // its stop was proposed
    // Its ranks' progress (traintl_progress), and what was last logged of it.
    std::unique_ptr<RankProgress> progress;
    std::string progress_logged;
    // Reports acked only on ReleaseReports (JobEventListener::HoldsReports), those waiting,
    // and the latest seq whose report committed.
    bool hold_reports = false;
    struct HeldReport {
      int rank = 0;
      int seq = 0;
      std::chrono::steady_clock::time_point since{};
    };
    std::vector<HeldReport> held;
    int committed_seq = -1;
    // Peer recovery: each node's plan as launched, and the rendezvous port rank 0's node
    // chose (0 until known), from which replacement ranks are started.
    std::map<std::string, NodeAttemptPlan> node_plans;
    int master_port = 0;
    // Elastic: rank r, when the first of a shrunk group, serves its store on base + r.
    int store_port_base = 0;
  };
  // Elastic: tells the ranks left where their smaller group meets.
  void Shrink(ActiveAttempt& a, const AttemptTracker::Shrink& s);
  // Elastic: starts a rank that left the group again and tells the others to regroup.
  void Grow(ActiveAttempt& a, const AttemptTracker::Grow& g);
  // The plan that starts `rank` on `node` joining the group `regroup` names (its ranks
  // and store; empty ranks: every rank in the group, at its store).
  NodeAttemptPlan RankPlan(const ActiveAttempt& a, int rank, const std::string& node,
                           const events::Regroup& regroup) const;
  // Tells the tracker (soon, not from within Run) that `rank` could not be started.
  void FailReplacement(ActiveAttempt& a, int rank, const std::string& why);
  // Launches `plan` (none: it could not be made); when it cannot start, the tracker
  // hears OnReplacementFailed.
  void LaunchRank(ActiveAttempt& a, int rank, const std::string& node,
                  std::optional<NodeAttemptPlan> plan);
  // Elastic: where the group of `ranks` meets: the store of its first rank.
  events::Regroup GroupRegroup(const ActiveAttempt& a, int generation,
                               const std::vector<int>& ranks) const;
  // Elastic attempts that lost ranks take them back where resources are free now.
  void GrowElastic();
  // Peer recovery: ranks lost with their node start again where there is room.
  void Relocate(ActiveAttempt& a, const AttemptTracker::Relocate& r);
  // A node with room for one more worker of `a` now, or "" when none has.
  std::string NodeWithRoom(const ActiveAttempt& a) const;
  // Starts a replacement for a dead rank of `a` and tells the survivors to regroup.
  void ReplaceRank(ActiveAttempt& a, const AttemptTracker::ReplaceRank& r);
  // Acks `a`'s held reports that `release` picks, on whichever node each rank runs.
  void AckHeld(ActiveAttempt& a,
               const std::function<bool(const ActiveAttempt::HeldReport&)>& release);
  // Logs stragglers and stalled collectives of the active attempts when they change.
  void DiagnoseProgress();
  // Carries out what `a`'s tracker decided, then lets it end the attempt when none of its
  // workers lives any more.
  void Run(ActiveAttempt& a, AttemptTracker::Commands commands);
  // After a failed attempt's end committed with the job PENDING again: holds the restart
  // back as failure_config's backoff says.
  void BackOffRestart(const ActiveAttempt& a, const std::string& pending_reason);
  // Arms restart_timer_ for the earliest restart or reconciliation held back.
  void ArmRestartTimer();

  // Asks for a scheduling pass soon: at once when the last one is kMinTickGap old, else
  // when it will be, so that a burst of events (one commit callback after another) costs
  // one pass. `full`: something may have freed resources or unblocked a job (an attempt
  // ended, a node joined, leadership changed), so every PENDING job is looked at again.
  // Otherwise (a submission) only the jobs submitted since the last pass are: jobs that
  // waited before cannot fit now, as no resources were freed since (placement only ever
  // needs more of them).
  void ScheduleTick(bool full = true);
  void Tick();
  // Reads every active job: ends attempts lost with a previous head, forwards stop
  // requests, and runs the queue's full pass over every PENDING job.
  void FullPass(bool settling);
  // Runs the queue's pass over the jobs submitted since the last pass (see ScheduleTick).
  void FreshPass();
  // What the queue's passes need of this head right now.
  JobQueue::PassInput PassInputNow(bool settling) const;
  // Carries out a pass: starts attempts, fails unreadable jobs, proposes changed reasons.
  void Carry(JobQueue::PassResult pass);
  // Deletes finished jobs beyond the retention limits, a batch at a time (full passes).
  void ExpireFinishedJobs();
  // Stops `job` (running as `a`) once its run_config.time_limit_s has passed since it
  // first started; full passes (at least every kFullPassInterval) look.
  void EnforceTimeLimit(const JobRecord& job, ActiveAttempt& a);
  // Ends the attempt the store calls active although this head does not follow it.
  void ReconcileLost(const JobRecord& job);
  void StartAttempt(const JobRecord& job, const JobSpec& spec, const Placement& placement);
  void LaunchCommitted(const std::string& job_id, const JobRecord& job, const JobSpec& spec,
                       const std::string& restored_from);
  void EndAttemptNow(ActiveAttempt& a, commands::AttemptOutcome outcome, bool retry = false);
  // EndAttemptNow again after kDiskFullRetry, while the attempt is still active_: its end
  // was refused for want of disk.
  void RetryEndAttempt(const std::string& job_id, int attempt, commands::AttemptOutcome outcome);
  void CommitReport(ActiveAttempt& a, const AttemptTracker::CommitReport& report);
  ActiveAttempt* Find(const std::string& job_id, int attempt);
  void OnNodeLost(const std::string& node_id);
  void RefreshSelf();
  // Replicates a voter's API address (keyed by Raft id) when the store lacks it.
  void RecordVoterAddress(uint64_t raft_id, const std::string& api_address);
  void StopStaleLocal();
  // The node's launcher: its own agent, or another node's over HTTP; null when that node
  // is not reachable (unknown, LOST, or no cluster).
  std::unique_ptr<NodeClient> ClientFor(const std::string& node_id) const;
  // Stops the attempt's workers on every node it placed ranks on.
  void StopWorkers(const ActiveAttempt& a, bool urgent = false);
  // Resources and GPU fractions the active attempts take on `node_id`.
  void UsedOn(const std::string& node_id, ResourceMap* used, std::vector<double>* gpu_free) const;
  // The scheduler's view of the nodes, built here only. kAvailableNow: live nodes with
  // what the active attempts take subtracted (a scheduling pass). kEverything: every node
  // known with all it has (could the job ever run?), this node alone before it registered.
  enum class SnapshotView { kAvailableNow, kEverything };
  std::vector<NodeSnapshot> Snapshots(SnapshotView view) const;
  std::string ResolveRestore(const JobRecord& job, const JobSpec& spec) const;

  // Constant after construction.
  boost::asio::io_context& io_;
  const JobManagerOptions options_;
  StateStore* const store_;
  CommandLog* const log_;
  Agent* const agent_;
  RemoteNodes* remote_ = nullptr;
  BlobStore* blobs_ = nullptr;
  JobEventListener* listener_ = nullptr;
  const std::string run_id_;
  const std::unique_ptr<CheckpointCommitter> committer_;

  static constexpr std::chrono::milliseconds kMinTickGap{20};
  // A start refused because the disk is full is tried again after this long.
  static constexpr std::chrono::milliseconds kDiskFullRetry{1000};
  // A full pass runs at least this often, even when no event asked for one: the safety
  // net for whatever frees a job that no event reports.
  static constexpr std::chrono::milliseconds kFullPassInterval{2000};
  // How often retention (ExpireFinishedJobs) looks for finished jobs to delete.
  static constexpr std::chrono::milliseconds kRetentionInterval{5000};

  // Owned by the io_context thread.
  boost::asio::steady_timer timer_;
  boost::asio::steady_timer kick_timer_;     // a ScheduleTick() that waits for kMinTickGap
  boost::asio::steady_timer restart_timer_;  // the next restart or reconciliation hold to pass
  const Clock* const clock_;
  // Lost attempts whose end could not be committed for a full disk, and when to try again.
  std::map<std::string, std::chrono::steady_clock::time_point> reconcile_not_before_;
  // Failures in a row of attempts shorter than max_restart_backoff_s, per job.
  std::map<std::string, int> quick_failures_;
  bool is_head_ = false;
  bool shutting_down_ = false;
  int worker_ports_end_ = 0;  // the end of the last port block given to a tensorflow attempt
  bool tick_queued_ = false;
  bool full_pass_due_ = true;
  bool settle_pending_ = false;  // a settle period began and no full pass after its end ran
  std::chrono::steady_clock::time_point last_tick_{};
  std::chrono::steady_clock::time_point last_full_pass_{};
  // PENDING jobs, their decoded definitions, pending reasons proposed, and restart holds
  // (this head's clock: a new head's settle period delays restarts anyway).
  JobQueue queue_;
  std::map<std::string, ActiveAttempt> active_;          // job id -> its live attempt
  std::set<std::string> reconciling_;                    // jobs whose lost attempt is being ended
  int expiring_ = 0;                                     // retention deletes proposed, not answered
  std::chrono::steady_clock::time_point last_expiry_{};  // the last retention query
  NodeRegistry registry_;
  std::chrono::steady_clock::time_point head_since_{};
  std::set<std::pair<std::string, int>> stale_stopped_;
  std::set<std::string> voter_address_proposed_;  // local stale attempts told to stop
  LatencyHistogram checkpoint_latency_;
  RankMetrics rank_metrics_;
};

}  // namespace traintl
