// `traintl metrics JOB`: the history of rank 0's reports, and the latest; with --plot, a
// picture of every rank's curves (cli/plot.h).

#include "cli/exit_codes.h"
#include "cli/format.h"
#include "cli/plot.h"
#include "cli/verbs.h"
#include "common/file_util.h"

namespace traintl {
namespace cli {

std::string FormatMetricsReport(const nlohmann::json& metrics) {
  const auto& history = JsonField(metrics, "history");
  std::string latest = FormatMetrics(JsonField(metrics, "latest"));
  if ((!history.is_array() || history.empty()) && latest.empty()) {
    return "no metrics reported yet\n";
  }
  std::string out;
  if (history.is_array() && !history.empty()) {
    Table table({"ATTEMPT", "SEQ", "TIME", "METRICS"});
    table.AlignRight(0);
    table.AlignRight(1);
    for (const auto& h : history) {
      table.AddRow({std::to_string(JsonInt(h, "attempt").value_or(0)),
                    std::to_string(JsonInt(h, "seq").value_or(0)), FormatTime(JsonInt(h, "time")),
                    FormatMetrics(JsonField(h, "metrics"))});
    }
    out = table.Render() + "\n";
  }
  out += "Latest: " + (latest.empty() ? std::string("-") : latest) + "\n";
  return out;
}

int RunMetrics(const std::string& job, CliContext& ctx, const MetricsOptions& options) {
  if (options.plot.empty()) {
    return GetAndShow(ctx, JobPath(job, "/metrics"),
                      [&](const nlohmann::json& body) { return FormatMetricsReport(body); });
  }
  Result<PlotFormat> format = PlotFormatForPath(options.plot);
  if (!format.ok()) {
    *ctx.err << "traintl: " << format.status().message() << "\n";
    return kExitUsage;
  }
  HttpRequest request;
  request.target = JobPath(job, "/metrics");
  ApiResult answer = CallJson(ctx, request);
  if (!answer.ok()) return answer.exit_code;
  // Errors name the job as the daemon resolved it, else as given.
  if (answer.body.is_object() && !answer.body.contains("job_id")) answer.body["job_id"] = job;
  Result<PlotResult> plot = PlotMetrics(answer.body, options.metrics, *format);
  if (!plot.ok()) {
    *ctx.err << "traintl: " << plot.status().message() << "\n";
    return plot.status().code() == Status::Code::kNotFound ? kExitNotFound : kExitUsage;
  }
  // Atomic, so that an image viewer watching FILE never reads half a picture.
  if (Status written = WriteFileAtomic(options.plot, plot->bytes); !written.ok()) {
    *ctx.err << "traintl: cannot write " << options.plot << ": " << written.message() << "\n";
    return kExitUsage;
  }
  // Also with --json: the answer's JSON is what `metrics JOB --json` is for.
  *ctx.out << "wrote " << options.plot << " (" << plot->points << " points, " << plot->metrics
           << " metrics)\n";
  return kExitOk;
}

}  // namespace cli
}  // namespace traintl
