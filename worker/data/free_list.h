// FreeList: a bounded stack of idle objects (byte buffers, row blocks) for a pipeline that
// makes and drops objects of the same few sizes over and over, as BatchReader does with
// its blocks. Reusing them keeps their memory: dropped, a multi-MiB buffer goes back to
// the kernel (glibc unmaps or trims it), and the next one costs a page fault per 4 KiB
// written, which on a fast codec or parser is a large part of the CPU time.
//
// The list holds at most `max_idle` objects; more given back are destroyed. When every
// consumer takes before it makes a new object, no more objects exist at once than were in
// use at once, so a pipeline's memory bound still holds.
//
// Thread-safety: Take and Give may be called from any thread.
#pragma once

#include <cstddef>
#include <mutex>
#include <utility>
#include <vector>

#include "common/thread_annotations.h"

namespace traintl {
namespace data {

template <typename T>
class FreeList {
 public:
  // Room for max_idle objects up front, so that Give never allocates (and never throws:
  // it may run in a deleter).
  explicit FreeList(size_t max_idle) : max_idle_(max_idle) { idle_.reserve(max_idle); }
  FreeList(const FreeList&) = delete;
  FreeList& operator=(const FreeList&) = delete;

  // An idle object (with its memory), or a new one when none is idle.
  T Take() {
    std::lock_guard<std::mutex> lock(mu_);
    if (idle_.empty()) return T();
    T t = std::move(idle_.back());
    idle_.pop_back();
    return t;
  }

  // Keeps `t` for a later Take; drops it when `max_idle` objects are idle already (the
  // parameter is destroyed after the lock is released).
  void Give(T t) {
    std::lock_guard<std::mutex> lock(mu_);
    if (idle_.size() < max_idle_) idle_.push_back(std::move(t));
  }

 private:
  const size_t max_idle_;
  std::mutex mu_;
  std::vector<T> idle_ TRAINTL_GUARDED_BY(mu_);
};

}  // namespace data
}  // namespace traintl
