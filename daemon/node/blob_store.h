// BlobStore: content-addressed files (uploaded training libraries) under one directory,
// named by the SHA-256 of their bytes. A blob is verified before it is stored and written
// atomically, so a stored name always matches its content.
//
// Thread-safety: methods may be called from any thread; concurrent Puts of the same blob
// are harmless (same bytes, atomic rename).
#pragma once

#include <string>

#include "common/result.h"

namespace traintl {

class BlobStore {
 public:
  explicit BlobStore(std::string dir) : dir_(std::move(dir)) {}

  Status Init();
  // Stores `data` when its SHA-256 equals `sha256`; InvalidArgument otherwise.
  Status Put(const std::string& sha256, const std::string& data);
  bool Has(const std::string& sha256) const;
  // Path of a stored blob; NotFound when absent, InvalidArgument for a malformed name.
  Result<std::string> PathOf(const std::string& sha256) const;

 private:
  const std::string dir_;
};

}  // namespace traintl
