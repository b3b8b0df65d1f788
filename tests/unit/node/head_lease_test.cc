// HeadLease: the head link's timing decisions, driven with a FakeClock - no sockets, no
// sleeps. A node fences itself (stops every worker) after fence_fraction * loss_timeout
// without a head's answer, not before; any head's answer, or becoming the head, unfences
// it; heartbeats follow each other at heartbeat_interval; voters sync libraries at most
// once per blob_sync_interval.
#include "daemon/node/head_lease.h"

#include <catch2/catch.hpp>
#include <chrono>

#include "common/clock.h"

using namespace traintl;
using namespace std::chrono_literals;

namespace {

HeadLeaseOptions Options() {
  HeadLeaseOptions o;
  o.heartbeat_interval = 500ms;
  o.loss_timeout = 4000ms;
  o.fence_fraction = 0.6;  // fence after 2400 ms
  o.blob_sync_interval = 1000ms;
  return o;
}

}  // namespace

TEST_CASE("head lease: fences after fence_fraction of the loss bound, not before", "[head_lease]") {
  FakeClock clock;
  HeadLease lease(Options(), &clock);
  CHECK(lease.fence_after() == 2400ms);
  CHECK_FALSE(lease.OnHeadAnswered());
  clock.Advance(2400ms);  // exactly the bound: still not fenced
  HeadLease::Fence f = lease.CheckFence();
  CHECK_FALSE(f.fence);
  CHECK_FALSE(lease.fenced());
  clock.Advance(1ms);
  f = lease.CheckFence();
  CHECK(f.fence);
  CHECK(f.first);
  CHECK(lease.fenced());
  // Still silent: fence again (a worker may have started since), but not for the first time.
  clock.Advance(500ms);
  f = lease.CheckFence();
  CHECK(f.fence);
  CHECK_FALSE(f.first);
}

TEST_CASE("head lease: a node that never reached a head fences too", "[head_lease]") {
  FakeClock clock;
  HeadLease lease(Options(), &clock);
  clock.Advance(2401ms);
  CHECK(lease.CheckFence().fence);
}

TEST_CASE("head lease: answers keep the node unfenced, silence counts from the last one",
          "[head_lease]") {
  FakeClock clock;
  HeadLease lease(Options(), &clock);
  for (int i = 0; i < 10; ++i) {
    clock.Advance(2000ms);
    CHECK_FALSE(lease.CheckFence().fence);
    CHECK_FALSE(lease.OnHeadAnswered());
  }
  clock.Advance(2000ms);
  CHECK_FALSE(lease.CheckFence().fence);  // failed heartbeats are no event
  clock.Advance(401ms);
  CHECK(lease.CheckFence().fence);
}

TEST_CASE("head lease: an answer unfences", "[head_lease]") {
  FakeClock clock;
  HeadLease lease(Options(), &clock);
  clock.Advance(3000ms);
  REQUIRE(lease.CheckFence().fence);
  CHECK(lease.OnHeadAnswered());  // was fenced: the caller logs "the head answers again"
  CHECK_FALSE(lease.fenced());
  CHECK_FALSE(lease.CheckFence().fence);
  CHECK_FALSE(lease.OnHeadAnswered());
  // Fenced again after another full silence, and that is a first fence again.
  clock.Advance(2401ms);
  HeadLease::Fence f = lease.CheckFence();
  CHECK(f.fence);
  CHECK(f.first);
}

TEST_CASE(
    "head lease: a head change - the new head's answer unfences, and a node that "
    "steps down counts the silence from its last round as head",
    "[head_lease]") {
  FakeClock clock;
  HeadLease lease(Options(), &clock);
  // Head A answered, then went away; discovery finds head B only after the fence.
  lease.OnHeadAnswered();
  clock.Advance(2500ms);
  REQUIRE(lease.CheckFence().fence);
  CHECK(lease.OnHeadAnswered());  // B's first answer
  CHECK_FALSE(lease.fenced());

  // This node becomes the head: each round as head counts as an answer.
  clock.Advance(10s);
  lease.OnHeadAnswered();
  CHECK_FALSE(lease.CheckFence().fence);
  // It steps down and finds no other head: fenced fence_after after its last round.
  clock.Advance(2400ms);
  CHECK_FALSE(lease.CheckFence().fence);
  clock.Advance(1ms);
  CHECK(lease.CheckFence().fence);
}

TEST_CASE("head lease: heartbeat interval", "[head_lease]") {
  FakeClock clock;
  HeadLeaseOptions o = Options();
  o.heartbeat_interval = 250ms;
  HeadLease lease(o, &clock);
  const auto started = clock.Now();
  CHECK(lease.NextHeartbeat(started) == started + 250ms);
  // A round that took longer than the interval: the next one is due at once.
  clock.Advance(300ms);
  CHECK(lease.NextHeartbeat(started) - clock.Now() < std::chrono::steady_clock::duration::zero());
}

TEST_CASE("head lease: library sync at most once per interval", "[head_lease]") {
  FakeClock clock;
  HeadLease lease(Options(), &clock);
  CHECK(lease.TakeBlobSync());  // none yet
  CHECK_FALSE(lease.TakeBlobSync());
  clock.Advance(1000ms);
  CHECK_FALSE(lease.TakeBlobSync());
  clock.Advance(1ms);
  CHECK(lease.TakeBlobSync());
  CHECK_FALSE(lease.TakeBlobSync());
}
