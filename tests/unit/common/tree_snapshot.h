// Test helpers for the symlink-safety tests (common, node, head): a "victim" directory
// outside the place under test, and a snapshot of a tree (type, mode, owner, contents of
// every entry, without following symlinks) to show that an operation left it unchanged.
//
// Thread-safety: plain functions; use from one test thread.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/file_util.h"

namespace traintl::testing {

// A fresh directory under /tmp, mode `mode`.
inline std::string MakeTempDir(const std::string& tag, mode_t mode = 0755) {
  std::string tmpl = "/tmp/traintl-" + tag + "-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
  ::chmod(tmpl.c_str(), mode);
  return tmpl;
}

// One line per entry below (and including) `path`: relative name, type, mode, owner, size
// and, for regular files, the contents; symlinks show their target. Sorted.
inline std::string Snapshot(const std::string& path) {
  std::vector<std::string> lines;
  struct Walker {
    std::vector<std::string>* out;
    void Walk(const std::string& full, const std::string& rel) {
      struct stat st;
      if (::lstat(full.c_str(), &st) != 0) {
        out->push_back(rel + " <missing>");
        return;
      }
      std::string line = rel + " mode=" + std::to_string(st.st_mode) +
                         " uid=" + std::to_string(st.st_uid) + " gid=" + std::to_string(st.st_gid);
      if (S_ISREG(st.st_mode)) {
        auto data = ReadFile(full);
        line += " file=" + (data.ok() ? *data : std::string("<unreadable>"));
      } else if (S_ISLNK(st.st_mode)) {
        char buf[4096];
        ssize_t n = ::readlink(full.c_str(), buf, sizeof buf);
        line += " link=" + std::string(buf, n > 0 ? static_cast<size_t>(n) : 0);
      }
      out->push_back(line);
      if (!S_ISDIR(st.st_mode)) return;
      DIR* d = ::opendir(full.c_str());
      if (d == nullptr) return;
      std::vector<std::string> names;
      while (struct dirent* e = ::readdir(d)) {
        std::string n = e->d_name;
        if (n != "." && n != "..") names.push_back(n);
      }
      ::closedir(d);
      for (const auto& n : names) Walk(full + "/" + n, rel + "/" + n);
    }
  } walker{&lines};
  walker.Walk(path, ".");
  std::sort(lines.begin(), lines.end());
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

// A root-only directory with a secret in it, as /root/.ssh would be.
inline std::string MakeVictim() {
  const std::string dir = MakeTempDir("victim", 0700);
  if (!WriteFileAtomic(dir + "/id_rsa", "secret", 0600).ok()) std::abort();
  if (!MakeDirs(dir + "/sub", 0700).ok()) std::abort();
  if (!WriteFileAtomic(dir + "/sub/keep", "keep", 0600).ok()) std::abort();
  return dir;
}

// A directory like /tmp: everyone may create entries in it (sticky, 1777).
inline std::string MakeSharedDir(const std::string& tag) { return MakeTempDir(tag, 01777); }

constexpr uid_t kNobodyUid = 65534;
constexpr gid_t kNogroupGid = 65534;

}  // namespace traintl::testing
