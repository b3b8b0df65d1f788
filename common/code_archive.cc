#include "common/code_archive.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <utility>

#include "common/crypto.h"
#include "common/file_util.h"
#include "common/ignore_rules.h"
#include "common/safe_fs.h"

namespace traintl {
namespace {

constexpr size_t kBlock = 512;
constexpr size_t kNameLen = 100;
constexpr size_t kPrefixLen = 155;
// The 11 octal digits of ustar's size field.
constexpr uint64_t kMaxEntrySize = (1ull << 33) - 1;
constexpr size_t kMaxIgnoreFileBytes = 1 << 20;

// Header field offsets (POSIX ustar).
constexpr size_t kOffMode = 100;
constexpr size_t kOffUid = 108;
constexpr size_t kOffGid = 116;
constexpr size_t kOffSize = 124;
constexpr size_t kOffMtime = 136;
constexpr size_t kOffChksum = 148;
constexpr size_t kOffType = 156;
constexpr size_t kOffMagic = 257;
constexpr size_t kOffVersion = 263;
constexpr size_t kOffDevMajor = 329;
constexpr size_t kOffDevMinor = 337;
constexpr size_t kOffPrefix = 345;

uint64_t RoundUpToBlock(uint64_t n) { return (n + kBlock - 1) / kBlock * kBlock; }

std::string Errno(int err) { return std::strerror(err); }

// "100 MiB", "130.2 MiB", "12.5 KiB", "300 bytes".
std::string FormatSize(uint64_t bytes) {
  static const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + (bytes == 1 ? " byte" : " bytes");
  double value = static_cast<double>(bytes);
  int unit = -1;
  uint64_t divisor = 1;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    divisor *= 1024;
    ++unit;
  }
  char buf[64];
  if (bytes % divisor == 0) {
    std::snprintf(buf, sizeof buf, "%llu %s", static_cast<unsigned long long>(bytes / divisor),
                  kUnits[unit]);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s", value, kUnits[unit]);
  }
  return buf;
}

// A name as it may appear in a message: control bytes escaped, so a hostile archive cannot
// forge lines in a log.
std::string Printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f || c == '\\' || c == '"') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return "\"" + out + "\"";
}

std::string FileTypeName(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "a special file";
}

// ---------------------------------------------------------------------------------------
// Packing.

struct Entry {
  std::string path;  // relative to the root, no trailing '/'
  bool is_dir = false;
  bool executable = false;
  std::string source;  // a file's real path (symlinks resolved)
  uint64_t size = 0;   // as stat'd during the walk; the read size once packed
};

// Splits a ustar name (a directory's with its trailing '/') into prefix and name fields.
// Any split works for readers; the rightmost '/' that fits makes it deterministic.
bool SplitUstarName(const std::string& full, std::string* prefix, std::string* name) {
  if (full.size() <= kNameLen) {
    prefix->clear();
    *name = full;
    return true;
  }
  // The '/' at index i goes to neither field: prefix = full[0, i), name = full[i + 1, end),
  // which must not be empty (a directory's trailing '/' is never the split).
  for (size_t i = std::min(full.size() - 1, kPrefixLen); i > 0; --i) {
    const size_t name_len = full.size() - i - 1;
    if (name_len > kNameLen) return false;
    if (full[i] == '/' && name_len > 0) {
      *prefix = full.substr(0, i);
      *name = full.substr(i + 1);
      return true;
    }
  }
  return false;
}

void PutOctal(char* field, size_t width, uint64_t value) {
  // width - 1 zero-padded digits and a NUL, as GNU tar writes them.
  std::snprintf(field, width, "%0*llo", static_cast<int>(width - 1),
                static_cast<unsigned long long>(value));
}

std::string MakeHeader(const std::string& prefix, const std::string& name, bool is_dir,
                       bool executable, uint64_t size) {
  std::string h(kBlock, '\0');
  char* b = h.data();
  std::memcpy(b, name.data(), name.size());
  PutOctal(b + kOffMode, 8, (is_dir || executable) ? 0755 : 0644);
  PutOctal(b + kOffUid, 8, 0);
  PutOctal(b + kOffGid, 8, 0);
  PutOctal(b + kOffSize, 12, size);
  PutOctal(b + kOffMtime, 12, 0);
  b[kOffType] = is_dir ? '5' : '0';
  std::memcpy(b + kOffMagic, "ustar", 6);  // with its NUL
  std::memcpy(b + kOffVersion, "00", 2);
  PutOctal(b + kOffDevMajor, 8, 0);
  PutOctal(b + kOffDevMinor, 8, 0);
  std::memcpy(b + kOffPrefix, prefix.data(), prefix.size());
  std::memset(b + kOffChksum, ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::snprintf(b + kOffChksum, 8, "%06o", sum);  // six digits, NUL, and the space kept
  b[kOffChksum + 7] = ' ';
  return h;
}

class Packer {
 public:
  Packer(std::string root, const IgnoreRules* always, const IgnoreRules* user)
      : root_(std::move(root)), always_(always), user_(user) {}

  // Collects the entries below `real_dir` (a path without symlinks), named below `rel_dir`.
  // `ancestors` holds the real directories on the current path, to refuse cycles.
  Status Walk(const std::string& real_dir, const std::string& rel_dir,
              std::vector<std::pair<dev_t, ino_t>>* ancestors) {
    DIR* d = ::opendir(real_dir.c_str());
    if (d == nullptr) return ReadError(rel_dir.empty() ? "." : rel_dir, "directory", errno);
    std::vector<std::string> names;
    errno = 0;
    while (struct dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(std::move(n));
    }
    const int read_errno = errno;
    ::closedir(d);
    if (read_errno != 0) return ReadError(rel_dir.empty() ? "." : rel_dir, "directory", read_errno);
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      const std::string rel = rel_dir.empty() ? name : rel_dir + "/" + name;
      const std::string full = (real_dir == "/" ? "" : real_dir) + "/" + name;
      TRAINTL_RETURN_IF_ERROR(AddEntry(full, rel, ancestors));
    }
    return Status::Ok();
  }

  std::vector<Entry>& entries() { return entries_; }

 private:
  bool Excluded(const std::string& rel, bool is_dir) const {
    return always_->MatchEntry(rel, is_dir) || user_->MatchEntry(rel, is_dir);
  }

  bool Inside(const std::string& real) const {
    if (root_ == "/") return true;
    return real == root_ ||
           (real.size() > root_.size() && real.compare(0, root_.size(), root_) == 0 &&
            real[root_.size()] == '/');
  }

  static Status ReadError(const std::string& rel, const char* what, int err) {
    std::string msg = rel + ": cannot read this " + what + ": " + Errno(err);
    if (err == EACCES || err == EPERM) return Status::PermissionDenied(msg);
    if (err == ENOENT) return Status::NotFound(msg + " (removed while packing?)");
    return Status::InvalidArgument(msg);
  }

  // `link_shown` is the symlink's target as messages show it, empty for a plain directory.
  Status AddDir(const std::string& real, const std::string& rel, const struct stat& st,
                const std::string& link_shown, std::vector<std::pair<dev_t, ino_t>>* ancestors) {
    const std::pair<dev_t, ino_t> id{st.st_dev, st.st_ino};
    if (std::find(ancestors->begin(), ancestors->end(), id) != ancestors->end()) {
      // Without a symlink only a bind mount can make a directory its own ancestor.
      if (link_shown.empty()) {
        return Status::InvalidArgument(rel + ": a directory mounted inside itself (a cycle)");
      }
      return Status::InvalidArgument(rel + ": a symlink to " + link_shown +
                                     ", a directory that contains it (a cycle)");
    }
    entries_.push_back(Entry{rel, true, false, "", 0});
    ancestors->push_back(id);
    Status s = Walk(real, rel, ancestors);
    ancestors->pop_back();
    return s;
  }

  void AddFile(const std::string& real, const std::string& rel, const struct stat& st) {
    entries_.push_back(
        Entry{rel, false, (st.st_mode & 0111) != 0, real, static_cast<uint64_t>(st.st_size)});
  }

  Status AddEntry(const std::string& full, const std::string& rel,
                  std::vector<std::pair<dev_t, ino_t>>* ancestors) {
    struct stat st;
    if (::lstat(full.c_str(), &st) != 0) return ReadError(rel, "entry", errno);
    if (S_ISDIR(st.st_mode)) {
      if (Excluded(rel, true)) return Status::Ok();
      return AddDir(full, rel, st, "", ancestors);
    }
    if (S_ISREG(st.st_mode)) {
      if (!Excluded(rel, false)) AddFile(full, rel, st);
      return Status::Ok();
    }
    if (!S_ISLNK(st.st_mode)) {
      if (Excluded(rel, false)) return Status::Ok();
      return Status::InvalidArgument(rel + ": " + FileTypeName(st.st_mode) +
                                     "; only regular files, directories and symlinks to them "
                                     "can be packed (exclude it with \"excludes\")");
    }
    // A symlink: excludes see it as what it points to ("data/" excludes a link to a dir).
    struct stat target;
    const bool resolved = ::stat(full.c_str(), &target) == 0;
    if (Excluded(rel, resolved && S_ISDIR(target.st_mode))) return Status::Ok();
    char text[PATH_MAX + 1];
    ssize_t n = ::readlink(full.c_str(), text, PATH_MAX);
    const std::string link_text(text, n > 0 ? static_cast<size_t>(n) : 0);
    char* real_c = ::realpath(full.c_str(), nullptr);
    if (real_c == nullptr || !resolved) {
      const int err = errno;
      if (real_c != nullptr) std::free(real_c);
      if (err == ENOENT || err == ENOTDIR) {
        return Status::InvalidArgument(rel + ": a dangling symlink to " + link_text);
      }
      return Status::InvalidArgument(rel + ": a symlink to " + link_text +
                                     " that cannot be resolved: " + Errno(err));
    }
    const std::string real(real_c);
    std::free(real_c);
    const std::string shown = real == link_text ? link_text : link_text + " (" + real + ")";
    if (!Inside(real)) {
      return Status::InvalidArgument(
          rel + ": a symlink to " + shown +
          ", outside the working_dir; copy what it points to into the working_dir or exclude "
          "it with \"excludes\"");
    }
    if (S_ISDIR(target.st_mode)) return AddDir(real, rel, target, shown, ancestors);
    if (S_ISREG(target.st_mode)) {
      AddFile(real, rel, target);
      return Status::Ok();
    }
    return Status::InvalidArgument(rel + ": a symlink to " + shown + ", " +
                                   FileTypeName(target.st_mode) +
                                   "; only regular files and directories can be packed");
  }

  const std::string root_;
  const IgnoreRules* always_;
  const IgnoreRules* user_;
  std::vector<Entry> entries_;
};

uint64_t PackedSize(const std::vector<Entry>& entries) {
  uint64_t total = 2 * kBlock;
  for (const Entry& e : entries) total += kBlock + RoundUpToBlock(e.size);
  return total;
}

Status OverLimit(const std::vector<Entry>& entries, uint64_t max_bytes) {
  std::vector<const Entry*> files;
  for (const Entry& e : entries) {
    if (!e.is_dir) files.push_back(&e);
  }
  const size_t n = std::min<size_t>(3, files.size());
  std::partial_sort(files.begin(), files.begin() + n, files.end(),
                    [](const Entry* a, const Entry* b) {
                      return a->size != b->size ? a->size > b->size : a->path < b->path;
                    });
  std::string msg = "working_dir is " + FormatSize(PackedSize(entries)) + " packed, over the " +
                    FormatSize(max_bytes) +
                    " limit; exclude large files with \"excludes\" or .gitignore";
  for (size_t i = 0; i < n; ++i) {
    msg += (i == 0 ? " (largest: " : ", ") + files[i]->path + " " + FormatSize(files[i]->size);
  }
  if (n > 0) msg += ")";
  return Status::ResourceExhausted(msg);
}

// Appends the contents of the regular file `e.source` to `out`, reading at most `budget`
// bytes plus one (to notice a file that grew past the limit); sets *read_bytes.
Status AppendFile(const Entry& e, uint64_t budget, std::string* out, uint64_t* read_bytes) {
  // O_NONBLOCK: a FIFO swapped in after the walk must not hang the CLI.
  int fd = ::open(e.source.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    std::string msg = e.path + ": cannot read this file: " + Errno(err);
    return err == EACCES || err == EPERM ? Status::PermissionDenied(msg)
                                         : Status::InvalidArgument(msg);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument(e.path + ": no longer a regular file (changed while packing)");
  }
  const size_t start = out->size();
  const size_t chunk = 1 << 16;
  for (;;) {
    const uint64_t got = out->size() - start;
    if (got > budget) break;
    const size_t want = static_cast<size_t>(std::min<uint64_t>(chunk, budget + 1 - got));
    out->resize(start + got + want);
    ssize_t r = ::read(fd, out->data() + start + got, want);
    if (r < 0 && errno == EINTR) {
      out->resize(start + got);
      continue;
    }
    if (r <= 0) {
      const int err = errno;
      out->resize(start + got);
      if (r < 0) {
        ::close(fd);
        return Status::InvalidArgument(e.path + ": cannot read this file: " + Errno(err));
      }
      break;
    }
    out->resize(start + got + static_cast<size_t>(r));
  }
  ::close(fd);
  *read_bytes = out->size() - start;
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------
// Unpacking.

// A NUL-terminated (or full) header field; false when bytes other than NUL follow the
// first NUL, which readers differ on and a packer never writes.
bool ReadStringField(const char* p, size_t width, std::string* out) {
  size_t len = 0;
  while (len < width && p[len] != '\0') ++len;
  for (size_t i = len; i < width; ++i) {
    if (p[i] != '\0') return false;
  }
  out->assign(p, len);
  return true;
}

bool ReadOctalField(const char* p, size_t width, uint64_t* out) {
  size_t i = 0;
  while (i < width && p[i] == ' ') ++i;
  uint64_t v = 0;
  size_t digits = 0;
  for (; i < width && p[i] >= '0' && p[i] <= '7'; ++i, ++digits) {
    if (v > (UINT64_MAX >> 3)) return false;
    v = (v << 3) | static_cast<uint64_t>(p[i] - '0');
  }
  if (digits == 0) return false;
  for (; i < width; ++i) {
    if (p[i] != ' ' && p[i] != '\0') return false;
  }
  *out = v;
  return true;
}

std::string TypeFlagName(char t) {
  switch (t) {
    case '1':
      return "a hard link";
    case '2':
      return "a symlink";
    case '3':
      return "a character device";
    case '4':
      return "a block device";
    case '6':
      return "a FIFO";
    case '7':
      return "a contiguous file";
    case 'x':
    case 'g':
      return "a pax extended header";
    case 'L':
    case 'K':
      return "a GNU long name";
    default: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "an entry of type 0x%02x", static_cast<unsigned char>(t));
      return buf;
    }
  }
}

class Unpacker {
 public:
  Unpacker(const std::string& dest, uint64_t max_bytes) : dest_(dest), max_bytes_(max_bytes) {}

  Status Run(const std::string& bytes) {
    size_t off = 0;
    for (;;) {
      if (bytes.size() - off < kBlock) {
        return Status::InvalidArgument("truncated archive: no end-of-archive marker after " +
                                       std::to_string(off) + " bytes");
      }
      const char* h = bytes.data() + off;
      if (std::all_of(h, h + kBlock, [](char c) { return c == '\0'; })) break;
      TRAINTL_RETURN_IF_ERROR(UnpackEntry(bytes, &off));
    }
    for (const std::string& d : dirs_to_sync_) TRAINTL_RETURN_IF_ERROR(FsyncDir(d));
    return Status::Ok();
  }

 private:
  // Unpacks the entry whose header is at *off and moves *off past its data.
  Status UnpackEntry(const std::string& bytes, size_t* off) {
    const char* h = bytes.data() + *off;
    const std::string at = "archive entry at offset " + std::to_string(*off);
    uint64_t stored_sum = 0;
    if (!ReadOctalField(h + kOffChksum, 8, &stored_sum)) {
      return Status::InvalidArgument(at + ": not a ustar header (bad checksum field)");
    }
    uint64_t sum = 0;
    int64_t signed_sum = 0;  // some old tars summed signed chars
    for (size_t i = 0; i < kBlock; ++i) {
      const bool in_chksum = i >= kOffChksum && i < kOffChksum + 8;
      sum += in_chksum ? ' ' : static_cast<unsigned char>(h[i]);
      signed_sum += in_chksum ? ' ' : static_cast<signed char>(h[i]);
    }
    if (stored_sum != sum && static_cast<int64_t>(stored_sum) != signed_sum) {
      return Status::InvalidArgument(at + ": header checksum mismatch");
    }
    if (std::memcmp(h + kOffMagic, "ustar", 6) != 0 || std::memcmp(h + kOffVersion, "00", 2) != 0) {
      return Status::InvalidArgument(at + ": not a POSIX ustar header");
    }
    std::string name;
    std::string prefix;
    if (!ReadStringField(h, kNameLen, &name) ||
        !ReadStringField(h + kOffPrefix, kPrefixLen, &prefix)) {
      std::string raw(h, kNameLen);
      return Status::InvalidArgument(at + ": a name with a NUL inside it " + Printable(raw));
    }
    const std::string full = prefix.empty() ? name : prefix + "/" + name;
    const std::string what = "archive entry " + Printable(full);
    const char type = h[kOffType];
    const bool is_dir = type == '5';
    if (!is_dir && type != '0' && type != '\0') {
      return Status::InvalidArgument(what + ": " + TypeFlagName(type) +
                                     "; only regular files and directories are allowed");
    }
    uint64_t size = 0;
    if (!ReadOctalField(h + kOffSize, 12, &size)) {
      return Status::InvalidArgument(what + ": bad size field");
    }
    uint64_t mode = 0;
    if (!ReadOctalField(h + kOffMode, 8, &mode)) {
      return Status::InvalidArgument(what + ": bad mode field");
    }
    const size_t data_off = *off + kBlock;
    if (size > bytes.size() - data_off || RoundUpToBlock(size) > bytes.size() - data_off) {
      return Status::InvalidArgument(what + ": truncated archive (" + std::to_string(size) +
                                     " bytes of data announced)");
    }
    std::string path;
    TRAINTL_RETURN_IF_ERROR(CheckPath(full, is_dir, what, &path));
    if (!seen_.insert(path).second) return Status::InvalidArgument(what + ": a duplicate entry");
    TRAINTL_RETURN_IF_ERROR(MakeParents(path, what));
    if (is_dir) {
      TRAINTL_RETURN_IF_ERROR(MakeDir(path, what));
    } else {
      total_ += size;
      if (total_ > max_bytes_) {
        return Status::ResourceExhausted(what + ": the archive unpacks to more than " +
                                         FormatSize(max_bytes_));
      }
      TRAINTL_RETURN_IF_ERROR(
          WriteFile(path, bytes.data() + data_off, size, (mode & 0111) != 0, what));
      files_.insert(path);
    }
    *off = data_off + RoundUpToBlock(size);
    return Status::Ok();
  }

  static Status CheckPath(const std::string& full, bool is_dir, const std::string& what,
                          std::string* path) {
    if (full.empty()) return Status::InvalidArgument(what + ": an empty name");
    if (full[0] == '/') return Status::InvalidArgument(what + ": an absolute path");
    std::string p = full;
    if (p.back() == '/') {
      if (!is_dir) return Status::InvalidArgument(what + ": a file name ending in '/'");
      p.pop_back();
    }
    size_t start = 0;
    while (start <= p.size()) {
      size_t slash = p.find('/', start);
      if (slash == std::string::npos) slash = p.size();
      const std::string c = p.substr(start, slash - start);
      if (c == "..") return Status::InvalidArgument(what + ": a \"..\" component");
      if (c.empty() || c == ".") {
        return Status::InvalidArgument(what + ": an empty or \".\" component");
      }
      start = slash + 1;
    }
    *path = p;
    return Status::Ok();
  }

  // Directories an entry needs but the archive did not list before it (another packer may
  // leave them out) are created too; a parent that is a file of the archive is refused.
  Status MakeParents(const std::string& path, const std::string& what) {
    for (size_t slash = path.find('/'); slash != std::string::npos;
         slash = path.find('/', slash + 1)) {
      const std::string parent = path.substr(0, slash);
      if (dirs_.count(parent) != 0) continue;
      if (files_.count(parent) != 0) {
        return Status::InvalidArgument(what + ": below " + Printable(parent) +
                                       ", a file of the archive");
      }
      TRAINTL_RETURN_IF_ERROR(MakeDir(parent, what));
    }
    return Status::Ok();
  }

  Status MakeDir(const std::string& path, const std::string& what) {
    if (dirs_.count(path) != 0) return Status::Ok();  // created as a parent earlier
    const std::string full = dest_ + "/" + path;
    if (::mkdir(full.c_str(), 0700) != 0) {
      const int err = errno;
      if (err == EEXIST) return Status::InvalidArgument(what + ": conflicts with a file");
      return Status::Internal(what + ": mkdir " + full + ": " + Errno(err));
    }
    // mkdir's mode is filtered by the umask; the cache's modes must not depend on it.
    if (::chmod(full.c_str(), 0755) != 0) {
      return Status::Internal(what + ": chmod " + full + ": " + Errno(errno));
    }
    dirs_.insert(path);
    dirs_to_sync_.push_back(full);
    return Status::Ok();
  }

  Status WriteFile(const std::string& path, const char* data, uint64_t size, bool executable,
                   const std::string& what) {
    const std::string full = dest_ + "/" + path;
    int fd = ::open(full.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
      const int err = errno;
      if (err == EEXIST) return Status::InvalidArgument(what + ": conflicts with a directory");
      return Status::Internal(what + ": create " + full + ": " + Errno(err));
    }
    uint64_t done = 0;
    while (done < size) {
      ssize_t w =
          ::write(fd, data + done, static_cast<size_t>(std::min<uint64_t>(size - done, 1 << 20)));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        const int err = errno;
        ::close(fd);
        return Status::Internal(what + ": write " + full + ": " + Errno(err));
      }
      done += static_cast<uint64_t>(w);
    }
    // Durable before the cache's rename publishes the tree: a crash must not leave a cached
    // directory of empty files that nobody would ever unpack again.
    if (::fchmod(fd, executable ? 0755 : 0644) != 0 || ::fsync(fd) != 0) {
      const int err = errno;
      ::close(fd);
      return Status::Internal(what + ": finish " + full + ": " + Errno(err));
    }
    if (::close(fd) != 0) return Status::Internal(what + ": close " + full + ": " + Errno(errno));
    return Status::Ok();
  }

  const std::string dest_;
  const uint64_t max_bytes_;
  uint64_t total_ = 0;
  std::set<std::string> seen_;   // entries of the archive
  std::set<std::string> dirs_;   // directories created, listed or implied
  std::set<std::string> files_;  // files created
  std::vector<std::string> dirs_to_sync_;
};

}  // namespace

Result<PackedDir> PackDirectory(const std::string& dir, const PackOptions& options) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      return Status::NotFound("working_dir " + dir + " does not exist");
    }
    return Status::InvalidArgument("working_dir " + dir + ": " + Errno(err));
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument("working_dir " + dir + " is not a directory");
  }
  char* real_c = ::realpath(dir.c_str(), nullptr);
  if (real_c == nullptr) {
    return Status::InvalidArgument("working_dir " + dir + ": " + Errno(errno));
  }
  const std::string root(real_c);
  std::free(real_c);

  IgnoreRules always;
  for (const char* p : {".git", "__pycache__/", "*.pyc"}) always.Add(p);
  IgnoreRules user;
  for (const char* name : {".gitignore", ".traintlignore"}) {
    const std::string path = (root == "/" ? "" : root) + "/" + name;
    struct stat ist;
    if (::lstat(path.c_str(), &ist) != 0) continue;
    auto text = ReadRegularFile(path, kMaxIgnoreFileBytes);
    if (!text.ok()) {
      return Status(text.status().code(), std::string(name) + ": " + text.status().message());
    }
    user.AddLines(*text);
  }
  for (const std::string& p : options.excludes) user.Add(p);

  Packer packer(root, &always, &user);
  std::vector<std::pair<dev_t, ino_t>> ancestors{{st.st_dev, st.st_ino}};
  TRAINTL_RETURN_IF_ERROR(packer.Walk(root, "", &ancestors));
  std::vector<Entry>& entries = packer.entries();
  // Sorted by the names tar shows ("a-c.txt" < "a/"), which keeps a directory before its
  // contents since its name is their prefix.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return (a.is_dir ? a.path + "/" : a.path) < (b.is_dir ? b.path + "/" : b.path);
  });

  // Names first, so that an unpackable path is reported before anything is read.
  std::vector<std::pair<std::string, std::string>> names;  // prefix, name
  names.reserve(entries.size());
  for (const Entry& e : entries) {
    std::string prefix;
    std::string name;
    const std::string full = e.is_dir ? e.path + "/" : e.path;
    if (!SplitUstarName(full, &prefix, &name)) {
      return Status::InvalidArgument(e.path + ": a path of " + std::to_string(full.size()) +
                                     " bytes, too long for the archive (ustar holds up to 255, "
                                     "with a last part of at most 100 after a '/')");
    }
    if (e.size > kMaxEntrySize) {
      return Status::InvalidArgument(e.path + ": over 8 GiB, too large for the archive");
    }
    names.emplace_back(std::move(prefix), std::move(name));
  }
  if (PackedSize(entries) > options.max_bytes) return OverLimit(entries, options.max_bytes);

  PackedDir out;
  out.bytes.reserve(static_cast<size_t>(PackedSize(entries)));
  for (size_t i = 0; i < entries.size(); ++i) {
    Entry& e = entries[i];
    const size_t header_at = out.bytes.size();
    out.bytes.append(kBlock, '\0');  // written once the size read is known
    uint64_t size = 0;
    if (!e.is_dir) {
      const uint64_t used = out.bytes.size() + 2 * kBlock;
      const uint64_t budget = options.max_bytes > used ? options.max_bytes - used : 0;
      TRAINTL_RETURN_IF_ERROR(AppendFile(e, budget, &out.bytes, &size));
      e.size = size;
      if (size > budget) return OverLimit(entries, options.max_bytes);  // grew since the walk
      if (size > kMaxEntrySize) {
        return Status::InvalidArgument(e.path + ": over 8 GiB, too large for the archive");
      }
      out.bytes.append(RoundUpToBlock(size) - size, '\0');
      ++out.files;
      out.content_bytes += static_cast<int64_t>(size);
    }
    const std::string h = MakeHeader(names[i].first, names[i].second, e.is_dir, e.executable, size);
    out.bytes.replace(header_at, kBlock, h);
  }
  out.bytes.append(2 * kBlock, '\0');
  if (out.bytes.size() > options.max_bytes) return OverLimit(entries, options.max_bytes);
  out.sha256 = Sha256Hex(out.bytes);
  return out;
}

Status UnpackArchive(const std::string& bytes, const std::string& dest, uint64_t max_bytes) {
  if (dest.empty()) return Status::InvalidArgument("empty destination path");
  if (::mkdir(dest.c_str(), 0700) != 0) {
    const int err = errno;
    if (err == EEXIST) return Status::AlreadyExists(dest + " already exists");
    if (err == ENOENT) return Status::NotFound("the parent directory of " + dest + " is missing");
    return Status::InvalidArgument("cannot create " + dest + ": " + Errno(err));
  }
  // mkdir's mode is filtered by the umask; the modes must not depend on it.
  Status s = ::chmod(dest.c_str(), 0755) == 0
                 ? Status::Ok()
                 : Status::Internal("chmod " + dest + ": " + Errno(errno));
  if (s.ok()) {
    Unpacker unpacker(dest, max_bytes);
    s = unpacker.Run(bytes);
  }
  if (s.ok()) s = FsyncDir(dest);
  if (s.ok()) s = FsyncDir(DirName(dest));
  if (!s.ok()) RemoveAll(dest).IgnoreError();  // best effort; the error says what went wrong
  return s;
}

Result<std::string> EnsureUnpacked(const std::string& cache_root, const std::string& sha256,
                                   const std::string& archive_path, uint64_t max_bytes) {
  if (!IsSha256Hex(sha256)) {
    return Status::InvalidArgument("not a sha256 (64 lowercase hex characters): " +
                                   Printable(sha256));
  }
  TRAINTL_RETURN_IF_ERROR(MakeDirs(cache_root, 0755));
  const std::string final_dir = JoinPath(cache_root, sha256);
  struct stat st;
  if (::lstat(final_dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return final_dir;
    return Status::FailedPrecondition(final_dir + " exists and is not a directory");
  }
  auto bytes = ReadRegularFile(archive_path, static_cast<size_t>(max_bytes));
  if (!bytes.ok()) return bytes.status();
  const std::string actual = Sha256Hex(*bytes);
  if (actual != sha256) {
    return Status::InvalidArgument(archive_path + " has sha256 " + actual + ", not " + sha256);
  }
  const std::string tmp = JoinPath(cache_root, ".tmp-" + RandomHex(8));
  TRAINTL_RETURN_IF_ERROR(UnpackArchive(*bytes, tmp, max_bytes));
  if (::rename(tmp.c_str(), final_dir.c_str()) != 0) {
    const int err = errno;
    RemoveAll(tmp).IgnoreError();  // ours alone; a leftover only wastes space
    if ((err == EEXIST || err == ENOTEMPTY) && IsDirectory(final_dir)) return final_dir;
    return Status::Internal("rename " + tmp + " to " + final_dir + ": " + Errno(err));
  }
  TRAINTL_RETURN_IF_ERROR(FsyncDir(cache_root));
  return final_dir;
}

}  // namespace traintl
