#include "common/fs_identity.h"

#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace traintl {
namespace {

// glibc's setgroups() changes every thread of the process; the system call changes only
// this one, which is what a scoped, per-thread switch needs.
int ThreadSetGroups(const std::vector<gid_t>& groups) {
  return static_cast<int>(::syscall(SYS_setgroups, groups.size(), groups.data()));
}

[[noreturn]] void Die(const char* what) {
  std::perror(what);
  std::abort();
}

}  // namespace

ScopedFsIdentity::ScopedFsIdentity(const FsIdentity* id) {
  if (id == nullptr || id->uid == 0 || ::geteuid() != 0) return;
  int n = ::getgroups(0, nullptr);
  if (n < 0) Die("getgroups");
  saved_groups_.resize(static_cast<size_t>(n));
  if (n > 0 && ::getgroups(n, saved_groups_.data()) < 0) Die("getgroups");
  saved_gid_ = static_cast<gid_t>(::setfsgid(static_cast<gid_t>(-1)));
  std::vector<gid_t> groups = id->groups.empty() ? std::vector<gid_t>{id->gid} : id->groups;
  // Groups and gid first: once the fsuid is not 0 the thread loses CAP_DAC_OVERRIDE but
  // keeps CAP_SETGID, so the order only matters for clarity. setfsuid cannot report
  // failure directly: read the value back.
  if (ThreadSetGroups(groups) != 0) Die("setgroups");
  ::setfsgid(id->gid);
  ::setfsuid(id->uid);
  if (static_cast<uid_t>(::setfsuid(static_cast<uid_t>(-1))) != id->uid ||
      static_cast<gid_t>(::setfsgid(static_cast<gid_t>(-1))) != id->gid)
    Die("setfsuid/setfsgid");
  active_ = true;
}

bool ScopedFsIdentity::Supported(const FsIdentity& id, std::string* why) {
  if (id.uid == 0 || ::geteuid() != 0) return true;  // nothing to switch
  int n = ::getgroups(0, nullptr);
  std::vector<gid_t> saved(static_cast<size_t>(n > 0 ? n : 0));
  if (n < 0 || (n > 0 && ::getgroups(n, saved.data()) < 0)) {
    *why = std::string("getgroups: ") + std::strerror(errno);
    return false;
  }
  if (ThreadSetGroups(id.groups.empty() ? std::vector<gid_t>{id.gid} : id.groups) != 0) {
    *why = std::string("setgroups: ") + std::strerror(errno);
    return false;
  }
  if (ThreadSetGroups(saved) != 0) Die("setgroups (restore)");
  ::setfsuid(id.uid);
  const bool switched = static_cast<uid_t>(::setfsuid(static_cast<uid_t>(-1))) == id.uid;
  ::setfsuid(0);
  if (!switched) *why = "setfsuid: not permitted (CAP_SETUID missing)";
  return switched;
}

ScopedFsIdentity::~ScopedFsIdentity() {
  if (!active_) return;
  ::setfsuid(0);
  ::setfsgid(saved_gid_);
  if (static_cast<uid_t>(::setfsuid(static_cast<uid_t>(-1))) != 0) Die("setfsuid(0)");
  if (ThreadSetGroups(saved_groups_) != 0) Die("setgroups (restore)");
}

}  // namespace traintl
