// The verbs of `traintl`, one source file each. Every verb takes its parsed options and a
// CliContext, prints its result (or, with ctx.json, the daemon's JSON) and returns the
// process exit code (cli/exit_codes.h).
//
// Thread-safety: each call uses only its context; run one verb at a time per context.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "cli/command_line.h"
#include "cli/context.h"
#include "proto/job_spec.h"

namespace traintl {
namespace cli {

// submit.cc
int RunSubmit(const SubmitOptions& options, CliContext& ctx);
// Polls GET /v1/jobs/{job_id} until the job ends, printing progress; returns kExitOk,
// kExitJobFailed or kExitJobStopped for the outcome (or an error exit code). With `logs`,
// rank 0's output is streamed between the progress lines (ctx.new_client's client, on a
// thread of its own).
int WaitForJob(const std::string& job_id, CliContext& ctx, bool logs = false);

// submit.cc: reads and parses a spec file (`what`: "job spec", "tune spec"), refusing
// directories, invalid or duplicate-key JSON, non-objects and nesting beyond `max_depth`;
// on failure prints why and sets *exit_code.
bool ReadSpecFile(const std::string& path, const std::string& what, int max_depth, CliContext& ctx,
                  nlohmann::json* spec, int* exit_code);
// submit.cc: posts `body` to `target` with the code that `job` (a job spec read from
// `spec_path`, parsed as `parsed`) runs: uploads its library or packed working_dir first
// and names it in the body (a cached library only by hash, uploaded when the daemon says
// it lacks it). Retries while the daemon answers 503. On success *answer is the 2xx
// answer's JSON; else the error was printed and the exit code is returned.
int PostWithJobCode(const std::string& spec_path, const nlohmann::json& job, const JobSpec& parsed,
                    nlohmann::json body, const std::string& target, CliContext& ctx,
                    nlohmann::json* answer);

// tune.cc: `traintl tune TUNE_JSON [--wait]`, `tune status|stop|resume|delete EXP`, `tune list`.
int RunTune(const TuneOptions& options, CliContext& ctx);

// submit.cc: `traintl validate JOB_JSON`: every check of submit, the library's exports
// (ELF), and the daemon's (POST /v1/jobs?dry_run=1); nothing uploaded or stored.
int RunValidate(const std::string& spec_path, CliContext& ctx);

// status.cc; an empty `job` lists the newest jobs, like `list`.
int RunStatus(const std::string& job, CliContext& ctx);
// The human-readable block for one JobDetail.
std::string FormatJobDetail(const nlohmann::json& job, int64_t now_ms);
// "exit 1", "SIGSEGV", or "" for an Attempt's exit_code/signal.
std::string FormatExit(const nlohmann::json& attempt);

// list.cc
int RunList(const ListOptions& options, CliContext& ctx);
// The job table for a {"jobs":[...]} answer.
std::string FormatJobTable(const nlohmann::json& jobs, int64_t now_ms);

// logs.cc
int RunLogs(const LogsOptions& options, CliContext& ctx);
// The request target for `options` ("/v1/jobs/<job>/logs?ranks=all..."); `since_ms` is
// options.since resolved (0: none).
std::string LogsTarget(const LogsOptions& options, int64_t since_ms = 0);

// stop.cc: stop, resubmit, delete.
int RunStop(const std::string& job, const JobVerbOptions& options, CliContext& ctx);
int RunResubmit(const std::string& job, const JobVerbOptions& options, CliContext& ctx);
int RunDelete(const std::string& job, const JobVerbOptions& options, CliContext& ctx);

// nodes.cc
int RunNodes(CliContext& ctx);
std::string FormatNodeTable(const nlohmann::json& nodes, int64_t now_ms);

// dashboard.cc: the web dashboard's address and a link that logs in with the token.
int RunDashboard(CliContext& ctx);

// checkpoints.cc
int RunCheckpoints(const std::string& job, CliContext& ctx);
std::string FormatCheckpointTable(const nlohmann::json& checkpoints);

// metrics.cc
// `options` default: the table. With options.plot, writes the plot (cli/plot.h) there.
int RunMetrics(const std::string& job, CliContext& ctx,
               const MetricsOptions& options = MetricsOptions());
std::string FormatMetricsReport(const nlohmann::json& metrics);
// The per-rank table of a metrics answer with "ranks" (?ranks=), by rank then time.
std::string FormatRankMetrics(const nlohmann::json& metrics);

// Dispatches a parsed command line (not --help/--version) to its verb.
int RunVerb(const CommandLine& command_line, CliContext& ctx);

}  // namespace cli
}  // namespace traintl
