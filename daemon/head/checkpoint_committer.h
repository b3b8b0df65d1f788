// CheckpointCommitter: the head's file work on checkpoints (merging a report's staged
// directories, deleting what retention dropped, cleaning up after an attempt) on a thread
// of its own, so that the io_context thread - HTTP, heartbeats, Raft callbacks - never
// waits on a directory fsync or a large delete.
//
// Jobs run one at a time in submission order: a merge submitted before an attempt's
// cleanup finishes before that cleanup starts. Each runs with the worker file identity
// (common/fs_identity.h) when one is set, but the removal of a deleted job's directories:
// those lie in directories of the daemon's (the job's log dir, the storage path), which
// the worker could not empty, and RemoveAllNoFollow is safe with root's access (it never
// follows a link). A merge's result is posted back to the io_context.
//
// Thread-safety: Merge, Remove and CleanUpAttempt may be called from any thread; the
// destructor drains nothing: it finishes the running job and drops the rest (their files
// stay where a later cleanup finds them: uncommitted merges are ".tmp" directories).
#pragma once

#include <boost/asio/io_context.hpp>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/fs_identity.h"
#include "common/result.h"
#include "common/thread_annotations.h"
#include "daemon/head/checkpoint_files.h"

namespace traintl {

class CheckpointCommitter {
 public:
  // `fs`: the worker file identity, or nullopt for the daemon's own. `files`: what does the
  // file work (default null: DiskCheckpointFiles); it must outlive this.
  CheckpointCommitter(boost::asio::io_context& io, std::optional<FsIdentity> fs,
                      CheckpointFiles* files = nullptr);
  ~CheckpointCommitter();
  CheckpointCommitter(const CheckpointCommitter&) = delete;
  CheckpointCommitter& operator=(const CheckpointCommitter&) = delete;

  // CheckpointFiles::Merge (on disk: MergeCheckpoint, checkpoint_merge.h) on the committer
  // thread; `done` runs on the
  // io_context with the final directory or the error.
  void Merge(std::string trial_dir, int attempt, int seq, std::map<int, std::string> rank_dirs,
             nlohmann::json metrics, std::function<void(Result<std::string>)> done);
  // Deletes checkpoint directories retention dropped (already unrecorded): only paths
  // below <trial_dir>/checkpoint_ are touched.
  void Remove(std::string trial_dir, std::vector<std::string> checkpoint_dirs);
  // After attempt `attempt` ended (its end applied, so no commit of it can follow): its
  // staging area and uncommitted ".tmp" merges go, and so do its merged checkpoints that
  // no record names, `recorded` being the paths of the job's records (a commit refused,
  // or a head that died between a merge and its commit, left them).
  void CleanUpAttempt(std::string staging_dir, std::string trial_dir, int attempt,
                      std::set<std::string> recorded);
  // A deleted job's directories (CheckpointFiles::RemoveDir), behind the work queued, with
  // the daemon's own file access.
  void RemoveDirs(std::vector<std::string> dirs);

  // Jobs queued or running (for tests and views).
  size_t pending() const;

 private:
  // `as_worker`: with the worker file identity (when one is set).
  void Post(std::function<void()> job, bool as_worker = true);
  void Main();

  // Constant after construction.
  boost::asio::io_context& io_;
  const std::optional<FsIdentity> fs_;
  CheckpointFiles* const files_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  struct Job {
    std::function<void()> run;
    bool as_worker = true;
  };
  std::deque<Job> jobs_ TRAINTL_GUARDED_BY(mu_);
  size_t running_ TRAINTL_GUARDED_BY(mu_) = 0;
  bool stopping_ TRAINTL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // started last
};

}  // namespace traintl
