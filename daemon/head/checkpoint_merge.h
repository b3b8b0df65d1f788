// Checkpoint merging: the ranks' staged checkpoint directories (copied by traintl-worker,
// not fsynced: the training loop does not wait for the disk) become one checkpoint
// directory with a manifest.json. Every file is fsynced once moved, every directory of the
// result too, and the final directory appears by an atomic rename only once everything
// inside it is durable, so a crash leaves either nothing or a ".tmp" directory that is
// never recorded. (Staged files of ranks on other nodes reach the shared trial dir by
// their close(); an NFS export must be `sync`, its default, for them to be on the
// server's disk then.)
//
// Nothing here follows a symlink below the storage path (common/safe_fs.h): the trial dir
// is reached by rule 1 for its parent and must itself be a real directory of root, the
// daemon's user or the thread's worker file identity (ScopedFsIdentity); staged files are
// moved with renameat between directories opened O_NOFOLLOW, and a symlink anywhere in a
// staged tree, at .staging, at the trial dir or at the final directory fails the merge
// ("refusing to follow a symlink at ...") before anything is moved from it.
//
// Thread-safety: free functions; callers must not merge the same (attempt, seq) twice at
// once.
#pragma once

#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "common/status.h"

namespace traintl {

// `rank_dirs`: rank -> staged directory (ranks without a checkpoint are absent). On a
// file-name clash the lowest rank's file wins. Returns the final directory:
// <trial_dir>/checkpoint_a<attempt>_s<seq>.
Result<std::string> MergeCheckpoint(const std::string& trial_dir, int attempt, int seq,
                                    const std::map<int, std::string>& rank_dirs,
                                    const nlohmann::json& metrics);

// Removes <trial_dir>/checkpoint_*.tmp leftovers that no record refers to (RemoveAllAt from
// the trial dir's descriptor: a planted link is removed, never followed).
void CleanupUncommitted(const std::string& trial_dir);

// Removes attempt `attempt`'s merged checkpoints (MergeCheckpoint's names exactly) whose
// path is not in `recorded`, the same way; for after the attempt's end was applied, when
// no commit of it can follow.
void RemoveUnrecorded(const std::string& trial_dir, int attempt,
                      const std::set<std::string>& recorded);

// Removes one checkpoint directory (retention), `checkpoint_dir` being
// <trial_dir>/checkpoint_*; the same rules as CleanupUncommitted. InvalidArgument for any
// other path; OK when it or the trial dir is gone.
Status RemoveCheckpoint(const std::string& trial_dir, const std::string& checkpoint_dir);

}  // namespace traintl
