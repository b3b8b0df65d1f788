// AttemptTracker: one attempt's lifecycle on the head, as a pure state machine.
//
// Events go in: the start committed, a rank said hello, reported or exited, a node was
// lost or could not start its ranks, the user asked to stop, the head stepped down, a
// checkpoint could not be committed. What the head must do comes out as commands: stop
// the attempt's workers, record a worker event, mark the job RUNNING, commit report `seq`,
// end the attempt with an outcome. No I/O, no clock, no Raft: JobManager carries the
// commands out (and tells the tracker how many of its local workers still live, the one
// fact only the agent knows), so every transition is unit-tested by calling it.
//
// The first failure wins: later exits (the other ranks being stopped) never replace the
// reason. The attempt ends once every rank that was started is gone; a stop requested by
// the user ends it STOPPED whatever the ranks did.
//
// Thread-safety: a value, used by one thread (the head's io_context).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/node/worker_pool.h"
#include "daemon/state/records.h"
#include "proto/raft_commands.h"

namespace traintl {

struct AttemptPlacement {
  std::string job_id;
  int attempt = 0;
  std::vector<std::string> rank_nodes;  // node of each rank (world size = its size)
  std::string local_node;               // the head's own node; other ranks are remote
  // Where this attempt's ranks stage checkpoints ("<trial>/.staging/attempt_N/"): a
  // reported checkpoint outside it is ignored, since its files are about to be moved.
  std::string staging_prefix;
  // Peer recovery (failure_config.peer_recovery): how many dead ranks may be replaced
  // while the others keep running (-1: no limit); 0: off, a death fails the attempt.
  int max_replacements = 0;
  // An elastic job (scaling_config.num_workers {min, max}): when ranks are lost with their
  // node (or cannot be replaced), the others go on as a smaller group as long as at least
  // this many are left. 0: not elastic.
  int min_ranks = 0;
  // An elastic job's maximum: the attempt grows up to this many ranks when capacity
  // appears, beyond the ranks it started with. 0: the size it started with.
  int max_ranks = 0;
};

class AttemptTracker {
 public:
  // ---- commands ----
  // Stop every rank of the attempt, local and remote. `urgent` when the attempt failed:
  // nothing is left to save (its next checkpoint can no longer commit), so the survivors
  // get SIGTERM at once, as torchrun does, instead of after the stop grace; a restart
  // waits for them.
  struct StopWorkers {
    bool urgent = false;
  };
  struct RecordWorkerEvent {
    int rank = 0;
    std::string event;  // "started" | "exited"
    std::string detail;
  };
  struct MarkRunning {};  // every rank said hello
  struct CommitReport {
    int seq = 0;
    nlohmann::json metrics;                      // rank 0's
    std::map<int, std::string> checkpoint_dirs;  // rank -> staged dir; empty: metrics only
  };
  struct End {
    cmd::AttemptOutcome outcome;
  };
  // Peer recovery: start a new worker for `rank` on its node, joining the survivors'
  // collective group `generation`, and tell the survivors to regroup as `generation`.
  struct ReplaceRank {
    int rank = 0;
    int generation = 0;
  };
  // Elastic: the ranks left (in group order) go on as generation `generation` without the
  // others; tell them, with where the new group meets (JobManager picks the store).
  struct Shrink {
    int generation = 0;
    std::vector<int> ranks;
  };
  // Elastic: start `rank` again on `node` (placement().rank_nodes now says so), joining the
  // group `ranks` (in group order) as generation `generation`; tell the others to regroup.
  struct Grow {
    int generation = 0;
    int rank = 0;
    std::string node;
    std::vector<int> ranks;
  };
  // Peer recovery: `ranks` were lost with their node; start each again on another node
  // (JobManager finds room and calls MoveRank), joining generation `generation` with the
  // survivors. When there is no room, OnReplacementFailed.
  struct Relocate {
    int generation = 0;
    std::vector<int> ranks;
  };
  using Command = std::variant<StopWorkers, RecordWorkerEvent, MarkRunning, CommitReport, End,
                               ReplaceRank, Shrink, Grow, Relocate>;
  using Commands = std::vector<Command>;

  explicit AttemptTracker(AttemptPlacement placement);

  // ---- events ----
  // start_attempt committed. `head_ok`: this node is still the head and not shutting
  // down; otherwise the attempt ends at once without starting anything.
  Commands OnLaunched(bool head_ok);
  Commands OnHello(int rank);
  // Rank `rank`'s report `seq`; once every rank reported `seq`, it is committed.
  Commands OnReport(int rank, int seq, const nlohmann::json& metrics,
                    const std::string& checkpoint);
  // A worker exited. `log_tail`: the end of its log (read only for an unclean exit).
  // With peer recovery, a rank that crashed (a signal, or an exit without its own "done")
  // after its hello, while another rank that said hello lives, is replaced (ReplaceRank)
  // instead of failing the attempt, as long as max_replacements allows.
  Commands OnExit(const WorkerExit& e, const std::string& log_tail);
  // The replacement of `rank` could not be started: the attempt fails.
  Commands OnReplacementFailed(int rank, const std::string& why);
  // Elastic: a rank the group went on without, or a new rank (the next number, up to
  // max_ranks), can run on `node` (capacity came back or appeared). Nothing when the
  // attempt is ending or the rank is in the group.
  Commands OnCapacity(int rank, const std::string& node);
  // Relocate: `rank` runs on `node` from now on, its new worker launched for the group of
  // `generation` (the Relocate's; -1: the current one).
  void MoveRank(int rank, const std::string& node, int generation = -1);
  // Ranks of an elastic attempt that left the group, then the next new rank while below
  // max_ranks (candidates for OnCapacity, in that order).
  std::vector<int> Missing() const;
  // Whether rank `rank` runs in a process other than the attempt's first for its place
  // (it was started again elsewhere, OnCapacity).
  bool Moved(int rank) const { return moved_.count(rank) > 0; }
  // `node` stopped heartbeating: its ranks count as killed.
  Commands OnNodeLost(const std::string& node);
  // `node` could not start its ranks, or was not asked to (`why` says which). Its remote
  // ranks count as exited; the head's own node's are counted by its agent (Settle), since
  // a launch that failed half-way may have started some.
  Commands OnNodeStartFailed(const std::string& node, const std::string& why);
  // The job is to stop; `reason` ends up as the attempt's reason.
  Commands OnStopRequested(const std::string& reason = kStoppedByUser);
  static constexpr const char* kStoppedByUser = "stopped by user";
  // This node is no longer the head: stop everything (another head may start the job).
  Commands OnStepDown();
  // Report `seq`'s checkpoint was merged (its commit is proposed): the attempt may end.
  Commands OnCheckpointCommitted(int seq);
  // Report `seq`'s checkpoint could not be merged or made durable.
  Commands OnCheckpointFailed(int seq, const std::string& why);
  // Ends the attempt when no worker of it lives any more - `local_live` of this node's
  // (only the agent knows which started) plus the remote ranks that have not exited - and
  // no checkpoint of it is being merged (its files must not be cleaned up under it).
  Commands Settle(int local_live);

  // ---- state, for the head's views ----
  const AttemptPlacement& placement() const { return placement_; }
  int world_size() const { return static_cast<int>(placement_.rank_nodes.size()); }
  bool launched() const { return launched_; }
  bool ending() const { return ending_; }
  bool stop_requested() const { return stop_requested_; }
  bool end_proposed() const { return end_proposed_; }
  int commits_in_flight() const { return commits_in_flight_; }
  const std::optional<cmd::AttemptOutcome>& failure() const { return failure_; }
  bool IsRemote(int rank) const;
  bool Exited(int rank) const { return exits_.count(rank) > 0; }
  // Remote ranks that have not exited.
  int RemoteLive() const;

  // A clean exit: code 0 without a failed "done". Anything else fails the attempt.
  static bool IsCleanExit(const WorkerExit& e);
  // Ranks replaced so far, and the collective generation (0 until the first).
  int replacements() const { return replacements_; }
  int generation() const { return generation_; }
  // The ranks in the collective group (every rank until an elastic job shrank).
  const std::set<int>& active() const { return active_; }

 private:
  Commands BeginEnding();
  void FailWith(cmd::AttemptOutcome o);
  // Launched, and neither ending nor asked to stop: deaths may still be recovered.
  bool Running() const { return launched_ && !ending_ && !stop_requested_; }
  // What `ranks` reported that nobody committed no longer counts (they left, or a new
  // incarnation reports from a survivor's state).
  void ForgetReports(const std::set<int>& ranks);
  // The exit recorded for a rank whose worker did not report one: lost with its node
  // (`killed`: SIGKILL) or never started.
  WorkerExit SyntheticExit(int rank, bool killed) const;
  // Whether `e`'s death is recovered by replacing its rank (see OnExit).
  bool Replaceable(const WorkerExit& e) const;
  // Commits every pending report that every rank has sent, oldest first.
  void CommitComplete(Commands* out);
  // Elastic: drops `gone` from the group and emits Shrink when enough ranks that said hello
  // are left; false (nothing changed) otherwise.
  bool TryShrink(const std::set<int>& gone, Commands* out);

  // Constant after construction.
  AttemptPlacement placement_;  // rank_nodes change when an elastic attempt grows back

  bool launched_ = false;  // start_attempt committed
  bool ending_ = false;    // the workers are being stopped
  bool stop_requested_ = false;
  std::string stop_reason_;  // set with stop_requested_
  bool end_proposed_ = false;
  int commits_in_flight_ = 0;  // CommitReports with checkpoints not yet merged or failed
  std::optional<cmd::AttemptOutcome> failure_;  // the first failure seen
  bool failure_is_own_exit_ = false;  // failure_ is a rank's exit by itself (not a signal)
  std::set<int> hellos_;
  std::map<int, std::map<int, std::pair<nlohmann::json, std::string>>> reports_;  // seq -> rank
  std::map<int, WorkerExit> exits_;
  // (rank, node, pid, launch) of every exit taken (WorkerExit).
  std::set<std::tuple<int, std::string, int, uint64_t>> exited_workers_;
  // The group generation each rank's current worker was launched for, for ranks started
  // again (absent: 0, the attempt's start). An exit of a worker launched for an earlier
  // one is its predecessor's, reported late (a node lost, then back, where the rank was
  // started again), and is not the current worker's.
  std::map<int, int> launched_generation_;
  bool marked_running_ = false;  // MarkRunning was returned
  int replacements_ = 0;
  int generation_ = 0;
  std::set<int> active_;
  std::set<int> moved_;
  std::set<int> replaced_;  // ranks replaced in place (peer recovery)
};

// How a worker's exit reads in `traintl status`: "rank 1 was killed by SIGKILL", "rank 0
// could not load the training library: ..." (not retryable), "rank 2 failed: <its own
// message>", "rank 3 exited with code 4"; `log_tail` travels with it.
cmd::AttemptOutcome DescribeExit(const WorkerExit& e, const std::string& log_tail);

// The restart budget's clock (failure_config's backoff): `quick` failures in a row of
// attempts that each ran shorter than `max_s` came before this one, which ran `ran_s`.
// Returns the new count and how long to hold the restart back (0: start it at once).
struct RestartDelay {
  int quick_failures = 0;
  double delay_s = 0;
};
RestartDelay NextRestartDelay(int quick, double ran_s, double backoff_s, double max_s);

// Why an attempt the store calls active has no live workers on a new head: `a` is its
// record (who started it), `this_node`/`this_run` the head that asks. Names the cause: a
// head failover, a restart of this daemon, or this head's own lost leadership.
std::string LostAttemptReason(const AttemptRecord& a, const std::string& this_node,
                              const std::string& this_run);

}  // namespace traintl
