// Status: the outcome of an operation that can fail for expected reasons (bad input,
// missing file, peer unavailable). Broken invariants are not Statuses: they abort.
//
// [[nodiscard]]: a Status returned and dropped is a failure nobody handled; a caller that
// means to go on regardless says so with IgnoreError() and a comment why.
//
// Thread-safety: a Status is a value; distinct objects may be used from any thread.
#pragma once

#include <string>
#include <utility>

namespace traintl {

class [[nodiscard]] Status {
 public:
  enum class Code {
    kOk = 0,
    kInvalidArgument,
    kNotFound,
    kAlreadyExists,
    kFailedPrecondition,
    kUnavailable,
    kUnauthenticated,
    kPermissionDenied,
    kResourceExhausted,
    kInternal,
  };

  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {Code::kAlreadyExists, std::move(m)}; }
  static Status FailedPrecondition(std::string m) {
    return {Code::kFailedPrecondition, std::move(m)};
  }
  static Status Unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
  static Status Unauthenticated(std::string m) { return {Code::kUnauthenticated, std::move(m)}; }
  static Status PermissionDenied(std::string m) { return {Code::kPermissionDenied, std::move(m)}; }
  static Status ResourceExhausted(std::string m) {
    return {Code::kResourceExhausted, std::move(m)};
  }
  static Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;
  // Drops the outcome on purpose (best-effort work whose failure changes nothing).
  void IgnoreError() const {}

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

const char* StatusCodeName(Status::Code code);

}  // namespace traintl

// Returns early from the enclosing function when `expr` (a Status) is not ok.
#define TRAINTL_RETURN_IF_ERROR(expr) \
  do {                                \
    ::traintl::Status _st = (expr);   \
    if (!_st.ok()) return _st;        \
  } while (0)
