#include "daemon/node/blob_store.h"

#include <sys/stat.h>

#include "common/crypto.h"
#include "common/file_util.h"
#include "common/safe_fs.h"

namespace traintl {
namespace {

// The blob directory, opened without following a symlink at it (only root and the
// daemon's user may own it).
Result<SafeDir> OpenBlobDir(const std::string& dir, bool create) {
  if (create) return MakeJobDir(dir, 0755, OwnerPolicy{});
  return OpenJobDir(dir, OwnerPolicy{});
}

}  // namespace

Status BlobStore::Init() { return OpenBlobDir(dir_, /*create=*/true).status(); }

Status BlobStore::Put(const std::string& sha256, const std::string& data) {
  if (!IsSha256Hex(sha256)) return Status::InvalidArgument("blob name must be 64 hex chars");
  const std::string actual = Sha256Hex(data);
  if (actual != sha256)
    return Status::InvalidArgument("content SHA-256 is " + actual + ", not " + sha256);
  if (Has(sha256)) return Status::Ok();
  TRAINTL_ASSIGN_OR_RETURN(SafeDir dir, OpenBlobDir(dir_, /*create=*/false));
  // The rename replaces whatever else is at the name (a symlink included), never follows it.
  return WriteFileAtomicAt(dir, sha256, data, 0644);
}

bool BlobStore::Has(const std::string& sha256) const {
  if (!IsSha256Hex(sha256)) return false;
  auto dir = OpenBlobDir(dir_, /*create=*/false);
  if (!dir.ok()) return false;
  auto st = StatEntryNoFollow(*dir, sha256);
  return st.ok() && S_ISREG(st->st_mode);
}

Result<std::string> BlobStore::PathOf(const std::string& sha256) const {
  if (!IsSha256Hex(sha256)) return Status::InvalidArgument("blob name must be 64 hex chars");
  if (!Has(sha256)) return Status::NotFound("no blob " + sha256);
  return JoinPath(dir_, sha256);
}

}  // namespace traintl
