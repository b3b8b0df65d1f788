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
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "worker/data/http_client.h"

namespace traintl {
namespace data {

// One file of a dataset.
struct DataFile {
  std::string name;  // what messages call it: the local path, or the URL
  std::string path;  // local path; empty for HTTP
  bool http = false;
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

}  // namespace data
}  // namespace traintl
