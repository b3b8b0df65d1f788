#include "cli/hash_cache.h"

#include <sys/stat.h>

#include <cstdio>
#include <sstream>
#include <vector>

#include "common/crypto.h"
#include "common/file_util.h"

namespace traintl {
namespace cli {
namespace {

constexpr const char* kFileName = "library-sha256";

// "<dev> <ino> <size> <mtime ns> <ctime ns>" of a regular file, or "".
std::string Identity(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return "";
  auto ns = [](const timespec& t) {
    return static_cast<long long>(t.tv_sec) * 1000000000LL + t.tv_nsec;
  };
  char buf[160];
  std::snprintf(buf, sizeof buf, "%llu %llu %lld %lld %lld",
                static_cast<unsigned long long>(st.st_dev),
                static_cast<unsigned long long>(st.st_ino), static_cast<long long>(st.st_size),
                ns(st.st_mtim), ns(st.st_ctim));
  return buf;
}

std::vector<std::string> ReadLines(const std::string& file) {
  std::vector<std::string> lines;
  auto text = ReadRegularFile(file, size_t{1} << 20);
  if (!text.ok()) return lines;
  std::istringstream in(*text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

}  // namespace

std::optional<std::string> CachedSha256(const std::string& cache_dir, const std::string& path) {
  if (cache_dir.empty()) return std::nullopt;
  const std::string id = Identity(path);
  if (id.empty()) return std::nullopt;
  const std::string abs = AbsolutePath(path);
  for (const std::string& line : ReadLines(JoinPath(cache_dir, kFileName))) {
    // "<identity> <sha256> <path>"
    if (line.size() < id.size() + 66 || line.compare(0, id.size(), id) != 0 ||
        line[id.size()] != ' ')
      continue;
    const std::string sha = line.substr(id.size() + 1, 64);
    if (IsSha256Hex(sha) && line.compare(id.size() + 66, std::string::npos, abs) == 0) return sha;
  }
  return std::nullopt;
}

void RememberSha256(const std::string& cache_dir, const std::string& path,
                    const std::string& sha256) {
  if (cache_dir.empty() || !IsSha256Hex(sha256)) return;
  const std::string id = Identity(path);
  const std::string abs = AbsolutePath(path);
  if (id.empty() || abs.find('\n') != std::string::npos) return;
  const std::string file = JoinPath(cache_dir, kFileName);
  std::vector<std::string> kept;
  for (std::string& line : ReadLines(file)) {
    // An older entry of the same path goes: only its newest build is worth keeping.
    if (line.size() > abs.size() &&
        line.compare(line.size() - abs.size() - 1, std::string::npos, " " + abs) == 0)
      continue;
    kept.push_back(std::move(line));
  }
  kept.push_back(id + " " + sha256 + " " + abs);
  std::string text;
  const size_t from = kept.size() > kMaxHashCacheEntries ? kept.size() - kMaxHashCacheEntries : 0;
  for (size_t i = from; i < kept.size(); ++i) text += kept[i] + "\n";
  if (!MakeDirs(cache_dir, 0700).ok()) return;
  (void)WriteFileAtomic(file, text, 0600);
}

}  // namespace cli
}  // namespace traintl
