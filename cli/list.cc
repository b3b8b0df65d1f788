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

int RunList(const ListOptions& options, CliContext& ctx) {
  std::string query;
  auto add = [&query](const std::string& key, const std::string& value) {
    query += (query.empty() ? "?" : "&") + key + "=" + UrlEncode(value);
  };
  if (!options.state.empty()) add("state", options.state);
  if (!options.name.empty()) add("name", options.name);
  // --all walks the pages; the daemon bounds each one.
  add("limit", std::to_string(options.all ? 1000 : options.limit));
  nlohmann::json jobs = nlohmann::json::array();
  nlohmann::json next;
  for (std::string cursor;;) {
    HttpRequest request;
    request.target = "/v1/jobs" + query + (cursor.empty() ? "" : "&cursor=" + UrlEncode(cursor));
    ApiResult result = CallJson(ctx, request);
    if (!result.ok()) return result.exit_code;
    for (const auto& job : JsonField(result.body, "jobs")) jobs.push_back(job);
    next = JsonField(result.body, "next_cursor");
    if (!options.all || !next.is_string()) break;
    cursor = next.get<std::string>();
  }
  if (ctx.json) {
    PrintJson(ctx, {{"jobs", jobs}, {"next_cursor", next}});
    return kExitOk;
  }
  *ctx.out << FormatJobTable(jobs, ctx.now_ms());
  if (next.is_string()) {
    *ctx.err << "(the newest " << jobs.size() << " shown; --limit N or --all for more)\n";
  }
  return kExitOk;
}

}  // namespace cli
}  // namespace traintl
