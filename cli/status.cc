// `traintl status [JOB]`: one job in detail (or the job table without JOB).

#include <cstdio>
#include <sstream>

#include "cli/exit_codes.h"
#include "cli/format.h"
#include "cli/verbs.h"

namespace traintl {
namespace cli {
namespace {

std::string CheckpointLine(const nlohmann::json& ckpt) {
  if (!ckpt.is_object()) return "-";
  std::ostringstream out;
  out << "#" << JsonInt(ckpt, "id").value_or(0) << " (attempt "
      << JsonInt(ckpt, "attempt").value_or(0) << ", seq " << JsonInt(ckpt, "seq").value_or(0)
      << ", " << FormatTime(JsonInt(ckpt, "created_at")) << ") " << JsonString(ckpt, "path");
  std::string metrics = FormatMetrics(JsonField(ckpt, "metrics"));
  if (!metrics.empty()) out << "  [" << metrics << "]";
  return out.str();
}

}  // namespace

std::string FormatExit(const nlohmann::json& attempt) {
  if (auto sig = JsonInt(attempt, "signal")) return SignalName(static_cast<int>(*sig));
  if (auto code = JsonInt(attempt, "exit_code")) return "exit " + std::to_string(*code);
  return "";
}

std::string FormatJobDetail(const nlohmann::json& job, int64_t now_ms) {
  std::ostringstream out;
  auto field = [&](const char* label, const std::string& value) {
    out << label << std::string(13 - std::string(label).size(), ' ') << Printable(value) << "\n";
  };
  std::string id = JsonString(job, "job_id");
  std::string name = JsonString(job, "name");
  field("Job:", name.empty() ? id : id + " (" + name + ")");

  std::string state = JsonString(job, "state", "?");
  std::string message = JsonString(job, "message");
  std::string pending = JsonString(job, "pending_reason");
  if (!message.empty()) {
    state += ": " + message;
  } else if (!pending.empty()) {
    state += " (" + pending + ")";
  }
  field("State:", state);

  auto attempt = JsonInt(job, "attempt").value_or(0);
  auto failures = JsonInt(job, "failures").value_or(0);
  auto max_failures = JsonInt(job, "max_failures").value_or(0);
  std::string allowed = max_failures < 0 ? "unlimited" : "of " + std::to_string(max_failures);
  field("Attempt:", (attempt > 0 ? std::to_string(attempt) : std::string("-")) + " (failures " +
                        std::to_string(failures) + " " + allowed + ")");
  if (auto workers = JsonInt(job, "num_workers")) {
    auto min = JsonInt(job, "min_workers");
    auto now = JsonInt(job, "current_workers");
    field("Workers:", min ? (now ? std::to_string(*now) + " of " : std::string()) +
                                std::to_string(*min) + "-" + std::to_string(*workers) + " (elastic)"
                          : std::to_string(*workers));
  }
  auto started = JsonInt(job, "started_at");
  auto ended = JsonInt(job, "ended_at");
  // The head's view of the running ranks: stragglers and a stalled collective, named.
  const auto& progress = JsonField(job, "progress");
  if (progress.is_object()) {
    const auto& stalled = JsonField(progress, "stalled");
    if (stalled.is_object()) {
      std::string waiting, lagging;
      for (const auto& r : JsonField(stalled, "waiting"))
        waiting += (waiting.empty() ? "" : ", ") + std::to_string(r.get<int>());
      for (const auto& r : JsonField(stalled, "lagging"))
        lagging += (lagging.empty() ? "" : ", ") + std::to_string(r.get<int>());
      const auto& for_s = JsonField(stalled, "for_s");
      field("Stalled:", "collective " + std::to_string(JsonInt(stalled, "collective").value_or(0)) +
                            ": rank(s) " + waiting + " have waited " +
                            (for_s.is_number() ? FormatScalar(for_s) : std::string("?")) +
                            " s for rank(s) " + lagging);
    }
    for (const auto& s : JsonField(progress, "stragglers")) {
      const auto& slower = JsonField(s, "slower");
      const auto& busy = JsonField(s, "busy_s");
      const auto& peers = JsonField(s, "peers_busy_s");
      char detail[96] = "";
      if (slower.is_number() && busy.is_number() && peers.is_number())
        std::snprintf(detail, sizeof detail,
                      "%.1fx the others' busy time per step (%.0f ms vs %.0f ms)",
                      slower.get<double>(), busy.get<double>() * 1000, peers.get<double>() * 1000);
      field("Straggler:", "rank " + std::to_string(JsonInt(s, "rank").value_or(-1)) + " on " +
                              JsonString(s, "node") + ": " + detail);
    }
  }
  field("Submitted:", FormatTime(JsonInt(job, "submitted_at")));
  field("Started:", FormatTime(started));
  field("Ended:", FormatTime(ended));
  field("Duration:", FormatSpan(started, ended, now_ms));
  std::string metrics = FormatMetrics(JsonField(job, "metrics"));
  field("Metrics:", metrics.empty() ? "-" : metrics);
  field("Checkpoint:", CheckpointLine(JsonField(job, "latest_checkpoint")));
  std::string trial_dir = JsonString(job, "trial_dir");
  if (!trial_dir.empty()) field("Trial dir:", trial_dir);

  const auto& attempts = JsonField(job, "attempts");
  if (attempts.is_array() && !attempts.empty()) {
    Table table({"ATTEMPT", "STATE", "STARTED", "DURATION", "FAILED RANK", "EXIT", "RESTORED FROM",
                 "REASON"});
    table.AlignRight(0);
    table.AlignRight(4);
    for (const auto& a : attempts) {
      auto failed_rank = JsonInt(a, "failed_rank");
      std::string restored = JsonString(a, "restored_from");
      table.AddRow({std::to_string(JsonInt(a, "attempt").value_or(0)), JsonString(a, "state"),
                    FormatTime(JsonInt(a, "started_at")),
                    FormatSpan(JsonInt(a, "started_at"), JsonInt(a, "ended_at"), now_ms),
                    failed_rank ? std::to_string(*failed_rank) : "", FormatExit(a),
                    restored.empty() ? "-" : restored, Truncate(JsonString(a, "reason"), 60)});
    }
    out << "\nAttempts:\n" << Indent(table.Render(), "  ");
  }

  if (JsonString(job, "state") == "FAILED" && attempts.is_array() && !attempts.empty()) {
    const auto& last = attempts.back();
    std::string tail = JsonString(last, "log_tail");
    if (!tail.empty()) {
      auto rank = JsonInt(last, "failed_rank");
      out << "\nLog tail (attempt " << JsonInt(last, "attempt").value_or(0)
          << (rank ? ", rank " + std::to_string(*rank) : std::string()) << "):\n"
          << Indent(PrintableLines(tail), "  ");
    }
  }
  return out.str();
}

int RunStatus(const std::string& job, CliContext& ctx) {
  if (job.empty()) return RunList(ListOptions{}, ctx);
  return GetAndShow(ctx, JobPath(job), [&](const nlohmann::json& body) {
    return FormatJobDetail(body, ctx.now_ms());
  });
}

}  // namespace cli
}  // namespace traintl
