// `traintl metrics JOB`: the history of rank 0's reports, and the latest; with --plot, a
// picture of every rank's curves (cli/plot.h).

#include <algorithm>
#include <cstdlib>
#include <utility>
#include <vector>

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

std::string FormatRankMetrics(const nlohmann::json& metrics) {
  const auto& ranks = JsonField(metrics, "ranks");
  Table table({"RANK", "ATTEMPT", "SEQ", "TIME", "METRICS"});
  for (size_t i = 0; i < 3; ++i) table.AlignRight(i);
  if (ranks.is_object()) {
    // By rank number, not the keys' text order ("10" < "2").
    std::vector<std::pair<int, const nlohmann::json*>> order;
    for (auto it = ranks.begin(); it != ranks.end(); ++it)
      order.emplace_back(std::atoi(it.key().c_str()), &*it);
    std::sort(order.begin(), order.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [rank, reports] : order) {
      for (const auto& h : *reports) {
        table.AddRow({std::to_string(rank), std::to_string(JsonInt(h, "attempt").value_or(0)),
                      std::to_string(JsonInt(h, "seq").value_or(0)), FormatTime(JsonInt(h, "time")),
                      FormatMetrics(JsonField(h, "metrics"))});
      }
    }
  }
  if (table.num_rows() == 0)
    return "no reports of these ranks kept (the head keeps them in memory)\n";
  return table.Render();
}

int RunMetrics(const std::string& job, CliContext& ctx, const MetricsOptions& options) {
  // Every rank's reports (or the chosen ones') come from the head's memory: ?ranks=.
  std::string ranks;
  if (options.all_ranks || (!options.plot.empty() && options.ranks.empty())) {
    ranks = "all";
  } else {
    for (int r : options.ranks) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
  }
  const std::string target = JobPath(job, "/metrics") + (ranks.empty() ? "" : "?ranks=" + ranks);
  if (options.plot.empty()) {
    const bool per_rank = !ranks.empty();
    return GetAndShow(ctx, target, [per_rank](const nlohmann::json& body) {
      return per_rank ? FormatRankMetrics(body) : FormatMetricsReport(body);
    });
  }
  Result<PlotFormat> format = PlotFormatForPath(options.plot);
  if (!format.ok()) {
    *ctx.err << "traintl: " << format.status().message() << "\n";
    return kExitUsage;
  }
  HttpRequest request;
  request.target = target;
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
