// TuneController: the head's driver of tuning experiments (`traintl tune`, DESIGN §8).
// Each trial is a job (gang-scheduled, with its own trial dir, checkpoints and restarts by
// the JobManager); this controller decides which trials exist and when they end:
//
//   create: the experiment's record (create_experiment), then trials one by one, each a
//     submit_job carrying a TrialLink, never more than one trial job waiting to start
//     (the queue does the gang scheduling; tune_config.max_concurrent_trials caps those
//     running).
//   results: each committed report of a trial's job becomes a Ray-style result
//     (tune_results.h) for the TrialScheduler, whose decision is carried out: stop_job with
//     the scheduler's reason, or a pause / PBT exploit, which ends the job and continues
//     the trial later in a new job restored from a checkpoint.
//   persistence: the scheduler's state, how many results it has seen per trial and every
//     trial decision are recorded with update_experiment before they are acted on, so a
//     new head (SetHead) loads the same scheduler and goes on: no trial lost or run twice
//     (job submissions carry the submission id "tune:<exp>:<trial>:<run>").
//
// The work is one pass per experiment (Pass), run after every event this head hears of
// (JobEventListener) and every kPassInterval besides. A pass never overlaps an
// update_experiment of the same experiment still in flight: it reads the store, and the
// store must already say what the controller decided.
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
#include <vector>

#include <nlohmann/json.hpp>

#include "common/fs_identity.h"
#include "common/result.h"
#include "daemon/head/command_log.h"
#include "daemon/head/job_manager.h"
#include "daemon/state/state_store.h"
#include "daemon/tune/trial_scheduler.h"
#include "daemon/tune/tune_spec.h"

namespace traintl {

struct TuneControllerOptions {
  // Where experiment dirs go when the trainer's run_config.storage_path is unset.
  // Required.
  std::string default_storage_path;
  // How often every RUNNING experiment is looked at without an event. Default 500 ms.
  std::chrono::milliseconds pass_interval{500};
  // When workers run as another account (traintld --worker-user), trial dirs are theirs:
  // progress.csv and the other result files are written with that account's file access
  // (common/fs_identity.h), never root's. Default: unset (the daemon's own).
  std::optional<FsIdentity> worker_fs_identity;
};

class TuneController : public JobEventListener {
 public:
  TuneController(boost::asio::io_context& io, TuneControllerOptions options, StateStore* store,
                 CommandLog* log, JobManager* jobs);
  ~TuneController() override;

  void Start();
  void Shutdown();
  // This node became the head (true) or stopped being it.
  void SetHead(bool head);

  struct Creation {
    tune::TuneSpec spec;
    std::string name;            // the experiment's name ("" = "tune")
    std::string library_sha256;  // the trainer's code blob; "" = its path as is
    std::string library_path;
    std::string submission_id;  // "" = none
  };
  // Checks what can be checked before anything is stored (the scheduler's parameters, the
  // first trials' job specs), then creates the experiment; `done` gets its id.
  void Create(Creation c, std::function<void(Result<std::string>)> done);
  // Ends a RUNNING experiment as STOPPED and stops its trials' jobs; they continue from
  // their latest checkpoints on Resume.
  void Stop(const std::string& experiment_id, std::function<void(Status)> done);
  void Resume(const std::string& experiment_id, std::function<void(Status)> done);
  // Proposes delete_experiment for an experiment that is not RUNNING; `done` gets the
  // answer. Its trials' jobs go with it (records and logs here); with `remove_files`, its
  // experiment dir too (trial dirs, checkpoints, result files). NotFound when it is gone;
  // FailedPrecondition, before anything is proposed, when a job that has not ended needs
  // what would go (deletion_check.h).
  void Delete(const std::string& experiment_id, bool remove_files,
              std::function<void(Result<cmd::DeleteExperimentAnswer>)> done);

  // JobEventListener
  void OnJobReported(const std::string& job_id) override;
  void OnJobEnded(const std::string& job_id) override;
  void OnJobStarted(const std::string& job_id) override;
  // A trial's job whose scheduler decides on results (not FIFO): its ranks wait after each
  // report until the pass that fed it to the scheduler releases it, so a trial the
  // scheduler stops trains no further (Ray's train.report() waits for the Tune driver
  // too).
  bool HoldsReports(const std::string& job_id) override;

  // The message of jobs a user's experiment stop ended (Resume continues them).
  static constexpr const char* kStoppedWithExperiment = "the experiment was stopped";

 private:
  // A RUNNING experiment this head drives.
  struct Live {
    tune::TuneSpec spec;
    std::unique_ptr<tune::TrialScheduler> scheduler;
    int added = 0;                         // trials 0..added-1 were given to the scheduler
    std::map<int, int64_t> fed;            // trial -> results the scheduler has seen
    int next_index = 0;                    // the next trial to create
    std::set<int> submitting;              // trials whose job submission is in flight
    std::set<int> stopping;                // trials whose job's stop was proposed
    std::map<int, int64_t> files_written;  // trial -> results in its files
    // trial -> when its files may be rewritten next while it runs
    std::map<int, std::chrono::steady_clock::time_point> files_due;
    bool updating = false;    // an update_experiment is in flight
    bool pass_again = false;  // an event came while it was
    bool failed = false;      // Fail() was called: drive it no further
  };

  // Builds the Live of a RUNNING experiment from its record; InvalidArgument when its
  // stored spec or scheduler state cannot be read (the experiment then FAILS).
  Result<std::unique_ptr<Live>> Load(const ExperimentRecord& e) const;
  // Posts a pass of `experiment_id` (all of them when empty) to run soon.
  void PassSoon(const std::string& experiment_id);
  void PassAll();
  void Pass(const std::string& experiment_id);
  // Creates trial `index` (generation 0) or continues it in a new job restored from
  // `restore_job`'s latest checkpoint with `config`. False when the trial's spec is refused:
  // the experiment then fails (live.failed), and the caller stops driving it.
  bool SubmitTrialJob(const ExperimentRecord& e, Live& live, int index,
                      const nlohmann::json& config, int generation, const std::string& restore_job);
  // Proposes update_experiment with the scheduler's state; the pass that follows its
  // commit sees what it recorded.
  void Record(const std::string& experiment_id, Live& live, cmd::UpdateExperiment update);
  // Ends the experiment as FAILED. Its Live (if any) is only marked failed here and
  // dropped later: the pass that called this still holds it.
  void Fail(const std::string& experiment_id, const std::string& message);
  void ArmTimer();
  // Rewrites a trial's result files off the io thread, reading its results there too (they
  // are fsynced, and rebuilt from the store anyway: nothing waits for them).
  void WriteFilesLater(std::string dir, TrialRecord trial, nlohmann::json config);
  // How often a running trial's files are rewritten at most.
  static constexpr std::chrono::seconds kFilesInterval{2};

  // Constant after construction.
  boost::asio::io_context& io_;
  const TuneControllerOptions options_;
  StateStore* const store_;
  CommandLog* const log_;
  JobManager* const jobs_;

  // Owned by the io_context thread.
  boost::asio::steady_timer timer_;
  bool is_head_ = false;
  bool shut_down_ = false;
  std::map<std::string, std::unique_ptr<Live>> live_;  // experiment id -> its driver
  std::set<std::string> queued_;                       // passes posted, not yet run
  // One thread: a trial's writes happen in the order they were asked for.
  boost::asio::thread_pool files_{1};
};

// The name of trial `index` of experiment `experiment_name`: "<name>_00003".
std::string TrialName(const std::string& experiment_name, int index);

}  // namespace traintl
