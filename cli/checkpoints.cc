// `traintl checkpoints JOB`: a job's retained checkpoints, oldest first.

#include "cli/exit_codes.h"
#include "cli/format.h"
#include "cli/verbs.h"

namespace traintl {
namespace cli {

std::string FormatCheckpointTable(const nlohmann::json& checkpoints) {
  if (!checkpoints.is_array() || checkpoints.empty()) return "no checkpoints\n";
  Table table({"ID", "ATTEMPT", "SEQ", "CREATED", "LATEST", "METRICS", "PATH"});
  table.AlignRight(0);
  table.AlignRight(1);
  table.AlignRight(2);
  for (const auto& c : checkpoints) {
    const auto& latest = JsonField(c, "latest");
    std::string metrics = FormatMetrics(JsonField(c, "metrics"));
    table.AddRow({std::to_string(JsonInt(c, "id").value_or(0)),
                  std::to_string(JsonInt(c, "attempt").value_or(0)),
                  std::to_string(JsonInt(c, "seq").value_or(0)),
                  FormatTime(JsonInt(c, "created_at")),
                  latest.is_boolean() && latest.get<bool>() ? "*" : "",
                  metrics.empty() ? "-" : Truncate(metrics, 60), JsonString(c, "path")});
  }
  return table.Render();
}

int RunCheckpoints(const std::string& job, CliContext& ctx) {
  return GetAndShow(ctx, JobPath(job, "/checkpoints"), [&](const nlohmann::json& body) {
    return FormatCheckpointTable(JsonField(body, "checkpoints"));
  });
}

}  // namespace cli
}  // namespace traintl
