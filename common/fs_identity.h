// FsIdentity and ScopedFsIdentity: file access on behalf of an unprivileged account.
//
// A root daemon whose workers run as another user (traintld --worker-user) still touches
// the directories those workers write: it merges their checkpoint files and deletes old
// checkpoints. Done as root, a symlink the worker planted (staging/x -> /root/.ssh) would
// make the daemon move or delete files the worker could never reach. ScopedFsIdentity
// switches the calling thread's filesystem uid, gid and groups to the worker's for the
// duration of such work, so the kernel checks every path as the worker would.
//
// Thread-safety: the switch is per thread (setfsuid/setfsgid and the raw setgroups system
// call are thread-scoped on Linux, unlike glibc's setgroups); use the object on the thread
// that made it, and do not post work to other threads expecting the identity to follow.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace traintl {

struct FsIdentity {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups; empty means just `gid`
};

class ScopedFsIdentity {
 public:
  // Switches to `id` when the process runs as root and `id` is not root; otherwise (and
  // for a null `id`) does nothing. Crashes when the switch fails halfway, since going on
  // with root's file access would be the very hole this closes.
  explicit ScopedFsIdentity(const FsIdentity* id);
  ~ScopedFsIdentity();  // restores root's identity on this thread

  ScopedFsIdentity(const ScopedFsIdentity&) = delete;
  ScopedFsIdentity& operator=(const ScopedFsIdentity&) = delete;

  bool active() const { return active_; }

  // Whether this process may switch to `id` (it needs CAP_SETUID and CAP_SETGID, which a
  // container or a service unit may have taken away); on false, `why` says what failed.
  // The daemon asks at start, so that a missing capability is a startup error rather
  // than a crash at the first checkpoint.
  static bool Supported(const FsIdentity& id, std::string* why);

 private:
  bool active_ = false;
  gid_t saved_gid_ = 0;
  std::vector<gid_t> saved_groups_;
};

}  // namespace traintl
