// A tuning trial's results as Ray Tune reports them, built from the replicated store (so a
// new head rebuilds them exactly), and the files Ray writes into each trial dir, which
// users' pandas scripts read: progress.csv, result.json (one JSON object per line) and
// params.json.
//
// Thread-safety: free functions; the store is thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "daemon/state/state_store.h"

namespace traintl {

// Reports stored for the trial's jobs, all of them.
int64_t CountTrialResults(const StateStore& store, const TrialRecord& trial);

// The trial's results, oldest first: each report's metrics plus Ray's bookkeeping fields
// (training_iteration: 1-based across all the trial's jobs; time_total_s: the running
// time of its jobs up to the report; timestamp: seconds since the epoch; trial_id: the
// trial's name; job_id). Without the first `skip`: what a caller that saw those reads
// now costs the new results (and a count per job), not every result again.
std::vector<nlohmann::json> TrialResults(const StateStore& store, const TrialRecord& trial,
                                         int64_t skip = 0);

// Most columns of the user's metrics in progress.csv (result.json has every key).
inline constexpr size_t kMaxProgressCsvColumns = 1000;

// progress.csv (a header of every key seen, the user's metrics first, at most
// kMaxProgressCsvColumns of them, then one row per result), result.json (each result
// with "config") and params.json in `dir`, each replaced atomically, never through a
// symlink. `dir` is created when missing.
Status WriteTrialFiles(const std::string& dir, const std::vector<nlohmann::json>& results,
                       const nlohmann::json& config);

}  // namespace traintl
