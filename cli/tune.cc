// `traintl tune TUNE_JSON [--wait]` (uploads the trainer's code, starts the experiment),
// `traintl tune status [EXP]`, `tune stop EXP`, `tune resume EXP [--wait]`, `tune delete EXP
// [--checkpoints]`, `tune list`.

#include <algorithm>
#include <functional>
#include <map>

#include "cli/exit_codes.h"
#include "cli/format.h"
#include "cli/http_client.h"
#include "cli/verbs.h"
#include "common/crypto.h"

namespace traintl {
namespace cli {
namespace {

using nlohmann::json;

std::string TunePath(const std::string& exp, const std::string& suffix = "") {
  return "/v1/tune/" + UrlEncode(exp) + suffix;
}

std::string Metric(const json& v) { return v.is_number() ? FormatScalar(v) : "-"; }

// "lr=0.0031 hidden=64": the config's leaves, each under its last key.
std::string ConfigText(const json& config) {
  std::string out;
  std::function<void(const json&, const std::string&)> walk = [&](const json& j,
                                                                  const std::string& key) {
    if (j.is_object()) {
      for (auto it = j.begin(); it != j.end(); ++it) walk(*it, it.key());
      return;
    }
    out += (out.empty() ? "" : " ") + Printable(key) + "=" + FormatScalar(j);
  };
  walk(config, "");
  return out;
}

std::string FormatExperimentTable(const json& list, int64_t now_ms) {
  Table table({"EXPERIMENT", "NAME", "STATE", "TRIALS", "BEST", "AGE"});
  table.AlignRight(3);
  for (const auto& e : list) {
    std::string trials = std::to_string(JsonInt(e, "num_trials").value_or(0));
    const auto& by_state = JsonField(e, "trials_by_state");
    if (by_state.is_object()) {
      std::string parts;
      for (auto it = by_state.begin(); it != by_state.end(); ++it)
        parts += (parts.empty() ? "" : ", ") + std::to_string(it->get<int>()) + " " + it.key();
      if (!parts.empty()) trials += " (" + parts + ")";
    }
    const auto& best = JsonField(e, "best_trial");
    std::string best_text = "-";
    if (best.is_object())
      best_text = JsonString(e, "metric") + "=" + Metric(JsonField(best, "metric")) + " " +
                  JsonString(best, "name");
    table.AddRow({JsonString(e, "experiment_id"), JsonString(e, "name"), JsonString(e, "state"),
                  trials, best_text,
                  FormatDuration(now_ms - JsonInt(e, "created_at").value_or(now_ms))});
  }
  if (table.num_rows() == 0) return "no experiments\n";
  return table.Render();
}

std::string FormatExperiment(const json& e, int64_t now_ms) {
  // Printable: the submitter chose the names, the metric and the dir.
  std::string out = Printable(JsonString(e, "experiment_id") + " " + JsonString(e, "name") + "  " +
                              JsonString(e, "state"));
  const std::string message = JsonString(e, "message");
  if (!message.empty()) out += ": " + Printable(message);
  out += "\n  metric: " + Printable(JsonString(e, "metric") + " (" + JsonString(e, "mode") + ")");
  out += "   created: " + FormatTime(JsonInt(e, "created_at"));
  out += "   ran: " + FormatSpan(JsonInt(e, "created_at"), JsonInt(e, "ended_at"), now_ms) + "\n";
  out += "  dir: " + Printable(JsonString(e, "exp_dir")) + "\n\n";
  const std::string metric = Printable(JsonString(e, "metric"));
  Table table({"TRIAL", "STATE", "CONFIG", "ITER", "LAST", "BEST", "REASON"});
  table.AlignRight(3);
  table.AlignRight(4);
  table.AlignRight(5);
  for (const auto& t : JsonField(e, "trials")) {
    table.AddRow({JsonString(t, "name"), JsonString(t, "state"), ConfigText(JsonField(t, "config")),
                  std::to_string(JsonInt(t, "iterations").value_or(0)),
                  Metric(JsonField(t, "last")), Metric(JsonField(t, "best")),
                  Truncate(JsonString(t, "reason"), 60)});
  }
  out += table.num_rows() ? table.Render() : "no trials yet\n";
  const auto& best = JsonField(e, "best_trial");
  if (best.is_object()) {
    out += "\nbest trial: " + Printable(JsonString(best, "name")) + " (" + metric + "=" +
           Metric(JsonField(best, "metric")) + ") " + ConfigText(JsonField(best, "config")) + "\n";
    const auto& ck = JsonField(best, "checkpoint");
    if (ck.is_object()) out += "best checkpoint: " + Printable(JsonString(ck, "path")) + "\n";
  }
  return out;
}

bool Ended(const std::string& state) { return state != "RUNNING"; }

// Follows the experiment until it ends, printing each trial's state changes.
int WaitForExperiment(const std::string& id, CliContext& ctx) {
  std::map<std::string, std::string> seen;  // trial -> "STATE reason"
  for (;;) {
    HttpRequest request;
    request.target = TunePath(id);
    ApiResult result = CallJson(ctx, request);
    if (!result.ok()) return result.exit_code;
    const json& e = result.body;
    if (!ctx.json) {
      std::vector<json> trials(JsonField(e, "trials").begin(), JsonField(e, "trials").end());
      std::sort(trials.begin(), trials.end(), [](const json& a, const json& b) {
        return JsonInt(a, "index").value_or(0) < JsonInt(b, "index").value_or(0);
      });
      for (const auto& t : trials) {
        const std::string name = JsonString(t, "name");
        const std::string state = JsonString(t, "state");
        std::string line = state;
        if (state == "TERMINATED" || state == "ERROR" || state == "PAUSED") {
          const std::string reason = JsonString(t, "reason");
          line += " after " + std::to_string(JsonInt(t, "iterations").value_or(0)) +
                  " iterations, best " + Metric(JsonField(t, "best")) +
                  (reason.empty() ? "" : ": " + reason);
        } else if (state == "RUNNING") {
          line += " " + ConfigText(JsonField(t, "config"));
        }
        if (state == "PENDING" && !seen.count(name)) continue;  // queued: said when it runs
        if (seen[name] == line) continue;
        seen[name] = line;
        *ctx.out << "[" << FormatClock(ctx.now_ms()) << "] " << Printable(name + " " + line)
                 << "\n";
      }
      ctx.out->flush();
    }
    const std::string state = JsonString(e, "state");
    if (Ended(state)) {
      if (ctx.json) {
        PrintJson(ctx, e);
      } else {
        *ctx.out << "\n" << FormatExperiment(e, ctx.now_ms());
      }
      if (state == "STOPPED") return kExitJobStopped;
      return state == "SUCCEEDED" && JsonField(e, "best_trial").is_object() ? kExitOk
                                                                            : kExitJobFailed;
    }
    ctx.sleep_ms(ctx.poll_interval_ms);
  }
}

int RunExperiment(const TuneOptions& options, CliContext& ctx) {
  int code = kExitOk;
  json spec;
  // The trainer's job spec is nested one level down, its param_space mirrors it.
  if (!ReadSpecFile(options.argument, "tune spec", kMaxSpecDepth + 2, ctx, &spec, &code))
    return code;
  const auto trainer_it = spec.find("trainer");
  if (trainer_it == spec.end() || !trainer_it->is_object()) {
    *ctx.err << "traintl: " << options.argument << ": invalid tune spec: trainer: required (the "
             << "job spec each trial runs)\n";
    return kExitUsage;
  }
  SpecError bad;
  auto parsed = ParseJobSpec(*trainer_it, &bad);
  if (!parsed.ok()) {
    *ctx.err << "traintl: " << options.argument << ": invalid tune spec: trainer." << bad.ToString()
             << "\n";
    return kExitUsage;
  }
  json answer;
  code =
      PostWithJobCode(options.argument, *trainer_it, *parsed,
                      {{"spec", spec}, {"submission_id", RandomHex(16)}}, "/v1/tune", ctx, &answer);
  if (code != kExitOk) return code;
  const std::string id = JsonString(answer, "experiment_id");
  if (!options.wait) {
    if (ctx.json) {
      PrintJson(ctx, answer);
    } else {
      *ctx.out << id << "\n";
    }
    return kExitOk;
  }
  if (!ctx.json)
    *ctx.out << "[" << FormatClock(ctx.now_ms()) << "] started experiment " << id << " ("
             << Printable(JsonString(answer, "name"))
             << "); Ctrl-C stops watching, not the experiment\n";
  return WaitForExperiment(id, ctx);
}

int DeleteExperiment(const TuneOptions& options, CliContext& ctx) {
  HttpRequest request;
  request.method = "DELETE";
  request.target = TunePath(options.argument) + (options.checkpoints ? "?checkpoints=1" : "");
  ApiResult result = CallJson(ctx, request);
  if (!result.ok()) return result.exit_code;
  if (ctx.json) {
    PrintJson(ctx, result.body);
    return kExitOk;
  }
  const json jobs = JsonField(result.body, "job_ids");
  const std::string exp_dir = JsonString(result.body, "exp_dir");
  *ctx.out << JsonString(result.body, "experiment_id", options.argument) << ": deleted with "
           << (jobs.is_array() ? jobs.size() : 0) << " trial job"
           << (jobs.is_array() && jobs.size() == 1 ? "" : "s");
  if (JsonField(result.body, "exp_dir_removed") == true) {
    *ctx.out << " and its dir " << Printable(exp_dir);
  } else if (!exp_dir.empty()) {
    *ctx.out << " (its dir " << Printable(exp_dir) << " stays)";
  }
  *ctx.out << "\n";
  return kExitOk;
}

}  // namespace

int RunTune(const TuneOptions& options, CliContext& ctx) {
  if (options.action == "run") return RunExperiment(options, ctx);
  if (options.action == "list" || (options.action == "status" && options.argument.empty())) {
    const int64_t now = ctx.now_ms();
    return GetAndShow(ctx, "/v1/tune", [now](const json& answer) {
      return FormatExperimentTable(JsonField(answer, "experiments"), now);
    });
  }
  if (options.action == "status") {
    const int64_t now = ctx.now_ms();
    return GetAndShow(ctx, TunePath(options.argument),
                      [now](const json& e) { return FormatExperiment(e, now); });
  }
  if (options.action == "delete") return DeleteExperiment(options, ctx);
  HttpRequest request;
  request.method = "POST";
  request.target = TunePath(options.argument, "/" + options.action);
  ApiResult result = CallJson(ctx, request);
  if (!result.ok()) return result.exit_code;
  const std::string id = JsonString(result.body, "experiment_id", options.argument);
  if (options.action == "resume" && options.wait) return WaitForExperiment(id, ctx);
  if (ctx.json) {
    PrintJson(ctx, result.body);
  } else {
    *ctx.out << id << ": " << JsonString(result.body, "state") << "\n";
  }
  return kExitOk;
}

}  // namespace cli
}  // namespace traintl
