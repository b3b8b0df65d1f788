// CheckDeletion: whether deleting jobs (`traintl delete`, `traintl tune delete`) and
// removing a directory with them (--checkpoints) would take from a job that has not
// ended what it still needs: the trial dir it writes, or the checkpoint it resumes from
// (a directory under the removed one, or "job:<ref>" naming a deleted job, which the head
// resolves when it starts an attempt).
//
// The head asks before it proposes the delete; a job submitted between the check and the
// commit is not covered (the delete is a user's explicit request, and the window is one
// Raft round trip).
//
// Thread-safety: a pure function (no shared state).
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/state/records.h"
#include "daemon/state/state_store.h"

namespace traintl {

// `active`: the jobs that have not ended, with their definitions (ListActiveJobs); those
// in `deleting` are skipped (the FSM refuses to delete them anyway). `dir`: the directory
// removed with them, "" for none. `resolve_job`: a "job:<ref>" reference's job id ("" when
// it names none). FailedPrecondition naming the first job in the way; OK otherwise.
Status CheckDeletion(const std::vector<JobRecord>& active, const std::set<std::string>& deleting,
                     const std::string& dir,
                     const std::function<std::string(const std::string&)>& resolve_job);

// The same over `store`'s jobs that have not ended, "job:<ref>" resolved as the head
// resolves it (StateStore::ResolveJobId).
Status CheckDeletion(const StateStore& store, const std::set<std::string>& deleting,
                     const std::string& dir);

// Whether `path` is `dir` or lies under it (by name: both absolute, no "..").
bool PathUnder(const std::string& path, const std::string& dir);

}  // namespace traintl
