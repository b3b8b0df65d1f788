#include "daemon/head/deletion_check.h"

#include <nlohmann/json.hpp>

#include "common/json_depth.h"

namespace traintl {

bool PathUnder(const std::string& path, const std::string& dir) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  if (d.empty() || path.empty()) return false;
  if (d == "/") return path[0] == '/';
  return path.compare(0, d.size(), d) == 0 && (path.size() == d.size() || path[d.size()] == '/');
}

Status CheckDeletion(const std::vector<JobRecord>& active, const std::set<std::string>& deleting,
                     const std::string& dir,
                     const std::function<std::string(const std::string&)>& resolve_job) {
  for (const JobRecord& job : active) {
    if (deleting.count(job.id) != 0) continue;
    const std::string who = "job " + job.id + " (" + job.name + ", " + job.state + ")";
    if (!dir.empty() && PathUnder(job.trial_dir, dir)) {
      return Status::FailedPrecondition(who + " writes its trial dir " + job.trial_dir + " under " +
                                        dir + "; let it end first");
    }
    const nlohmann::json def = ParseJsonBounded(job.definition);
    if (!def.is_object()) continue;
    auto it = def.find("resume_from_checkpoint");
    if (it == def.end() || !it->is_string()) continue;
    const std::string from = it->get<std::string>();
    if (from.rfind("job:", 0) == 0) {
      const std::string id = resolve_job(from.substr(4));
      if (!id.empty() && deleting.count(id) != 0) {
        return Status::FailedPrecondition(who + " resumes from " + from +
                                          "'s checkpoint; let it end first, or stop it");
      }
    } else if (!dir.empty() && PathUnder(from, dir)) {
      return Status::FailedPrecondition(who + " resumes from the checkpoint " + from + " under " +
                                        dir + "; let it end first, or keep the files");
    }
  }
  return Status::Ok();
}

Status CheckDeletion(const StateStore& store, const std::set<std::string>& deleting,
                     const std::string& dir) {
  return CheckDeletion(store.ListActiveJobs(/*with_spec=*/true), deleting, dir,
                       [&store](const std::string& ref) {
                         auto id = store.ResolveJobId(ref);
                         return id.ok() ? *id : std::string();
                       });
}

}  // namespace traintl
