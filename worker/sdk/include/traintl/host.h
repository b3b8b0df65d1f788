// The host API of the running entry point, as the SDK headers (traintl/train.h,
// traintl/dataset.h) reach it. Not an API of its own: include traintl/train.h.
//
// Thread-safety: current_host_api is set by the entry wrapper before the training function
// runs and only read afterwards, from any thread.
#pragma once

#include <cstddef>
#include <cstring>
#include <stdexcept>

#include "traintl/abi.h"

namespace traintl {

namespace internal {

// The host API of the running entry point, set by the entry wrapper before the training
// function runs. Default visibility so that every shared object of the library (e.g. a
// shared traintl::torch) sees the same pointer, even when the library is compiled with
// -fvisibility=hidden. Tests of SDK-based code may point it at a fake host.
inline __attribute__((visibility("default"))) const traintl_host_api* current_host_api = nullptr;

inline const traintl_host_api& HostApi() {
  const traintl_host_api* api = current_host_api;
  if (api == nullptr) {
    throw std::logic_error(
        "traintl: the SDK was called outside a training function run by traintl-worker");
  }
  return *api;
}

inline void CopyMessage(const char* message, char* buf, size_t len) {
  if (buf == nullptr || len == 0) return;
  size_t n = std::strlen(message);
  if (n >= len) n = len - 1;
  std::memcpy(buf, message, n);
  buf[n] = '\0';
}

}  // namespace internal

}  // namespace traintl
