// `traintl stop JOB`: ends a job as STOPPED.

#include "cli/exit_codes.h"
#include "cli/format.h"
#include "cli/verbs.h"

namespace traintl {
namespace cli {

int RunStop(const std::string& job, CliContext& ctx) {
  HttpRequest request;
  request.method = "POST";
  request.target = JobPath(job, "/stop");
  ApiResult result = CallJson(ctx, request);
  if (!result.ok()) return result.exit_code;
  if (ctx.json) {
    PrintJson(ctx, result.body);
    return kExitOk;
  }
  std::string id = JsonString(result.body, "job_id", job);
  std::string state = JsonString(result.body, "state", "?");
  if (state == "STOPPED") {
    *ctx.out << id << ": STOPPED\n";
  } else if (state == "SUCCEEDED" || state == "FAILED") {
    *ctx.out << id << ": already ended as " << state << "; nothing to stop\n";
  } else {
    *ctx.out << id << ": stop requested (now " << state << ")\n";
  }
  return kExitOk;
}

}  // namespace cli
}  // namespace traintl
