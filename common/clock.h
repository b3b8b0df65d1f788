// Clock: where a component reads the time its protocol timeouts are measured in (node
// loss, settle periods, how long an attempt ran), so that tests can drive those timeouts
// with a FakeClock instead of waiting them out. Timers that only schedule work (asio
// steady_timers) keep the real clock.
//
// Thread-safety: SystemClock is stateless; FakeClock's Now and Advance may be called from
// any thread.
#pragma once

#include <atomic>
#include <chrono>

namespace traintl {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual std::chrono::steady_clock::time_point Now() const = 0;
};

class SystemClock : public Clock {
 public:
  std::chrono::steady_clock::time_point Now() const override {
    return std::chrono::steady_clock::now();
  }
  // The process-wide instance (what components use unless a test gives them another).
  static const Clock* Get() {
    static const SystemClock kClock;
    return &kClock;
  }
};

// Starts at the real clock's reading and moves only when told.
class FakeClock : public Clock {
 public:
  FakeClock() : now_ns_(std::chrono::steady_clock::now().time_since_epoch().count()) {}
  std::chrono::steady_clock::time_point Now() const override {
    return std::chrono::steady_clock::time_point(
        std::chrono::steady_clock::duration(now_ns_.load()));
  }
  void Advance(std::chrono::steady_clock::duration d) { now_ns_ += d.count(); }

 private:
  std::atomic<std::chrono::steady_clock::duration::rep> now_ns_;
};

}  // namespace traintl
