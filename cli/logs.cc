// `traintl logs JOB [--rank N] [--attempt N] [-f] [--tail N]`: a rank's log text.

#include "cli/exit_codes.h"
#include "cli/verbs.h"

namespace traintl {
namespace cli {

std::string LogsTarget(const LogsOptions& options) {
  std::string target = JobPath(options.job, "/logs") + "?rank=" + std::to_string(options.rank);
  if (options.attempt > 0) target += "&attempt=" + std::to_string(options.attempt);
  if (options.tail >= 0) target += "&tail=" + std::to_string(options.tail);
  if (options.follow) target += "&follow=1";
  return target;
}

int RunLogs(const LogsOptions& options, CliContext& ctx) {
  HttpRequest request;
  request.target = LogsTarget(options);
  Result<HttpResponse> response = Status::Internal("unset");
  if (options.follow) {
    // A quiet training loop can go minutes without a line.
    request.timeout_ms = -1;
    response = ctx.client->Stream(request, [&](std::string_view data) {
      ctx.out->write(data.data(), static_cast<std::streamsize>(data.size()));
      ctx.out->flush();
    });
  } else {
    response = ctx.client->Send(request);
  }
  if (!response.ok()) {
    ctx.out->flush();
    return ReportTransportError(ctx, response.status());
  }
  if (response->status / 100 != 2) return ReportHttpError(ctx, *response);
  if (!options.follow) *ctx.out << response->body;
  ctx.out->flush();
  return kExitOk;
}

}  // namespace cli
}  // namespace traintl
