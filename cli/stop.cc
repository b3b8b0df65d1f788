// The verbs that act on one job as a whole: `traintl stop JOB [--wait]` (ends it as
// STOPPED), `traintl resubmit JOB [--wait]` (a new job with its spec and code) and
// `traintl delete JOB [--checkpoints]` (forgets a finished job).

#include "cli/exit_codes.h"
#include "cli/format.h"
#include "cli/verbs.h"

namespace traintl {
namespace cli {
namespace {

bool Ended(const std::string& state) {
  return state == "SUCCEEDED" || state == "FAILED" || state == "STOPPED";
}

// Polls the job until it has ended; its final JobDetail, or an exit code (reported).
ApiResult WaitEnded(const std::string& id, CliContext& ctx) {
  for (;;) {
    HttpRequest request;
    request.target = JobPath(id);
    ApiResult result = CallJson(ctx, request);
    if (!result.ok() || Ended(JsonString(result.body, "state"))) return result;
    ctx.sleep_ms(ctx.poll_interval_ms);
  }
}

}  // namespace

int RunStop(const std::string& job, const JobVerbOptions& options, CliContext& ctx) {
  HttpRequest request;
  request.method = "POST";
  request.target = JobPath(job, "/stop");
  ApiResult result = CallJson(ctx, request);
  if (!result.ok()) return result.exit_code;
  const std::string id = JsonString(result.body, "job_id", job);
  const std::string before = JsonString(result.body, "state", "?");
  if (options.wait && !Ended(before)) {
    result = WaitEnded(id, ctx);
    if (!result.ok()) return result.exit_code;
  }
  if (ctx.json) {
    PrintJson(ctx, result.body);
    return kExitOk;
  }
  const std::string state = JsonString(result.body, "state", "?");
  if (Ended(before) && before != "STOPPED") {
    *ctx.out << id << ": already ended as " << before << "; nothing to stop\n";
  } else if (state == "STOPPED") {
    *ctx.out << id << ": STOPPED\n";
  } else if (Ended(state)) {
    *ctx.out << id << ": ended as " << state << " before the stop took effect\n";
  } else {
    *ctx.out << id << ": stop requested (now " << state << ")\n";
  }
  return kExitOk;
}

int RunResubmit(const std::string& job, const JobVerbOptions& options, CliContext& ctx) {
  HttpRequest request;
  request.method = "POST";
  request.target = JobPath(job, "/resubmit");
  ApiResult result = CallJson(ctx, request);
  if (!result.ok()) return result.exit_code;
  const std::string id = JsonString(result.body, "job_id");
  if (ctx.json && !options.wait) {
    PrintJson(ctx, result.body);
    return kExitOk;
  }
  if (!ctx.json) *ctx.out << id << "\n";
  if (!options.wait) return kExitOk;
  ctx.out->flush();
  return WaitForJob(id, ctx);
}

int RunDelete(const std::string& job, const JobVerbOptions& options, CliContext& ctx) {
  HttpRequest request;
  request.method = "DELETE";
  request.target = JobPath(job) + (options.checkpoints ? "?checkpoints=1" : "");
  ApiResult result = CallJson(ctx, request);
  if (!result.ok()) return result.exit_code;
  if (ctx.json) {
    PrintJson(ctx, result.body);
    return kExitOk;
  }
  const std::string id = JsonString(result.body, "job_id", job);
  const std::string trial_dir = JsonString(result.body, "trial_dir");
  *ctx.out << id << ": deleted";
  if (options.checkpoints) {
    *ctx.out << " with its trial dir " << Printable(trial_dir);
  } else if (!trial_dir.empty()) {
    *ctx.out << " (its trial dir " << Printable(trial_dir) << " stays)";
  }
  *ctx.out << "\n";
  return kExitOk;
}

}  // namespace cli
}  // namespace traintl
