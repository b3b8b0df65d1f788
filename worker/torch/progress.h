// This rank's training progress for the head (traintl_host_api.progress): steps, each
// step's time and the part of it not spent waiting for peers, and the collectives entered.
// The process group and the gradient synchronizer call these; no user code is involved.
// Without a host (a user's own test of their model) or with a host older than the
// progress call, nothing is sent.
//
// Thread-safety: every function may be called from any thread (one mutex).
#pragma once

namespace traintl {
namespace torch {
namespace detail {

// A collective was launched: the rank entered collective number N (1, 2, ...).
void CollectiveEntered();
// The rank blocks on a collective's result, and no longer.
void WaitBegins();
void WaitEnds();
// A training step ended (its gradients are synchronized).
void StepDone();

}  // namespace detail
}  // namespace torch
}  // namespace traintl
