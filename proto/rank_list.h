// The rank lists of `traintl logs --rank 0,2` and GET /v1/jobs/{job}/logs?ranks=0,2: ranks
// (0..999999) separated by commas, sorted and de-duplicated on the way in.
//
// Thread-safety: a pure function.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"

namespace traintl {

// InvalidArgument (saying what is accepted) for an empty item or one that is not a rank.
Result<std::vector<int>> ParseRankList(const std::string& text);

}  // namespace traintl
