// Checkpoint merging: the ranks' staged checkpoint directories (each already durable,
// copied by traintl-worker) become one checkpoint directory with a manifest.json. The
// final directory appears by an atomic rename only once everything inside it is durable,
// so a crash leaves either nothing or a ".tmp" directory that is never recorded.
//
// Thread-safety: free function; callers must not merge the same (attempt, seq) twice at once.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace traintl {

// `rank_dirs`: rank -> staged directory (ranks without a checkpoint are absent). On a
// file-name clash the lowest rank's file wins. Returns the final directory:
// <trial_dir>/checkpoint_a<attempt>_s<seq>.
Result<std::string> MergeCheckpoint(const std::string& trial_dir, int attempt, int seq,
                                    const std::map<int, std::string>& rank_dirs,
                                    const nlohmann::json& metrics);

// Removes <trial_dir>/*.tmp and .staging leftovers that no record refers to.
void CleanupUncommitted(const std::string& trial_dir);

}  // namespace traintl
