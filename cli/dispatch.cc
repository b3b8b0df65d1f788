#include "cli/exit_codes.h"
#include "cli/verbs.h"

namespace traintl {
namespace cli {

int RunVerb(const CommandLine& cl, CliContext& ctx) {
  try {
    if (cl.verb == "submit") return RunSubmit(cl.submit, ctx);
    if (cl.verb == "validate") return RunValidate(cl.submit.spec_path, ctx);
    if (cl.verb == "status") return RunStatus(cl.job, ctx);
    if (cl.verb == "list") return RunList(cl.list, ctx);
    if (cl.verb == "logs") return RunLogs(cl.logs, ctx);
    if (cl.verb == "stop") return RunStop(cl.job, cl.job_verb, ctx);
    if (cl.verb == "resubmit") return RunResubmit(cl.job, cl.job_verb, ctx);
    if (cl.verb == "delete") return RunDelete(cl.job, cl.job_verb, ctx);
    if (cl.verb == "tune") return RunTune(cl.tune, ctx);
    if (cl.verb == "nodes") return RunNodes(ctx);
    if (cl.verb == "dashboard") return RunDashboard(ctx);
    if (cl.verb == "checkpoints") return RunCheckpoints(cl.job, ctx);
    if (cl.verb == "metrics") return RunMetrics(cl.job, ctx, cl.metrics);
  } catch (const nlohmann::json::exception& e) {
    // The verbs read answers tolerantly; this is a daemon answer of an unexpected shape.
    *ctx.err << "traintl: unexpected answer from the daemon: " << e.what() << "\n";
    return kExitServerError;
  }
  *ctx.err << "traintl: unknown command '" << cl.verb << "'\n";
  return kExitUsage;
}

}  // namespace cli
}  // namespace traintl
