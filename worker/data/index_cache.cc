#include "worker/data/index_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "common/crypto.h"
#include "common/file_util.h"
#include "worker/data/http_client.h"

namespace traintl {
namespace data {
namespace index_cache_internal {
namespace {

constexpr char kMagic[8] = {'T', 'T', 'L', 'I', 'D', 'X', '0', '1'};
// An entry is refused beyond this (a 1 TB file of 1 MiB chunks takes 24 MB).
constexpr size_t kMaxEntryBytes = size_t{1} << 30;

uint64_t Fnv1a(const char* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(p[i]);
    h *= 0x100000001b3ull;
  }
  return h;
}

template <typename T>
void Put(std::string* s, T v) {
  s->append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <typename T>
bool Take(const std::string& s, size_t* at, T* v) {
  if (s.size() - *at < sizeof(T)) return false;
  std::memcpy(v, s.data() + *at, sizeof(T));
  *at += sizeof(T);
  return true;
}

}  // namespace

std::string EncodeEntry(const std::string& key, const std::vector<Chunk>& chunks) {
  std::string s(kMagic, sizeof kMagic);
  Put(&s, static_cast<uint64_t>(key.size()));
  s += key;
  Put(&s, static_cast<uint64_t>(chunks.size()));
  for (const Chunk& c : chunks) {
    Put(&s, c.offset);
    Put(&s, c.line);
    Put(&s, c.rows);
  }
  Put(&s, Fnv1a(s.data(), s.size()));
  return s;
}

bool DecodeEntry(const std::string& bytes, const std::string& key, int file_index,
                 uint64_t data_offset, uint64_t file_size, std::vector<Chunk>* chunks) {
  chunks->clear();
  constexpr size_t kSum = sizeof(uint64_t);
  if (bytes.size() < sizeof kMagic + kSum) return false;
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) return false;
  uint64_t sum;
  std::memcpy(&sum, bytes.data() + bytes.size() - kSum, kSum);
  if (sum != Fnv1a(bytes.data(), bytes.size() - kSum)) return false;
  const std::string body = bytes.substr(0, bytes.size() - kSum);
  size_t at = sizeof kMagic;
  uint64_t key_len = 0, n = 0;
  if (!Take(body, &at, &key_len) || key_len != key.size() || body.size() - at < key_len) {
    return false;
  }
  if (body.compare(at, key_len, key) != 0) return false;
  at += key_len;
  if (!Take(body, &at, &n) || n > (body.size() - at) / 24 || body.size() - at != n * 24) {
    return false;
  }
  chunks->reserve(n);
  uint64_t next_offset = data_offset;
  int64_t next_line = 1;
  for (uint64_t i = 0; i < n; ++i) {
    Chunk c;
    c.file = file_index;
    Take(body, &at, &c.offset);
    Take(body, &at, &c.line);
    Take(body, &at, &c.rows);
    // In order, within the file, each with rows: what a scan gives.
    if (c.offset < next_offset || c.line < next_line || c.rows <= 0 ||
        (file_size > 0 && c.offset >= file_size)) {
      chunks->clear();
      return false;
    }
    next_offset = c.offset + 1;
    next_line = c.line;
    chunks->push_back(c);
  }
  return true;
}

namespace {
std::atomic<int64_t> racy_window_nanos{2'000'000'000};
std::atomic<size_t> max_entries{kDefaultMaxEntries};
}  // namespace

void SetRacyWindowNanosForTesting(int64_t nanos) { racy_window_nanos = nanos; }
void SetMaxEntriesForTesting(size_t n) { max_entries = n; }

size_t PruneEntries(const std::string& dir, size_t keep, const std::set<std::string>& spare) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  std::vector<std::pair<int64_t, std::string>> entries;  // (last use, name without .idx)
  std::vector<std::string> locks;                        // names without .lock
  while (const struct dirent* de = ::readdir(d)) {
    const std::string name = de->d_name;
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".lock") == 0) {
      locks.push_back(name.substr(0, name.size() - 5));
      continue;
    }
    if (name.find(".idx.tmp-") != std::string::npos) {
      // Left by a writer that died between write and rename: gone after an hour.
      struct stat st;
      if (::fstatat(::dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
          ::time(nullptr) - st.st_mtim.tv_sec > 3600) {
        ::unlinkat(::dirfd(d), de->d_name, 0);
      }
      continue;
    }
    if (name.size() <= 4 || name.compare(name.size() - 4, 4, ".idx") != 0) continue;
    struct stat st;
    if (::fstatat(::dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    entries.emplace_back(
        static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec,
        name.substr(0, name.size() - 4));
  }
  ::closedir(d);
  // Removes `base`'s entry (when `idx`) and lock, unless a rank holds the lock now (it is
  // scanning that file). A rank that opened the lock just before its unlink locks a file
  // nobody else will: at worst two ranks scan the same file, as without a cache.
  auto remove = [&dir](const std::string& base, bool idx) {
    const std::string lock_path = dir + "/" + base + ".lock";
    const int lock = ::open(lock_path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (lock >= 0 && ::flock(lock, LOCK_EX | LOCK_NB) != 0) {
      ::close(lock);
      return false;
    }
    const bool removed = idx ? ::unlink((dir + "/" + base + ".idx").c_str()) == 0 : true;
    ::unlink(lock_path.c_str());
    if (lock >= 0) ::close(lock);
    return removed;
  };
  size_t removed = 0;
  std::sort(entries.begin(), entries.end());
  size_t excess = entries.size() > keep ? entries.size() - keep : 0;
  for (size_t i = 0; i < entries.size() && excess > 0; ++i) {
    // Used by the build that prunes (a dataset of more files than `keep`): they stay. By
    // name, not by time: a file system's clock may be coarser than ours, or skewed (NFS).
    if (spare.count(entries[i].second) != 0) continue;
    if (remove(entries[i].second, true)) ++removed;
    --excess;
  }
  // The locks of files never stored (changed within the racy window, or their scan failed).
  std::set<std::string> stored;
  for (const auto& e : entries) stored.insert(e.second);
  for (const auto& base : locks) {
    if (stored.count(base) == 0) remove(base, false);
  }
  return removed;
}

}  // namespace index_cache_internal

namespace {

using index_cache_internal::DecodeEntry;
using index_cache_internal::EncodeEntry;

std::string HostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

std::string Nanos(const struct timespec& t) {
  return std::to_string(t.tv_sec) + "." + std::to_string(t.tv_nsec);
}

// A file's identity for the key, and its size; nullopt when it is not to be cached.
struct Identity {
  std::string text;
  uint64_t size = 0;
  int64_t changed_nanos = -1;  // local files: the later of mtime and ctime
};

int64_t ToNanos(const struct timespec& t) {
  return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

std::optional<Identity> Identify(const DataFile& file, const HttpOptions& http,
                                 const std::atomic<bool>* cancel) {
  if (file.http) {
    auto reader = HttpBodyReader::Open(file.name, 0, http, cancel);
    if (!reader.ok() || !(*reader)->total_size() || (*reader)->validator().empty()) {
      return std::nullopt;
    }
    const uint64_t size = *(*reader)->total_size();
    return Identity{"url=" + file.name + "\nsize=" + std::to_string(size) + "\n" +
                        (*reader)->validator() + "\n",
                    size};
  }
  if (file.path.rfind("/proc/", 0) == 0) return std::nullopt;
  struct stat st;
  if (::stat(file.path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  return Identity{
      "path=" + file.path + "\ndev=" + std::to_string(st.st_dev) +
          "\nino=" + std::to_string(st.st_ino) + "\nsize=" + std::to_string(st.st_size) +
          "\nmtime=" + Nanos(st.st_mtim) + "\nctime=" + Nanos(st.st_ctim) + "\n",
      static_cast<uint64_t>(st.st_size), std::max(ToNanos(st.st_mtim), ToNanos(st.st_ctim))};
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

Result<std::string> ReadEntry(const std::string& path) {
  return ReadRegularFile(path, index_cache_internal::kMaxEntryBytes);
}

// Writes the entry under a temporary name and renames it into place; false on failure
// (the cache is then just not filled).
bool StoreEntry(const std::string& path, const std::string& bytes) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp =
      path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return false;
  bool ok = true;
  for (size_t off = 0; ok && off < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) ok = false;
    if (n > 0) off += static_cast<size_t>(n);
  }
  ok = ::close(fd) == 0 && ok;
  if (ok) ok = ::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) ::unlink(tmp.c_str());
  return ok;
}

struct FileEntry {
  int index = 0;
  std::optional<Identity> identity;
  std::string key;
  std::string name;  // of the entry file, without ".idx"
  std::string entry_path;
  std::string lock_path;
  bool rejected = false;  // counted once
};

class Builder {
 public:
  Builder(const std::vector<FileInfo>& files, Format format, size_t chunk_bytes,
          const HttpOptions& http, const ScanFileFn& scan, const std::atomic<bool>* cancel,
          IndexStats* stats)
      : files_(files),
        format_(format),
        chunk_bytes_(chunk_bytes),
        http_(http),
        scan_(scan),
        cancel_(cancel),
        stats_(stats) {}

  Result<std::vector<Chunk>> Run(const std::string& dir) {
    std::vector<std::optional<std::vector<Chunk>>> done(files_.size());
    // Only the text formats' index takes a scan; .npy and Parquet chunks come from the
    // header or footer each rank has read already.
    const bool needs_scan = format_ == Format::kCsv || format_ == Format::kJsonl;
    const bool shared = !dir.empty() && needs_scan && MakeDirs(dir, 0700).ok();
    std::vector<FileEntry> entries;
    if (shared) {
      const std::string host = HostName();
      for (size_t i = 0; i < files_.size(); ++i) {
        FileEntry e;
        e.index = static_cast<int>(i);
        e.identity = Identify(files_[i].file, http_, cancel_);
        if (!e.identity) continue;  // scanned below
        e.key = "traintl row index 1\nformat=" + std::string(FormatName(format_)) +
                "\nchunk_bytes=" + std::to_string(chunk_bytes_) +
                "\ndata_offset=" + std::to_string(files_[i].data_offset) +
                "\ndata_line=" + std::to_string(files_[i].data_line) + "\nhost=" + host + "\n" +
                e.identity->text;
        e.name = Sha256Hex(e.key).substr(0, 32);
        e.entry_path = dir + "/" + e.name + ".idx";
        e.lock_path = dir + "/" + e.name + ".lock";
        std::vector<Chunk> chunks;
        if (Load(e, &chunks)) {
          done[i] = std::move(chunks);
        } else {
          entries.push_back(std::move(e));
        }
      }
      // The files no other rank is scanning now, then those that one is.
      std::vector<std::pair<size_t, Fd>> waiting;
      for (size_t k = 0; k < entries.size(); ++k) {
        Fd lock = OpenLock(entries[k]);
        if (lock.get() < 0) continue;  // scanned below, unshared
        if (::flock(lock.get(), LOCK_EX | LOCK_NB) == 0) {
          TRAINTL_ASSIGN_OR_RETURN(done[entries[k].index], BuildLocked(entries[k]));
        } else if (errno == EWOULDBLOCK || errno == EINTR) {
          waiting.emplace_back(k, std::move(lock));
        }  // else: flock does not work here (ENOLCK): scanned below, unshared
      }
      for (auto& [k, lock] : waiting) {
        for (;;) {
          if (cancel_ != nullptr && cancel_->load()) return Status::Unavailable("cancelled");
          if (::flock(lock.get(), LOCK_EX | LOCK_NB) == 0) break;
          if (errno != EWOULDBLOCK && errno != EINTR) break;  // then built without it
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        TRAINTL_ASSIGN_OR_RETURN(done[entries[k].index], BuildLocked(entries[k]));
        lock = Fd();  // unlocks
      }
    }
    if (stored_ > 0) {
      index_cache_internal::PruneEntries(dir, index_cache_internal::max_entries, used_);
    }
    std::vector<Chunk> out;
    for (size_t i = 0; i < files_.size(); ++i) {
      if (!done[i]) {
        TRAINTL_ASSIGN_OR_RETURN(done[i], scan_(static_cast<int>(i)));
        ++stats_->files_scanned;
      }
      out.insert(out.end(), done[i]->begin(), done[i]->end());
    }
    return out;
  }

 private:
  // e's lock file, created if missing. One that another account left cannot be opened (the
  // node ran its workers as another user before; the agent hands the directory, not its
  // files, to the new one): the directory is this account's, so it is replaced. Else every
  // rank of every later job would scan that file unshared, for good. The entry it guards is
  // unreadable too; a build replaces it by rename.
  static Fd OpenLock(const FileEntry& e) {
    constexpr int kFlags = O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW;
    Fd lock(::open(e.lock_path.c_str(), kFlags, 0600));
    if (lock.get() < 0 && errno == EACCES && ::unlink(e.lock_path.c_str()) == 0) {
      lock = Fd(::open(e.lock_path.c_str(), kFlags, 0600));
    }
    return lock;
  }

  bool Load(FileEntry& e, std::vector<Chunk>* chunks) {
    auto bytes = ReadEntry(e.entry_path);
    if (!bytes.ok()) return false;
    if (!DecodeEntry(*bytes, e.key, e.index, files_[static_cast<size_t>(e.index)].data_offset,
                     e.identity->size, chunks)) {
      if (!e.rejected) ++stats_->entries_rejected;
      e.rejected = true;
      return false;
    }
    ++stats_->files_loaded;
    // Its last use, which pruning keeps the most recent of.
    ::utimensat(AT_FDCWD, e.entry_path.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
    used_.insert(e.name);
    return true;
  }

  // With e's lock held: the entry another rank stored meanwhile, else a scan, stored.
  Result<std::vector<Chunk>> BuildLocked(FileEntry& e) {
    std::vector<Chunk> chunks;
    if (Load(e, &chunks)) return chunks;
    TRAINTL_ASSIGN_OR_RETURN(chunks, scan_(e.index));
    ++stats_->files_scanned;
    // Stored only when the file is still what was scanned.
    auto now = Identify(files_[static_cast<size_t>(e.index)].file, http_, cancel_);
    if (!now || now->text != e.identity->text) return chunks;
    if (now->changed_nanos >= 0) {
      struct timespec t;
      ::clock_gettime(CLOCK_REALTIME, &t);
      if (ToNanos(t) - now->changed_nanos < index_cache_internal::racy_window_nanos.load()) {
        return chunks;
      }
    }
    if (StoreEntry(e.entry_path, EncodeEntry(e.key, chunks))) {
      ++stats_->files_stored;
      ++stored_;
      used_.insert(e.name);
    }
    return chunks;
  }

  const std::vector<FileInfo>& files_;
  const Format format_;
  const size_t chunk_bytes_;
  const HttpOptions& http_;
  const ScanFileFn& scan_;
  const std::atomic<bool>* const cancel_;
  IndexStats* const stats_;
  int stored_ = 0;              // entries this build stored
  std::set<std::string> used_;  // the names of those it loaded or stored: never pruned
};

}  // namespace

Result<std::vector<Chunk>> BuildSharedIndex(const std::string& dir,
                                            const std::vector<FileInfo>& files, Format format,
                                            size_t chunk_bytes, const HttpOptions& http,
                                            const ScanFileFn& scan, const std::atomic<bool>* cancel,
                                            IndexStats* stats) {
  return Builder(files, format, chunk_bytes, http, scan, cancel, stats).Run(dir);
}

}  // namespace data
}  // namespace traintl
