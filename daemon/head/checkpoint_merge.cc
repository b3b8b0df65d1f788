#include "daemon/head/checkpoint_merge.h"

#include <dirent.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "common/file_util.h"

namespace traintl {

Result<std::string> MergeCheckpoint(const std::string& trial_dir, int attempt, int seq,
                                    const std::map<int, std::string>& rank_dirs,
                                    const nlohmann::json& metrics) {
  char name[64];
  std::snprintf(name, sizeof name, "checkpoint_a%03d_s%06d", attempt, seq);
  const std::string final_dir = trial_dir + "/" + name;
  const std::string tmp = final_dir + ".tmp";
  TRAINTL_RETURN_IF_ERROR(RemoveAll(tmp));
  if (PathExists(final_dir)) return final_dir;  // merged before a crash, not yet recorded
  TRAINTL_RETURN_IF_ERROR(MakeDirs(tmp));

  nlohmann::json files = nlohmann::json::object();
  std::set<std::string> dirs{tmp};
  // Highest rank first, so that lower ranks overwrite: rank 0 wins a clash.
  for (auto it = rank_dirs.rbegin(); it != rank_dirs.rend(); ++it) {
    const int rank = it->first;
    TRAINTL_ASSIGN_OR_RETURN(auto rels, ListFilesRecursive(it->second));
    for (const auto& rel : rels) {
      const std::string target = tmp + "/" + rel;
      const std::string parent = DirName(target);
      if (parent != tmp) {
        TRAINTL_RETURN_IF_ERROR(MakeDirs(parent));
        dirs.insert(parent);
      }
      const std::string src = it->second + "/" + rel;
      struct stat st;
      if (::stat(src.c_str(), &st) != 0) return Status::Internal("stat " + src);
      if (::rename(src.c_str(), target.c_str()) != 0)
        return Status::Internal("rename " + src + ": " + std::strerror(errno));
      files[rel] = {{"rank", rank}, {"size", static_cast<int64_t>(st.st_size)}};
    }
  }
  nlohmann::json manifest = {
      {"attempt", attempt}, {"seq", seq}, {"metrics", metrics}, {"files", files}};
  TRAINTL_RETURN_IF_ERROR(WriteFileAtomic(tmp + "/manifest.json", manifest.dump(2)));
  for (const auto& d : dirs) TRAINTL_RETURN_IF_ERROR(FsyncDir(d));
  if (::rename(tmp.c_str(), final_dir.c_str()) != 0)
    return Status::Internal("rename " + tmp + ": " + std::strerror(errno));
  TRAINTL_RETURN_IF_ERROR(FsyncDir(trial_dir));
  return final_dir;
}

void CleanupUncommitted(const std::string& trial_dir) {
  DIR* d = ::opendir(trial_dir.c_str());
  if (d == nullptr) return;
  std::vector<std::string> victims;
  while (struct dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.size() > 4 && n.rfind("checkpoint_", 0) == 0 && n.substr(n.size() - 4) == ".tmp")
      victims.push_back(trial_dir + "/" + n);
  }
  ::closedir(d);
  for (const auto& v : victims) RemoveAll(v);
}

}  // namespace traintl
