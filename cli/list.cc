// `traintl list` (and `traintl status` without JOB): the job table.

#include "cli/exit_codes.h"
#include "cli/format.h"
#include "cli/verbs.h"

namespace traintl {
namespace cli {

std::string FormatJobTable(const nlohmann::json& jobs, int64_t now_ms) {
  if (!jobs.is_array() || jobs.empty()) return "no jobs\n";
  Table table({"ID", "NAME", "STATE", "ATTEMPT", "WORKERS", "SUBMITTED", "DURATION", "MESSAGE"});
  table.AlignRight(3);
  table.AlignRight(4);
  for (const auto& job : jobs) {
    std::string message = JsonString(job, "message");
    if (message.empty()) message = JsonString(job, "pending_reason");
    auto attempt = JsonInt(job, "attempt");
    auto workers = JsonInt(job, "num_workers");
    table.AddRow(
        {JsonString(job, "job_id"), Truncate(JsonString(job, "name"), 24), JsonString(job, "state"),
         attempt && *attempt > 0 ? std::to_string(*attempt) : "-",
         workers ? std::to_string(*workers) : "-", FormatTime(JsonInt(job, "submitted_at")),
         FormatSpan(JsonInt(job, "started_at"), JsonInt(job, "ended_at"), now_ms),
         Truncate(message, 50)});
  }
  return table.Render();
}

int RunList(CliContext& ctx) {
  return GetAndShow(ctx, "/v1/jobs", [&](const nlohmann::json& body) {
    return FormatJobTable(JsonField(body, "jobs"), ctx.now_ms());
  });
}

}  // namespace cli
}  // namespace traintl
