#include "common/status.h"

namespace traintl {

const char* StatusCodeName(Status::Code code) {
  switch (code) {
    case Status::Code::kOk:
      return "OK";
    case Status::Code::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case Status::Code::kNotFound:
      return "NOT_FOUND";
    case Status::Code::kAlreadyExists:
      return "ALREADY_EXISTS";
    case Status::Code::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case Status::Code::kUnavailable:
      return "UNAVAILABLE";
    case Status::Code::kUnauthenticated:
      return "UNAUTHENTICATED";
    case Status::Code::kPermissionDenied:
      return "PERMISSION_DENIED";
    case Status::Code::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case Status::Code::kInternal:
      return "INTERNAL";
  }
  return "UNKNOWN";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

}  // namespace traintl
