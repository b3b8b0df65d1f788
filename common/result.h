// Result<T>: a T or the Status saying why there is none. [[nodiscard]], like Status.
//
// Thread-safety: a value type; no internal synchronization.
#pragma once

#include <cstdlib>
#include <utility>
#include <variant>

#include "common/status.h"

namespace traintl {

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    if (std::get<Status>(v_).ok()) std::abort();   // an OK Result must carry a value
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace traintl

#define TRAINTL_CONCAT_INNER(a, b) a##b
#define TRAINTL_CONCAT(a, b) TRAINTL_CONCAT_INNER(a, b)
// Declares `lhs` from a Result expression, or returns its Status from the enclosing function.
#define TRAINTL_ASSIGN_OR_RETURN(lhs, expr)                                                   \
  auto TRAINTL_CONCAT(_res_, __LINE__) = (expr);                                              \
  if (!TRAINTL_CONCAT(_res_, __LINE__).ok()) return TRAINTL_CONCAT(_res_, __LINE__).status(); \
  lhs = std::move(TRAINTL_CONCAT(_res_, __LINE__)).value()
