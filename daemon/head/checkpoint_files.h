// CheckpointFiles: the file-system seam of the head's checkpoint work - merging a report's
// staged rank directories, deleting what retention dropped, cleaning up after an attempt.
// The CheckpointCommitter runs them on its thread; DiskCheckpointFiles does them on disk
// (checkpoint_merge.h), and tests substitute fakes that fail or record, to drive what a
// real disk cannot be made to do on demand (an fsync that fails, a merge that errors).
//
// Thread-safety: implementations are called from the committer's thread only.
#pragma once

#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "common/status.h"

namespace traintl {

class CheckpointFiles {
 public:
  virtual ~CheckpointFiles() = default;
  // The merged checkpoint's final directory, durable, or why not (nothing recorded then).
  virtual Result<std::string> Merge(const std::string& trial_dir, int attempt, int seq,
                                    const std::map<int, std::string>& rank_dirs,
                                    const nlohmann::json& metrics) = 0;
  // Deletes a checkpoint directory below <trial_dir>/checkpoint_ that is no longer recorded.
  virtual Status Remove(const std::string& trial_dir, const std::string& checkpoint_dir) = 0;
  // Removes an ended attempt's staging area, the trial dir's uncommitted merges, and the
  // attempt's merged checkpoints whose paths are not in `recorded` (RemoveUnrecorded).
  virtual Status CleanUpAttempt(const std::string& staging_dir, const std::string& trial_dir,
                                int attempt, const std::set<std::string>& recorded) = 0;
  // rm -rf of a deleted job's directory (its trial dir, its logs here), never through a
  // symlink. OK when it does not exist.
  virtual Status RemoveDir(const std::string& dir) = 0;
};

// The real one: checkpoint_merge.h on the file system.
class DiskCheckpointFiles : public CheckpointFiles {
 public:
  Result<std::string> Merge(const std::string& trial_dir, int attempt, int seq,
                            const std::map<int, std::string>& rank_dirs,
                            const nlohmann::json& metrics) override;
  Status Remove(const std::string& trial_dir, const std::string& checkpoint_dir) override;
  Status CleanUpAttempt(const std::string& staging_dir, const std::string& trial_dir, int attempt,
                        const std::set<std::string>& recorded) override;
  Status RemoveDir(const std::string& dir) override;

  // The process-wide instance (stateless).
  static DiskCheckpointFiles* Get();
};

}  // namespace traintl
