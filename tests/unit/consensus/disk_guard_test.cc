// DiskGuard against an injected free-space reading (the real statvfs is exercised by the
// e2e full-disk test on a tmpfs).
#include "daemon/consensus/disk_guard.h"

#include <catch2/catch.hpp>
#include <cstdint>

using traintl::DiskGuard;
using traintl::IsDiskFull;
using traintl::Result;
using traintl::Status;

namespace {
constexpr uint64_t kMiB = 1 << 20;
}

TEST_CASE("DiskGuard refuses writes below the reserve and recovers when space returns") {
  uint64_t free = 500 * kMiB;
  DiskGuard guard("/some/dir", 128 * kMiB,
                  [&](const std::string&) -> Result<uint64_t> { return free; });
  CHECK(guard.Check(1 * kMiB).ok());
  CHECK_FALSE(guard.Last().full);
  // An entry that would eat into the reserve is refused, even with the reserve itself free.
  Status big = guard.Check(400 * kMiB);
  CHECK(IsDiskFull(big));
  CHECK(guard.Last().full);
  free = 100 * kMiB;
  Status st = guard.Check(10);
  REQUIRE(IsDiskFull(st));
  CHECK(st.code() == Status::Code::kResourceExhausted);
  CHECK(st.message().find("100 MiB free") != std::string::npos);
  CHECK(st.message().find("/some/dir") != std::string::npos);
  CHECK(guard.Last().free_bytes == 100 * kMiB);
  // Still full for small writes and health checks while the refused 400 MiB would not fit.
  free = 200 * kMiB;
  CHECK(IsDiskFull(guard.Check(10)));
  CHECK(guard.Last(/*refresh=*/true).full);
  free = 600 * kMiB;  // space returned: accepted again, no restart needed
  CHECK(guard.Check(10).ok());
  CHECK_FALSE(guard.Last(/*refresh=*/true).full);
}

TEST_CASE("DiskGuard: 0 disables it, and a failed reading does not block writes") {
  DiskGuard off("/d", 0, [](const std::string&) -> Result<uint64_t> { return uint64_t{0}; });
  CHECK(off.Check(1 << 30).ok());
  DiskGuard broken("/d", 1, [](const std::string&) -> Result<uint64_t> {
    return Status::Internal("statvfs failed");
  });
  CHECK(broken.Check(1 << 30).ok());
  CHECK_FALSE(IsDiskFull(Status::ResourceExhausted("raft: out of memory")));
}

TEST_CASE("DiskGuard::CheckOther: writes beside the log keep its reserve, and change nothing") {
  uint64_t free = 300 * kMiB;
  DiskGuard guard("/some/dir", 128 * kMiB,
                  [&](const std::string&) -> Result<uint64_t> { return free; });
  CHECK(guard.CheckOther(100 * kMiB, "the upload").ok());
  Status st = guard.CheckOther(200 * kMiB, "the upload");
  REQUIRE(IsDiskFull(st));
  CHECK(st.message().find("plus 200 MiB for the upload") != std::string::npos);
  // The refused upload leaves the log's own writes alone.
  CHECK(guard.Check(1 * kMiB).ok());
  CHECK_FALSE(guard.Last().full);
  free = 100 * kMiB;  // below the reserve: nothing fits
  CHECK(IsDiskFull(guard.CheckOther(1, "the upload")));
  DiskGuard off("/some/dir", 0, [&](const std::string&) -> Result<uint64_t> { return free; });
  CHECK(off.CheckOther(1000 * kMiB, "the upload").ok());
}
