// ProgressRecorder: turns a rank's training events (collective entered, waiting for it,
// step done) into the traintl_progress numbers the host sends to the head (abi.h), and
// hands them to a push function. Shared by the LibTorch integration (worker/torch) and
// the Python package's prepare_model (python/traintl/train/torch.py), so both mean the same by
// a step, its busy time and a collective.
//
// Thread-safety: every method may be called from any thread (one mutex); `push` runs
// with it held and must only copy the numbers.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>

#include "traintl/abi.h"

namespace traintl {

// Hands `p` to the host's progress callback; nothing without a host, or with one older
// than that callback.
inline void SendProgress(const traintl_host_api* api, const traintl_progress& p) {
  if (api == nullptr || !TRAINTL_HOST_API_HAS(api, progress) || api->progress == nullptr) return;
  api->progress(api->host, &p);
}

class ProgressRecorder {
 public:
  using Push = std::function<void(const traintl_progress&)>;
  explicit ProgressRecorder(Push push) : push_(std::move(push)) {}

  // A collective was launched: the rank entered collective number N (1, 2, ...).
  void CollectiveEntered() {
    std::lock_guard<std::mutex> l(mu_);
    ++p_.collective_seq;
    push_(p_);
  }
  // The rank blocks on a collective's result, and no longer (waits may nest).
  void WaitBegins() {
    std::lock_guard<std::mutex> l(mu_);
    if (waits_++ > 0) return;
    wait_began_ = Clock::now();
    p_.in_collective = 1;
    push_(p_);
  }
  void WaitEnds() {
    std::lock_guard<std::mutex> l(mu_);
    if (waits_ == 0 || --waits_ > 0) return;
    waited_s_ += std::chrono::duration<double>(Clock::now() - wait_began_).count();
    p_.in_collective = 0;
    push_(p_);
  }
  // A training step ended (its gradients are synchronized): its time is since the
  // previous one ended, its busy time that less the time spent waiting.
  void StepDone() {
    std::lock_guard<std::mutex> l(mu_);
    const Clock::time_point now = Clock::now();
    if (last_step_ != Clock::time_point{}) {
      p_.step_s = std::chrono::duration<double>(now - last_step_).count();
      p_.busy_s = p_.step_s > waited_s_ ? p_.step_s - waited_s_ : 0;
    }
    ++p_.steps;
    last_step_ = now;
    waited_s_ = 0;
    push_(p_);
  }

 private:
  using Clock = std::chrono::steady_clock;

  // Constant after construction.
  const Push push_;

  // Guarded by mu_.
  std::mutex mu_;
  traintl_progress p_{};
  int waits_ = 0;
  Clock::time_point wait_began_{};
  Clock::time_point last_step_{};  // when the previous step ended; epoch = none yet
  double waited_s_ = 0;            // waiting since the previous step ended
};

}  // namespace traintl
