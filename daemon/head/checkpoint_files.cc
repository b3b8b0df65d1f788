#include "daemon/head/checkpoint_files.h"

#include "common/file_util.h"
#include "common/safe_fs.h"
#include "daemon/head/checkpoint_merge.h"

namespace traintl {

Result<std::string> DiskCheckpointFiles::Merge(const std::string& trial_dir, int attempt, int seq,
                                               const std::map<int, std::string>& rank_dirs,
                                               const nlohmann::json& metrics) {
  return MergeCheckpoint(trial_dir, attempt, seq, rank_dirs, metrics);
}

Status DiskCheckpointFiles::Remove(const std::string& trial_dir,
                                   const std::string& checkpoint_dir) {
  return RemoveCheckpoint(trial_dir, checkpoint_dir);
}

Status DiskCheckpointFiles::CleanUpAttempt(const std::string& staging_dir,
                                           const std::string& trial_dir, int attempt,
                                           const std::set<std::string>& recorded) {
  Status st = RemoveAll(staging_dir);
  CleanupUncommitted(trial_dir);  // best effort: leftovers are tried again next time
  RemoveUnrecorded(trial_dir, attempt, recorded);
  return st;
}

Status DiskCheckpointFiles::RemoveDir(const std::string& dir) { return RemoveAllNoFollow(dir); }

DiskCheckpointFiles* DiskCheckpointFiles::Get() {
  static DiskCheckpointFiles files;
  return &files;
}

}  // namespace traintl
