// Checkpoint retention (DESIGN §4): the latest committed checkpoint is always kept; beyond
// it, the best `num_to_keep` by the score attribute (or the newest, without one).
//
// Thread-safety: CheckpointsToDelete is a pure function (no shared or static state); it
// may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/state/records.h"

namespace traintl {

struct RetentionPolicy {
  int num_to_keep = 0;          // 0 = keep everything
  std::string score_attribute;  // "" = by recency
  bool score_max = false;       // true: higher scores are better
};

// `checkpoints` oldest first (the last one is the latest). Returns the ids to delete.
// A checkpoint whose metrics lack the score attribute (or have a non-number) ranks below
// every scored one; ties go to the newer checkpoint.
std::vector<int64_t> CheckpointsToDelete(const std::vector<CheckpointRecord>& checkpoints,
                                         const RetentionPolicy& policy);

}  // namespace traintl
