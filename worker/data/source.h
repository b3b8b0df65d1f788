// Dataset files: resolving a dataset URI to its files, and reading a file's bytes from an
// offset (ByteSource) whether it is local or behind HTTP(S).
//
// URIs (DESIGN §3, checked by the job-spec parser):
//   file:///abs/path          one file; or a directory: its regular files whose names do
//                             not start with '.' or '_' (as Spark/Arrow datasets), sorted
//   file:///abs/train-*.csv   a glob(7) pattern (*, ?, [...]); matches regular files, sorted
//   http://host[:port]/path   one file; https:// verified against the system's CAs
// Files are sorted by byte order so that every rank and node sees the same order.
//
// Thread-safety: free functions are thread-safe; a ByteSource is used by one thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "worker/data/http_client.h"

namespace traintl {
namespace data {

// What the first answer for an http(s) file said, which every later request for it must
// say too (OpenSource), so that a reader never mixes the bytes of two versions of a file
// that was replaced on the server while the job read it. Shared by a DataFile's copies.
struct HttpPin {
  std::mutex mu;
  bool set = false;              // guarded by mu; the fields below too
  std::optional<uint64_t> size;  // the file's size, when the server said
  std::string validator;         // HttpBodyReader::validator(); "" when none
};

// One file of a dataset.
struct DataFile {
  std::string name;  // what messages call it: the local path, or the URL
  std::string path;  // local path; empty for HTTP
  bool http = false;
  std::shared_ptr<HttpPin> pin;  // http: made by ResolveDataFiles; null for local files
};

// The files of a dataset URI. NotFound when a file, directory or glob names nothing;
// InvalidArgument for a URI of another scheme.
Result<std::vector<DataFile>> ResolveDataFiles(const std::string& uri);

// A file's bytes from some offset on.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Reads up to `len` bytes; 0 at the end of the file.
  virtual Result<size_t> Read(char* buf, size_t len) = 0;
  // The size of the whole file, when known.
  virtual std::optional<uint64_t> size() const = 0;
};

struct SourceOptions {
  HttpOptions http;
  // Polled while an HTTP operation waits; true makes it fail soon (see HttpBodyReader).
  const std::atomic<bool>* cancel = nullptr;
};

// Opens `file` positioned at byte `offset`. A missing file is NotFound.
Result<std::unique_ptr<ByteSource>> OpenSource(const DataFile& file, uint64_t offset,
                                               const SourceOptions& options);

// Reads until `len` bytes or the end of the file; returns how many were read.
Result<size_t> ReadFully(ByteSource* source, char* buf, size_t len);

// A local file mapped read-only, for a reader that decodes parts of it in place (Parquet
// column chunks, blocks of CSV and JSON Lines records) instead of copying them into
// buffers of its own: a pread costs a copy out of the page cache plus, for a fresh buffer,
// the kernel zeroing its pages, which on a fast codec is a tenth of the read's CPU; and on
// a cold read (pages just read from storage) the copy costs several times that on some VMs
// (measured: bench/data/RESULTS.md). The pages stay the page cache's.
//
// The file must not shrink while it is mapped: a page past its new end raises SIGBUS in
// the reading process (the worker: its job fails and restarts as its failure_config
// allows; its log says which file, mapped_files.h). Open checks the size against what the caller
// expects (where it expects one: Parquet's footer says it; a text file is taken at its size then,
// its row index checks the segments), and Populate fails cleanly when the file ends early, so a
// file cut short before or between units is an error; only a truncation in the middle of a unit's
// parsing is not (nor a storage error on a page evicted after Populate, which a read would
// have returned as an error, nor a page Released and touched again).
//
// Thread-safety: immutable; data() may be read from any thread while the object lives.
class MappedFile {
 public:
  // Maps `file` (local) whole. NotFound when it is gone; FailedPrecondition when its size
  // is not `expected_size` (kAnySize: whatever it is now); Unavailable when it is empty or
  // cannot be opened or mapped (a file system without mmap: read it instead).
  static constexpr uint64_t kAnySize = UINT64_MAX;
  static Result<std::shared_ptr<const MappedFile>> Open(const DataFile& file,
                                                        uint64_t expected_size);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const char* data() const { return data_; }
  uint64_t size() const { return size_; }

  // Maps bytes [offset, offset + len) into the page tables now (reading them from storage
  // when not cached), in one call rather than a fault per 64 KiB on first touch. An error
  // when the range is no longer in the file.
  Status Populate(uint64_t offset, uint64_t len) const;
  // Drops this mapping's page-table entries for the whole pages from the one holding
  // `offset` up to the one holding offset + len (exclusive), once they are read: the
  // pages stay in the page cache (a later read maps them again), but no longer count in
  // the process's resident memory, which would otherwise grow to the size of the file.
  // The last page is left to whoever reads on from there.
  void Release(uint64_t offset, uint64_t len) const;

 private:
  MappedFile(std::string name, const char* data, uint64_t size);

  const std::string name_;
  const char* const data_;
  const uint64_t size_;
  const int fault_slot_;  // RegisterMapping's: a SIGBUS in the mapping names the file
};

}  // namespace data
}  // namespace traintl
