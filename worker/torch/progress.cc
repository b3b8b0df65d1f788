#include "worker/torch/progress.h"

#include <chrono>
#include <mutex>

#include "traintl/train.h"

namespace traintl {
namespace torch {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

struct ProgressState {
  std::mutex mu;
  traintl_progress p{};
  int waits = 0;  // nested waits in progress
  Clock::time_point wait_began{};
  Clock::time_point last_step{};  // when the previous step ended; epoch = none yet
  double waited_s = 0;            // waiting since the previous step ended
};

ProgressState& State() {
  static ProgressState* state = new ProgressState;  // never destroyed: exit-safe
  return *state;
}

// Hands the numbers to the host; `s.mu` held (the host only copies them).
void Push(ProgressState& s) {
  const traintl_host_api* api = traintl::internal::current_host_api;
  if (api == nullptr || !TRAINTL_HOST_API_HAS(api, progress) || api->progress == nullptr) return;
  api->progress(api->host, &s.p);
}

}  // namespace

void CollectiveEntered() {
  ProgressState& s = State();
  std::lock_guard<std::mutex> l(s.mu);
  ++s.p.collective_seq;
  Push(s);
}

void WaitBegins() {
  ProgressState& s = State();
  std::lock_guard<std::mutex> l(s.mu);
  if (s.waits++ > 0) return;
  s.wait_began = Clock::now();
  s.p.in_collective = 1;
  Push(s);
}

void WaitEnds() {
  ProgressState& s = State();
  std::lock_guard<std::mutex> l(s.mu);
  if (s.waits == 0 || --s.waits > 0) return;
  s.waited_s += std::chrono::duration<double>(Clock::now() - s.wait_began).count();
  s.p.in_collective = 0;
  Push(s);
}

void StepDone() {
  ProgressState& s = State();
  std::lock_guard<std::mutex> l(s.mu);
  const Clock::time_point now = Clock::now();
  if (s.last_step != Clock::time_point{}) {
    s.p.step_s = std::chrono::duration<double>(now - s.last_step).count();
    s.p.busy_s = s.p.step_s > s.waited_s ? s.p.step_s - s.waited_s : 0;
  }
  ++s.p.steps;
  s.last_step = now;
  s.waited_s = 0;
  Push(s);
}

}  // namespace detail
}  // namespace torch
}  // namespace traintl
