// WorkerPool: the agent's side of the worker processes on this node. It starts one
// traintl-worker per local rank (own process group, PR_SET_PDEATHSIG, log file as
// stdout/stderr, a socketpair on fd 3 - docs/WORKER_PROTOCOL.md, optionally as an
// unprivileged user, with exactly the environment it is given), reads their messages
// (proto/worker_events.h), stops them (stop message, grace, SIGTERM, SIGKILL:
// StopEscalation) and reaps them. Processes are started, signalled and reaped through a
// ProcessLauncher, and the stop graces measured on a Clock.
//
// Nothing a worker starts outlives it: with WorkerCgroups each worker runs in a cgroup of
// its own, killed as a whole when the worker exits (setsid and double-forked children
// included); without, its process group is killed, and orphans that the daemon (a child
// subreaper then) inherits are killed when they appear. With a lease clock, each worker
// gets its read-only descriptor as fd 4 and fences itself when the daemon freezes
// (common/lease_clock.h).
//
// Thread-safety: not thread-safe; every method and every callback runs on the io_context
// thread given at construction (the daemon's single Asio thread).
#pragma once

#include <sys/types.h>

#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/result.h"
#include "common/safe_fs.h"
#include "common/status.h"
#include "daemon/node/process_launcher.h"
#include "daemon/node/worker_cgroups.h"
#include "proto/worker_events.h"

namespace traintl {

// The unprivileged account workers run as when the daemon runs as root.
struct WorkerUser {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;              // primary group
  std::vector<gid_t> groups;  // supplementary groups (getgrouplist), primary included
  std::string home;           // HOME of the worker (from the user database)
};

// Looks `name` up in the user database (a name or a decimal uid). NotFound when there is
// no such user; InvalidArgument for root (uid 0), which would defeat the purpose.
Result<WorkerUser> LookupWorkerUser(const std::string& name);

struct WorkerPoolOptions {
  std::string worker_binary;  // path of traintl-worker; required
  // Time between the stop message and SIGTERM; default 3 s.
  std::chrono::milliseconds stop_grace{3000};
  // Time between SIGTERM and SIGKILL; default 3 s.
  std::chrono::milliseconds term_grace{3000};
  // How long to wait for a worker's channel to drain after its process exited; 1 s.
  std::chrono::milliseconds drain_timeout{1000};
  // Longest accepted message line from a worker; a longer one (or that much data without
  // a newline) closes the channel. Default 4 MiB (events::kMaxEventBytes).
  size_t max_message_bytes = events::kMaxEventBytes;
  // Most reports of one worker not yet acked. The worker keeps its own window
  // (WorkerHost::kMaxUnackedReports, 16), but it runs untrusted code: at this many the
  // pool stops reading its channel until an ack comes, so a flood of reports backs up
  // into the worker instead of the head's memory and log. 0 counts as 1. Default 64.
  size_t max_unacked_reports = 64;
  // The account every worker runs as, unless its WorkerLaunch::user says otherwise
  // (traintld --worker-user). Default: unset (workers run as the daemon's user).
  std::optional<WorkerUser> worker_user;
  // Not owned. When set and enabled, every worker runs in its own cgroup under it.
  // Default: null (process groups only).
  WorkerCgroups* cgroups = nullptr;
  // Not owned. When set, told about each worker's process group, so that a kill -9 of the
  // daemon does not leave them behind. Default: null.
  OrphanReaper* reaper = nullptr;
  // The daemon's lease clock (LeaseClock::read_only_fd) and the lease workers hold on it;
  // -1 / 0: no lease. Default: none.
  int lease_fd = -1;
  int lease_ms = 0;
  // Not owned. Starts, signals and reaps the workers. Default: null
  // (PosixProcessLauncher::Get(), the real processes).
  ProcessLauncher* launcher = nullptr;
  // Not owned. What the stop graces are measured on. Default: null (SystemClock::Get()).
  const Clock* clock = nullptr;
  // Workers started ahead of need, each with LibTorch and Python (torch imported) already
  // loaded where they are installed (worker/warm_start.h): a launch as the default
  // account hands its rank to one of them instead of starting a process. The pool refills
  // only while no rank runs on this node (loading beside training would slow it), so a
  // start and a restart are both warm when this is at least twice the ranks a node runs.
  // Each costs the memory of those runtimes while it waits. A launch with another
  // account, or with LD_* in its environment, starts a new process. 0: none. Default: 0.
  int warm_workers = 0;
  // Disk space a rank's log may use. Past it, the log's oldest part is punched out
  // (fallocate PUNCH_HOLE: the file keeps its size and every offset, the blocks are
  // freed, readers start after the hole: log_chunk.h LogDataStart) down to half of it,
  // so that a chatty job cannot fill the disk the Raft log shares. Checked as the log
  // index is sampled (kLogSampleInterval). 0: no bound. Default 1 GiB.
  uint64_t max_log_bytes = 1ull << 30;
};

// One rank to start.
struct WorkerLaunch {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  std::string context_path;  // JSON context file (already written)
  // stdout + stderr (appended); never opened through a symlink, nor when it exists as
  // anything but a regular file of root or the daemon's user with one link.
  std::string log_path;
  std::string workdir;                     // cwd of the process
  std::map<std::string, std::string> env;  // the whole environment of the worker
  // When set (or WorkerPoolOptions::worker_user is), the worker drops to this account
  // (setgroups, setgid, setuid) before exec;
  // launching then needs root (or CAP_SETUID/CAP_SETGID). The context file is given to it
  // first (ChownNoFollow: a symlink, a hard-linked file or an entry owned by a third user
  // is refused) so that it can read it; the directories it writes are the caller's to give
  // (Agent::GiveToWorker); the log file is opened by the daemon (OpenAppendNoFollow) and
  // inherited. HOME, USER and LOGNAME of `env` are set to the account's. Default: unset
  // (the worker runs as the daemon's user).
  std::optional<WorkerUser> user;
  // Whether a warm worker may run this rank (WorkerPoolOptions::warm_workers). Default:
  // true.
  bool warm_ok = true;
  // The group generation it is launched for (the plan's regroup_generation; 0 at the
  // attempt's start), reported with its exit (WorkerExit::generation).
  int generation = 0;
};

// The most of a worker's failure message (its "done" error) the agent keeps.
inline constexpr size_t kMaxDoneErrorBytes = 64 * 1024;

// How a worker ended, as the agent saw it.
struct WorkerExit {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  std::optional<int> exit_code;  // set when it exited
  std::optional<int> signal;     // set when a signal killed it
  bool done_seen = false;        // a "done" message arrived
  bool done_ok = false;
  std::string done_error;         // the worker's own failure message, at most kMaxDoneErrorBytes
  bool retryable = true;          // false when the worker said retrying cannot help
  bool stopped_by_agent = false;  // this agent asked it to stop before it exited
  // A command entry point's own exit code or signal, from its "done" (the worker itself
  // exits with 1 then): what the attempt records as its exit code or signal.
  std::optional<int> command_exit_code;
  std::optional<int> command_signal;
  // The worker's process id; 0 when unknown (a synthetic exit, an older release's event).
  // With `launch`, the pool's count of the workers it started before this one (since the
  // daemon started), the worker's identity on its node: the head takes one exit per worker
  // (a batch sent again must not replace a rank twice; a pid may be reused).
  int pid = 0;
  uint64_t launch = 0;
  // The group generation the worker was launched for (WorkerLaunch::generation); -1 when
  // unknown (a synthetic exit, an older release's event).
  int generation = -1;
};

class WorkerPoolListener {
 public:
  virtual ~WorkerPoolListener() = default;
  virtual void OnWorkerHello(const std::string& job_id, int attempt, int rank) = 0;
  virtual void OnWorkerReport(const std::string& job_id, int attempt, int rank,
                              const events::Report& report) = 0;
  virtual void OnWorkerExit(const WorkerExit& exit) = 0;
  // The rank's training progress (proto/worker_events.h Progress). Default: ignored.
  virtual void OnWorkerProgress(const std::string& job_id, int attempt, int rank,
                                const events::Progress& progress) {}
};

class WorkerPool {
 public:
  WorkerPool(boost::asio::io_context& io, WorkerPoolOptions options, WorkerPoolListener* listener);
  ~WorkerPool();

  // Starts one worker. On failure nothing is left running.
  Status Launch(const WorkerLaunch& launch);
  // Asks every worker of the attempt to stop (message, then signals after the graces).
  // `urgent`: SIGTERM at once, skipping the stop grace (also for a worker already in it).
  void StopAttempt(const std::string& job_id, int attempt, bool urgent = false);
  // Sends the ack for report `seq` to one rank.
  void Ack(const std::string& job_id, int attempt, int rank, int seq);
  // Tells every live worker of the attempt that the head replaces a dead rank: they
  // regroup as `generation` (peer recovery, events::Regroup).
  void Regroup(const std::string& job_id, int attempt, const events::Regroup& regroup);
  // Number of live (not yet reported as exited) workers of the attempt.
  int LiveWorkers(const std::string& job_id, int attempt) const;
  std::vector<pid_t> LivePids() const;
  // (job id, attempt) of every attempt with a live worker here, each once.
  std::vector<std::pair<std::string, int>> LiveAttempts() const;
  // SIGKILLs every worker's process group at once (daemon shutdown); reaps synchronously.
  void KillAll();
  // Starts warm workers until WorkerPoolOptions::warm_workers wait, unless a rank runs
  // here (call once the pool is set up; the pool refills when the last rank ends). Gives up after
  // kMaxWarmFailures warm workers in a row failed to start or died unused.
  void FillWarmPool();
  // Kills and reaps the warm workers; none is started again (daemon shutdown).
  void DrainWarmPool();
  int warm_workers() const { return static_cast<int>(warm_.size()); }
  static constexpr int kMaxWarmFailures = 3;
  // The account workers run as by default (WorkerPoolOptions::worker_user).
  const std::optional<WorkerUser>& worker_user() const { return options_.worker_user; }
  // What the worker's context file says of its lease ({"fd", "ms", "cgroup_kill"}), or
  // null when workers hold none.
  nlohmann::json LeaseContext(const std::string& job_id, int attempt, int rank) const;

 private:
  struct Worker;
  // A warm worker: started, its channel not yet read by anyone.
  struct Warm {
    pid_t pid;
    int channel_fd;
  };
  // Tracks the started process `pid` as the worker of `launch`.
  // `log` is the rank's log, kept open to sample its size (SampleLogs).
  void Adopt(const WorkerLaunch& launch, pid_t pid, int channel_fd, bool warm, UniqueFd log);
  // Samples every live rank's log size into its index every kLogSampleInterval while any
  // rank lives (log_index.h).
  void ArmLogSampling();
  void SampleLogs();
  void SampleLog(Worker& w, int64_t now_ms);
  // A warm worker that may run `user`'s rank with `env`, taken out of the pool; none when
  // the pool is empty or a new process is needed.
  std::optional<Warm> TakeWarm(const std::optional<WorkerUser>& user,
                               const std::map<std::string, std::string>& env);
  // Moves `w` into the rank's cgroup and sends it its launch: the context file, and spec's
  // working dir, environment and log descriptor.
  Status HandOver(const Warm& w, const std::string& context_path, const ProcessSpec& spec);
  // True when `pid` was a warm worker (now forgotten, and replaced).
  bool ReapWarm(pid_t pid, const ChildExit& exit);
  void StartSignalWait();
  void ReapChildren();
  void ReadNext(const std::shared_ptr<Worker>& w);
  void HandleMessage(const std::shared_ptr<Worker>& w, const std::string& line);
  void MaybeFinish(const std::shared_ptr<Worker>& w);
  // Ends a worker that broke the protocol: its exit is a failure that says `why` (not
  // retryable), its channel is closed, and it is stopped at once (SIGTERM, then SIGKILL).
  void FailWorker(const std::shared_ptr<Worker>& w, const std::string& why);
  void Send(const std::shared_ptr<Worker>& w, const events::AgentMessage& msg);
  void WriteNext(const std::shared_ptr<Worker>& w);
  // Runs the worker's stop escalation when its next step is due.
  void ArmGraceTimer(const std::shared_ptr<Worker>& w);
  // Kills whatever the exited worker `w` left: its cgroup, or its process group and the
  // orphans the daemon inherited.
  void KillLeftovers(const Worker& w);
  // SIGKILL to every child of the daemon that is not a worker, a warm one or the reaper
  // (without cgroups: the processes that escaped their worker's process group).
  void KillOrphans();

  // Constant after construction.
  boost::asio::io_context& io_;
  const WorkerPoolOptions options_;
  WorkerPoolListener* const listener_;
  ProcessLauncher* const launcher_;  // options_.launcher or the real one
  const Clock* const clock_;         // options_.clock or the system's
  const size_t max_unacked_;         // options_.max_unacked_reports, at least 1

  // Owned by the io_context thread.
  boost::asio::signal_set sigchld_;
  boost::asio::steady_timer log_sample_timer_;
  std::map<pid_t, std::shared_ptr<Worker>> workers_;
  uint64_t launches_ = 0;   // workers adopted so far (WorkerExit::launch)
  std::vector<Warm> warm_;  // oldest first
  int warm_failures_ = 0;   // warm workers in a row that failed to start or died unused
  bool warm_draining_ = false;
};

}  // namespace traintl
