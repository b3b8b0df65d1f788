// CliContext: everything a verb needs from the outside world (the daemon client, output
// streams, clocks), so that verbs can be tested with fakes. Plus the shared helpers that
// turn daemon answers into output and exit codes.
//
// Thread-safety: a CliContext is used by one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/connection.h"
#include "cli/http_client.h"
#include "common/status.h"

namespace traintl {
namespace cli {

struct CliContext {
  HttpClient* client = nullptr;     // not owned; never null while a verb runs
  Connection connection;            // for messages (address, token source)
  std::ostream* out = nullptr;      // results
  std::ostream* err = nullptr;      // diagnostics, "traintl: ..." messages
  bool json = false;                // --json: print the daemon's JSON, pretty, and nothing else
  bool out_is_tty = false;          // enables carriage-return redraws in `submit --wait`
  int terminal_width = 0;           // columns of the terminal on stdout; 0 = unknown
  std::function<int64_t()> now_ms;  // wall clock, ms since the epoch
  std::function<void(int64_t ms)> sleep_ms;  // used between polls
  int64_t poll_interval_ms = 500;            // `submit --wait` polling period
  // How long `submit --wait` keeps retrying while the daemon is unreachable (e.g. a head
  // failover or a daemon restart) before giving up with kExitUnavailable.
  int64_t reconnect_grace_ms = 60000;
  // A second client to the same daemon, for a stream read on another thread beside
  // `client` (`submit --wait --logs`). Null: that is not available (the caller says so).
  std::function<std::unique_ptr<HttpClient>()> new_client;
  // Where the CLI may keep its caches ($XDG_CACHE_HOME/traintl or ~/.cache/traintl); ""
  // (tests): none, every library is read and hashed.
  std::string cache_dir;
};

// The result of a JSON API call: the parsed 2xx body, or the exit code of an error that
// has already been reported on ctx.err.
struct ApiResult {
  int exit_code = 0;
  int http_status = 0;
  nlohmann::json body;
  bool ok() const { return exit_code == 0; }
};

// Sends `request`; on a transport error or a non-2xx answer prints the message and returns
// its exit code. A 2xx body that is not JSON is an error (kExitServerError), except that an
// empty body gives a null `body`.
ApiResult CallJson(CliContext& ctx, const HttpRequest& request);

// Prints the message for a failed exchange (`status` from HttpClient) and returns its exit
// code (kExitUnavailable).
int ReportTransportError(const CliContext& ctx, const Status& status);
// Prints the message for a non-2xx answer and returns its exit code.
int ReportHttpError(const CliContext& ctx, const HttpResponse& response);
// The "error" text of an error body (JSON or plain text), or "HTTP <status>".
std::string ErrorText(const HttpResponse& response);

// "/v1/jobs/<job><suffix>" with the job argument percent-encoded.
std::string JobPath(const std::string& job, const std::string& suffix = "");
// Writes `value` pretty-printed (2-space indent) with a final newline.
void PrintJson(const CliContext& ctx, const nlohmann::json& value);
// The read-only verbs: GETs `target`, then prints the JSON answer with --json, else
// `format(answer)`. Returns the exit code.
int GetAndShow(CliContext& ctx, const std::string& target,
               const std::function<std::string(const nlohmann::json&)>& format);

}  // namespace cli
}  // namespace traintl
