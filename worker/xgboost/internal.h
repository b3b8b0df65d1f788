// Helpers shared by the sources of traintl::xgboost; not installed.
//
// Thread-safety: the functions are safe to call from any thread; XGBGetLastError (read by
// Check) is per thread in XGBoost.
#pragma once

#include <string>

namespace traintl {
namespace xgboost {
namespace internal {

// Throws Error("<call> (<what>): <XGBoost's last error>") when `rc` is not 0; `what` says
// what the call was for ("round 12"), "" for nothing.
void Check(int rc, const char* call, const std::string& what = "");

// XGBoost's error text made fit for one line of `traintl status`: without the timestamp,
// the source location and the stack trace, and with line breaks as "; ".
std::string CleanMessage(const std::string& text);

// Throws traintl::DatasetError(message, not retryable), after making the worker end this
// attempt as not retryable (see the definition for how).
[[noreturn]] void ThrowBadData(const std::string& message);

// Throws std::logic_error when a training function of a job with several ranks makes a
// DMatrix or trains without a Collective: XGBoost would then train every rank alone.
void RequireCollective(const char* who);

// Writes `data` to `path` through a temporary file in the same directory, fsynced and
// renamed over `path`. Throws std::runtime_error naming the path.
void WriteFileAtomic(const std::string& path, const std::string& data);
// Writes `data` to `path` (no fsync: report() copies checkpoint files durably).
void WriteFile(const std::string& path, const std::string& data);
// The whole file; throws std::runtime_error naming the path.
std::string ReadFile(const std::string& path);
bool FileExists(const std::string& path);

// A fresh directory under `parent` ("" = $TMPDIR, else /tmp), removed with its files by
// the destructor.
class TempDir {
 public:
  TempDir(const std::string& parent, const std::string& prefix);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace internal
}  // namespace xgboost
}  // namespace traintl
