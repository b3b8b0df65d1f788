// BlobStore: content-addressed files (uploaded training libraries) under one directory,
// named by the SHA-256 of their bytes. A blob is verified before it is stored and written
// atomically, so a stored name always matches its content.
//
// The directory (<data_dir>/blobs) is the daemon's own: its parent is a trusted prefix,
// but the directory itself must be a real directory of root or the daemon's user, and a
// blob is only ever a regular file in it (common/safe_fs.h). A symlink planted at either
// place is refused or, as a blob name, treated as absent and replaced on the next Put.
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

  // Creates the directory (0755) when missing; PermissionDenied when it is a symlink or
  // owned by another user.
  Status Init();
  // Stores `data` when its SHA-256 equals `sha256`; InvalidArgument otherwise.
  Status Put(const std::string& sha256, const std::string& data);
  // Whether a blob is stored: a regular file (not a symlink) by that name.
  bool Has(const std::string& sha256) const;
  // Path of a stored blob; NotFound when absent, InvalidArgument for a malformed name.
  Result<std::string> PathOf(const std::string& sha256) const;

 private:
  const std::string dir_;
};

}  // namespace traintl
