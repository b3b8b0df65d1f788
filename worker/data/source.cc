#include "worker/data/source.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "worker/data/mapped_files.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14
#endif

namespace traintl {
namespace data {
namespace {

std::string ErrnoText(int err) { return std::strerror(err); }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX escapes of a file URI's path, decoded.
std::string PercentDecode(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && HexValue(s[i + 1]) >= 0 && HexValue(s[i + 2]) >= 0) {
      out += static_cast<char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool HasGlobChars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

std::vector<DataFile> ToDataFiles(std::vector<std::string> paths) {
  std::sort(paths.begin(), paths.end());
  std::vector<DataFile> out;
  out.reserve(paths.size());
  for (auto& p : paths) out.push_back({p, p, false, nullptr});
  return out;
}

Result<std::vector<DataFile>> ResolveGlob(const std::string& pattern, const std::string& uri) {
  glob_t g;
  std::memset(&g, 0, sizeof g);
  const int rc = ::glob(pattern.c_str(), GLOB_NOSORT, nullptr, &g);
  std::vector<std::string> paths;
  if (rc == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) {
      if (IsRegularFile(g.gl_pathv[i])) paths.emplace_back(g.gl_pathv[i]);
    }
  }
  ::globfree(&g);
  if (rc != 0 && rc != GLOB_NOMATCH) {
    return Status::Unavailable(uri + ": cannot expand the glob pattern " + pattern);
  }
  if (paths.empty()) {
    return Status::NotFound(uri + ": the glob pattern " + pattern + " matches no files");
  }
  return ToDataFiles(std::move(paths));
}

Result<std::vector<DataFile>> ResolveDirectory(const std::string& dir, const std::string& uri) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return Status::NotFound(uri + ": cannot list " + dir + ": " + ErrnoText(errno));
  std::vector<std::string> paths;
  while (struct dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.empty() || name[0] == '.' || name[0] == '_') continue;
    const std::string path = dir + (dir.back() == '/' ? "" : "/") + name;
    if (IsRegularFile(path)) paths.push_back(path);
  }
  ::closedir(d);
  if (paths.empty()) return Status::NotFound(uri + ": the directory " + dir + " has no data files");
  return ToDataFiles(std::move(paths));
}

// Opens local `file` for reading and sets *size; the caller closes the descriptor.
Result<int> OpenLocal(const DataFile& file, uint64_t* size) {
  const int fd = ::open(file.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound(file.name + ": no such file");
    return Status::Unavailable(file.name + ": cannot open: " + ErrnoText(err));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::Unavailable(file.name + ": cannot stat: " + ErrnoText(err));
  }
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

class LocalSource : public ByteSource {
 public:
  LocalSource(std::string name, int fd, uint64_t offset, uint64_t size)
      : name_(std::move(name)), fd_(fd), offset_(offset), size_(size) {}
  ~LocalSource() override { ::close(fd_); }

  Result<size_t> Read(char* buf, size_t len) override {
    for (;;) {
      ssize_t n = ::pread(fd_, buf, len, static_cast<off_t>(offset_));
      if (n >= 0) {
        offset_ += static_cast<uint64_t>(n);
        return static_cast<size_t>(n);
      }
      if (errno != EINTR) {
        return Status::Unavailable(name_ + ": read failed at byte " + std::to_string(offset_) +
                                   ": " + ErrnoText(errno));
      }
    }
  }
  std::optional<uint64_t> size() const override { return size_; }

 private:
  const std::string name_;
  const int fd_;
  uint64_t offset_;
  const uint64_t size_;
};

class HttpSource : public ByteSource {
 public:
  explicit HttpSource(std::unique_ptr<HttpBodyReader> reader) : reader_(std::move(reader)) {}
  Result<size_t> Read(char* buf, size_t len) override { return reader_->Read(buf, len); }
  std::optional<uint64_t> size() const override { return reader_->total_size(); }

 private:
  std::unique_ptr<HttpBodyReader> reader_;
};

}  // namespace

Result<std::vector<DataFile>> ResolveDataFiles(const std::string& uri) {
  if (uri.rfind("http://", 0) == 0 || uri.rfind("https://", 0) == 0) {
    TRAINTL_RETURN_IF_ERROR(http::ParseUrl(uri).status());
    return std::vector<DataFile>{{uri, "", true, std::make_shared<HttpPin>()}};
  }
  if (uri.rfind("file://", 0) != 0) {
    return Status::InvalidArgument(uri + ": not a file://, http:// or https:// URI");
  }
  std::string path = uri.substr(7);
  if (path.rfind("localhost/", 0) == 0) path = path.substr(9);
  path = PercentDecode(path);
  if (path.empty() || path[0] != '/') {
    return Status::InvalidArgument(uri + ": a file:// URI must name an absolute path");
  }
  if (HasGlobChars(path)) return ResolveGlob(path, uri);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return Status::NotFound(uri + ": " + path + ": " + ErrnoText(errno));
  }
  if (S_ISDIR(st.st_mode)) return ResolveDirectory(path, uri);
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(uri + ": not a regular file");
  return std::vector<DataFile>{{path, path, false, nullptr}};
}

Result<std::unique_ptr<ByteSource>> OpenSource(const DataFile& file, uint64_t offset,
                                               const SourceOptions& options) {
  if (file.http) {
    TRAINTL_ASSIGN_OR_RETURN(auto reader,
                             HttpBodyReader::Open(file.name, offset, options.http, options.cancel));
    // A server that ignores Range sends the file from its start, which the client skips:
    // fine for small files, but for every column chunk or split segment of a large one it
    // downloads the file again and again (quadratic): refused past max_skipped_bytes.
    if (!reader->range_honoured() && offset > options.http.max_skipped_bytes) {
      return Status::InvalidArgument(
          file.name + ": the server ignores Range requests, and reading from byte " +
          std::to_string(offset) +
          " would download everything before it first; serve the "
          "file from a server that supports Range (206), or copy it to the nodes");
    }
    if (file.pin) {
      std::lock_guard<std::mutex> lock(file.pin->mu);
      HttpPin& pin = *file.pin;
      if (!pin.set) {
        pin.set = true;
        pin.size = reader->total_size();
        pin.validator = reader->validator();
      } else if (!SameVersion(pin.size, pin.validator, reader->total_size(), reader->validator())) {
        const auto size_text = [](std::optional<uint64_t> n) {
          return n ? std::to_string(*n) + " bytes" : std::string("size not said");
        };
        return Status::FailedPrecondition(
            file.name + ": the file changed on the server while the job read it (first " +
            size_text(pin.size) + " " + pin.validator + ", now " + size_text(reader->total_size()) +
            " " + reader->validator() +
            "; servers behind one address that disagree look the same)");
      }
    }
    return std::unique_ptr<ByteSource>(new HttpSource(std::move(reader)));
  }
  uint64_t size = 0;
  TRAINTL_ASSIGN_OR_RETURN(const int fd, OpenLocal(file, &size));
  ::posix_fadvise(fd, static_cast<off_t>(offset), 0, POSIX_FADV_SEQUENTIAL);
  return std::unique_ptr<ByteSource>(new LocalSource(file.name, fd, offset, size));
}

Result<std::shared_ptr<const MappedFile>> MappedFile::Open(const DataFile& file,
                                                           uint64_t expected_size) {
  if (file.http) return Status::InvalidArgument(file.name + ": not a local file");
  uint64_t size = 0;
  TRAINTL_ASSIGN_OR_RETURN(const int fd, OpenLocal(file, &size));
  if (size != expected_size && expected_size != kAnySize) {
    ::close(fd);
    return Status::FailedPrecondition(file.name + ": the file has " + std::to_string(size) +
                                      " bytes, " + std::to_string(expected_size) +
                                      " when the job started (was it changed while the job "
                                      "ran?)");
  }
  if (size == 0) {  // what the caller expects, or any size: nothing to map
    ::close(fd);
    return Status::Unavailable(file.name + ": empty, nothing to map");
  }
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file
  if (p == MAP_FAILED) return Status::Unavailable(file.name + ": cannot map: " + ErrnoText(err));
  return std::shared_ptr<const MappedFile>(
      new MappedFile(file.name, static_cast<const char*>(p), size));
}

MappedFile::MappedFile(std::string name, const char* data, uint64_t size)
    : name_(std::move(name)),
      data_(data),
      size_(size),
      fault_slot_(RegisterMapping(data, size, name_)) {}

MappedFile::~MappedFile() {
  UnregisterMapping(fault_slot_);
  ::munmap(const_cast<char*>(data_), size_);
}

Status MappedFile::Populate(uint64_t offset, uint64_t len) const {
  if (offset > size_ || len > size_ - offset) {
    return Status::InvalidArgument(name_ + ": bytes " + std::to_string(offset) + ".." +
                                   std::to_string(offset + len) + " are past the file's end");
  }
  if (len == 0) return Status::Ok();
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t begin = offset / page * page;
  for (;;) {
    if (::madvise(const_cast<char*>(data_) + begin, offset + len - begin, MADV_POPULATE_READ) ==
        0) {
      return Status::Ok();
    }
    const int err = errno;
    if (err == EINTR) continue;
    // EFAULT: a page past the file's end (it shrank); EINVAL: a kernel before 5.14, where
    // the pages fault in on first touch instead.
    if (err == EINVAL) return Status::Ok();
    return Status::Unavailable(name_ + ": cannot read bytes " + std::to_string(offset) + ".." +
                               std::to_string(offset + len) + ": " + ErrnoText(err) +
                               " (was the file changed while the job ran?)");
  }
}

void MappedFile::Release(uint64_t offset, uint64_t len) const {
  if (offset >= size_) return;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t begin = offset / page * page;
  const uint64_t end = std::min(offset + len, size_) / page * page;
  // Advice only: on failure the pages just stay mapped.
  if (end > begin) ::madvise(const_cast<char*>(data_) + begin, end - begin, MADV_DONTNEED);
}

Result<size_t> ReadFully(ByteSource* source, char* buf, size_t len) {
  size_t total = 0;
  while (total < len) {
    TRAINTL_ASSIGN_OR_RETURN(size_t n, source->Read(buf + total, len - total));
    if (n == 0) break;
    total += n;
  }
  return total;
}

}  // namespace data
}  // namespace traintl
