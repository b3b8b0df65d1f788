#include "daemon/head/checkpoint_merge.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "common/file_util.h"
#include "common/safe_fs.h"

namespace traintl {
namespace {

// The trial dir: its parent (the storage path) is a trusted prefix; the trial dir itself
// must be a real directory of root, the daemon's user or the worker whose file identity
// this thread has (ScopedFsIdentity).
Result<SafeDir> OpenTrialDir(const std::string& trial_dir) {
  return OpenJobDir(trial_dir, OwnerPolicy::ForThisThread());
}

// "checkpoint_a<attempt>_s<seq>": zero-padded, so that names sort by attempt and seq.
std::string CheckpointName(int attempt, int seq) {
  char name[64];
  std::snprintf(name, sizeof name, "checkpoint_a%03d_s%06d", attempt, seq);
  return name;
}

}  // namespace

Result<std::string> MergeCheckpoint(const std::string& trial_dir, int attempt, int seq,
                                    const std::map<int, std::string>& rank_dirs,
                                    const nlohmann::json& metrics) {
  const std::string final_name = CheckpointName(attempt, seq);
  const std::string tmp_name = final_name + ".tmp";
  const std::string final_dir = trial_dir + "/" + final_name;
  const OwnerPolicy owners = OwnerPolicy::ForThisThread();
  // Everything below happens relative to descriptors opened without following symlinks:
  // the trial dir is writable by the worker, which may plant links anywhere in it.
  TRAINTL_ASSIGN_OR_RETURN(SafeDir trial, OpenTrialDir(trial_dir));
  TRAINTL_RETURN_IF_ERROR(RemoveAllAt(trial, tmp_name));
  if (auto existing = StatEntryNoFollow(trial, final_name); existing.ok()) {
    // Merged before a crash, not yet recorded; only a real directory counts.
    if (S_ISLNK(existing->st_mode))
      return Status::PermissionDenied("refusing to follow a symlink at " + final_dir);
    if (!S_ISDIR(existing->st_mode))
      return Status::FailedPrecondition(final_dir + " exists and is not a directory");
    return final_dir;
  } else if (existing.status().code() != Status::Code::kNotFound) {
    return existing.status();
  }
  TRAINTL_ASSIGN_OR_RETURN(SafeDir tmp, MakeDirsBelow(trial, tmp_name, 0755, owners));

  nlohmann::json files = nlohmann::json::object();
  std::set<std::string> dirs;  // relative to tmp, "" being tmp itself
  dirs.insert("");
  const std::string trial_prefix = trial_dir + "/";
  // Highest rank first, so that lower ranks overwrite: rank 0 wins a clash.
  for (auto it = rank_dirs.rbegin(); it != rank_dirs.rend(); ++it) {
    const int rank = it->first;
    // Staged directories lie in the trial dir (the head accepts no others); reaching them
    // from its descriptor is what keeps a planted .staging link from counting.
    if (it->second.rfind(trial_prefix, 0) != 0) {
      return Status::InvalidArgument("rank " + std::to_string(rank) + "'s checkpoint " +
                                     it->second + " is not in " + trial_dir);
    }
    TRAINTL_ASSIGN_OR_RETURN(SafeDir staged,
                             OpenDirBelow(trial, it->second.substr(trial_prefix.size()), owners));
    TRAINTL_ASSIGN_OR_RETURN(auto rels, ListFilesNoFollow(staged));
    for (const auto& rel : rels) {
      const std::string sub = rel.find('/') == std::string::npos ? "" : DirName(rel);
      const std::string base = BaseName(rel);
      TRAINTL_ASSIGN_OR_RETURN(SafeDir from, OpenDirBelow(staged, sub, owners));
      TRAINTL_ASSIGN_OR_RETURN(SafeDir to, MakeDirsBelow(tmp, sub, 0755, owners));
      for (std::string d = sub; !d.empty(); d = d.find('/') == std::string::npos ? "" : DirName(d))
        dirs.insert(d);
      int64_t size = 0;
      TRAINTL_RETURN_IF_ERROR(RenameFileNoFollow(from, base, to, base, &size));
      // The worker staged it without fsync (off the training loop's path): its data is
      // made durable here, before anything can record it.
      TRAINTL_RETURN_IF_ERROR(FsyncFileAt(to, base));
      files[rel] = {{"rank", rank}, {"size", size}};
    }
  }
  nlohmann::json manifest = {
      {"attempt", attempt}, {"seq", seq}, {"metrics", metrics}, {"files", files}};
  TRAINTL_RETURN_IF_ERROR(WriteFileAtomicAt(tmp, "manifest.json", manifest.dump(2), 0644));
  for (const auto& d : dirs) {
    TRAINTL_ASSIGN_OR_RETURN(SafeDir sd, OpenDirBelow(tmp, d, owners));
    TRAINTL_RETURN_IF_ERROR(FsyncSafeDir(sd));
  }
  if (::renameat(trial.fd.get(), tmp_name.c_str(), trial.fd.get(), final_name.c_str()) != 0)
    return Status::Internal("rename " + trial_dir + "/" + tmp_name + ": " + std::strerror(errno));
  TRAINTL_RETURN_IF_ERROR(FsyncSafeDir(trial));
  return final_dir;
}

void CleanupUncommitted(const std::string& trial_dir) {
  auto trial = OpenTrialDir(trial_dir);
  if (!trial.ok()) return;
  auto names = ListDir(*trial);
  if (!names.ok()) return;
  for (const auto& n : *names) {
    if (n.size() > 4 && n.rfind("checkpoint_", 0) == 0 && n.substr(n.size() - 4) == ".tmp")
      RemoveAllAt(*trial, n).IgnoreError();  // what is left is tried again next time
  }
}

void RemoveUnrecorded(const std::string& trial_dir, int attempt,
                      const std::set<std::string>& recorded) {
  auto trial = OpenTrialDir(trial_dir);
  if (!trial.ok()) return;
  auto names = ListDir(*trial);
  if (!names.ok()) return;
  // The name of seq 0 less its digits: what every merge of the attempt is named, the seq
  // aside (another job's trial dir nested here may start the same).
  const std::string first = CheckpointName(attempt, 0);
  const size_t digits = 6, prefix = first.size() - digits;
  for (const auto& n : *names) {
    if (n.size() != first.size() || n.compare(0, prefix, first, 0, prefix) != 0 ||
        n.find_first_not_of("0123456789", prefix) != std::string::npos ||
        recorded.count(trial_dir + "/" + n) != 0)
      continue;
    RemoveAllAt(*trial, n).IgnoreError();  // best effort, as CleanupUncommitted
  }
}

Status RemoveCheckpoint(const std::string& trial_dir, const std::string& checkpoint_dir) {
  const std::string name = BaseName(checkpoint_dir);
  if (checkpoint_dir != trial_dir + "/" + name || name.rfind("checkpoint_", 0) != 0)
    return Status::InvalidArgument(checkpoint_dir + " is not a checkpoint of " + trial_dir);
  auto trial = OpenTrialDir(trial_dir);
  if (!trial.ok()) {
    if (trial.status().code() == Status::Code::kNotFound) return Status::Ok();
    return trial.status();
  }
  return RemoveAllAt(*trial, name);
}

}  // namespace traintl
