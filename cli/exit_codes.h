// The process exit codes of `traintl`, part of its scripting contract (documented in
// `traintl --help`).
//
// Thread-safety: constants only.
#pragma once

namespace traintl {
namespace cli {

constexpr int kExitOk = 0;           // success; `submit --wait`: the job SUCCEEDED
constexpr int kExitJobFailed = 1;    // `submit --wait`: the job FAILED
constexpr int kExitUsage = 2;        // bad command line, unreadable/invalid job spec
constexpr int kExitUnavailable = 3;  // daemon not reachable, or not ready (HTTP 503)
constexpr int kExitAuth = 4;         // token rejected (HTTP 401/403) or unreadable token file
constexpr int kExitNotFound = 5;     // unknown or ambiguous job/blob (HTTP 404/409)
constexpr int kExitJobStopped = 6;   // `submit --wait`: the job was STOPPED
constexpr int kExitServerError = 7;  // any other daemon error or a malformed response

// The exit code for an HTTP error status from the daemon (400 -> kExitUsage, ...).
// 2xx maps to kExitOk.
int ExitCodeForHttpStatus(int http_status);

}  // namespace cli
}  // namespace traintl
