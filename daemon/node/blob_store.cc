#include "daemon/node/blob_store.h"

#include "common/crypto.h"
#include "common/file_util.h"

namespace traintl {

Status BlobStore::Init() { return MakeDirs(dir_, 0755); }

Status BlobStore::Put(const std::string& sha256, const std::string& data) {
  if (!IsSha256Hex(sha256)) return Status::InvalidArgument("blob name must be 64 hex chars");
  const std::string actual = Sha256Hex(data);
  if (actual != sha256)
    return Status::InvalidArgument("content SHA-256 is " + actual + ", not " + sha256);
  if (Has(sha256)) return Status::Ok();
  return WriteFileAtomic(JoinPath(dir_, sha256), data, 0644);
}

bool BlobStore::Has(const std::string& sha256) const {
  return IsSha256Hex(sha256) && PathExists(JoinPath(dir_, sha256));
}

Result<std::string> BlobStore::PathOf(const std::string& sha256) const {
  if (!IsSha256Hex(sha256)) return Status::InvalidArgument("blob name must be 64 hex chars");
  std::string p = JoinPath(dir_, sha256);
  if (!PathExists(p)) return Status::NotFound("no blob " + sha256);
  return p;
}

}  // namespace traintl
