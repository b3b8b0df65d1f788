#include "daemon/node/head_lease.h"

#include <cstdint>

namespace traintl {

HeadLease::HeadLease(HeadLeaseOptions options, const Clock* clock)
    : options_(options),
      clock_(clock),
      fence_after_(static_cast<int64_t>(options_.loss_timeout.count() * options_.fence_fraction)),
      last_answer_(clock->Now()) {}

bool HeadLease::OnHeadAnswered() {
  last_answer_ = clock_->Now();
  const bool was_fenced = fenced_;
  fenced_ = false;
  return was_fenced;
}

HeadLease::Fence HeadLease::CheckFence() {
  Fence f;
  if (clock_->Now() - last_answer_ <= fence_after_) return f;
  f.fence = true;
  f.first = !fenced_;
  fenced_ = true;
  return f;
}

bool HeadLease::TakeBlobSync() {
  const TimePoint now = clock_->Now();
  if (now - last_blob_sync_ <= options_.blob_sync_interval) return false;
  last_blob_sync_ = now;
  return true;
}

}  // namespace traintl
