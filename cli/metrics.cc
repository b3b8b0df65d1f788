// `traintl metrics JOB`: the history of rank 0's reports, and the latest.

#include "cli/exit_codes.h"
#include "cli/format.h"
#include "cli/verbs.h"

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

int RunMetrics(const std::string& job, CliContext& ctx) {
  return GetAndShow(ctx, JobPath(job, "/metrics"),
                    [&](const nlohmann::json& body) { return FormatMetricsReport(body); });
}

}  // namespace cli
}  // namespace traintl
