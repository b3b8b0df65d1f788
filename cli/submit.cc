// `traintl submit JOB_JSON [--wait]`: uploads the training library (or a python or command
// job's packed working_dir) content-addressed,
// submits the job, and optionally follows it to its end.

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "cli/exit_codes.h"
#include "cli/format.h"
#include "cli/hash_cache.h"
#include "cli/verbs.h"
#include "cli/working_dir.h"
#include "common/crypto.h"
#include "common/elf_exports.h"
#include "common/file_util.h"
#include "common/json_depth.h"
#include "proto/job_spec.h"
#include "traintl/abi.h"

namespace traintl {
namespace cli {
namespace {

constexpr int kPostAttempts = 3;
// Larger libraries are refused before reading them (daemons accept 512 MiB by default,
// --max-upload-mb); the cap keeps a mistaken path (a huge file) from exhausting memory.
constexpr size_t kMaxLibraryBytes = size_t{2} << 30;
constexpr int64_t kPostRetryDelayMs = 1000;
constexpr int64_t kUploadTimeoutMs = 600000;
// Without a terminal, metrics lines are rate-limited so that CI logs stay readable.
constexpr int64_t kPlainMetricsIntervalMs = 5000;

// "syntax error while parsing value - ..." out of nlohmann's "[json.exception...] parse
// error at line 3, column 5: syntax error ...".
std::string ParseErrorReason(const std::string& what) {
  size_t column = what.find("column ");
  if (column != std::string::npos) {
    size_t colon = what.find(": ", column);
    if (colon != std::string::npos) return what.substr(colon + 2);
  }
  size_t bracket = what.find("] ");
  return bracket == std::string::npos ? what : what.substr(bracket + 2);
}

// Reads the library named by the spec; on failure prints why and sets *exit_code.
bool ReadLibrary(const nlohmann::json& spec, const std::string& spec_path, CliContext& ctx,
                 std::string* library, std::string* bytes, int* exit_code) {
  *exit_code = kExitUsage;
  const auto& entrypoint = JsonField(spec, "entrypoint");
  const auto& lib = JsonField(entrypoint, "library");
  if (!lib.is_string() || lib.get<std::string>().empty()) {
    *ctx.err << "traintl: invalid job spec: entrypoint.library: required: the path of the "
                "training library (.so)\n";
    return false;
  }
  *library = lib.get<std::string>();
  std::string absolute = AbsolutePath(*library);
  std::string problem;
  if (IsDirectory(*library)) {
    problem = "is a directory";
  } else {
    // Not a plain ReadFile: a FIFO would block it forever, /dev/zero would exhaust memory.
    auto data = ReadRegularFile(*library, kMaxLibraryBytes);
    if (data.ok()) {
      *bytes = std::move(*data);
      return true;
    }
    problem =
        data.status().code() == Status::Code::kNotFound ? "no such file" : data.status().message();
  }
  *ctx.err << "traintl: cannot read the training library " << *library
           << " (entrypoint.library, resolved as " << absolute << "): " << problem << "\n";
  if ((*library)[0] != '/') {
    *ctx.err << "  A relative library path is resolved against the current directory.";
    std::string beside_spec = JoinPath(DirName(spec_path), *library);
    if (DirName(spec_path) != "." && PathExists(beside_spec)) {
      *ctx.err << " Did you mean " << beside_spec << "?";
    }
    *ctx.err << "\n";
  }
  return false;
}

// What traintl-worker will find in the library, read from its ELF file (nothing of it
// runs): a shared object of this machine exporting the ABI version and the entry point.
// On failure prints why and returns false. `summary` says what was found.
bool CheckLibraryExports(const std::string& library, const std::string& function, CliContext& ctx,
                         std::string* summary) {
  auto symbols = ListExportedFunctions(library, "traintl_");
  std::string problem;
  if (!symbols.ok()) {
    problem = symbols.status().message();
  } else if (!std::binary_search(symbols->begin(), symbols->end(),
                                 std::string(TRAINTL_ABI_VERSION_SYMBOL))) {
    problem = "not a traintl training library: it does not export " TRAINTL_ABI_VERSION_SYMBOL
              " (include <traintl/train.h> and export the function with TRAINTL_ENTRYPOINT)";
  } else {
    const std::string prefix = TRAINTL_ENTRY_SYMBOL_PREFIX;
    std::vector<std::string> entries;
    for (const auto& s : *symbols)
      if (s.rfind(prefix, 0) == 0) entries.push_back(s.substr(prefix.size()));
    std::string listed;
    for (const auto& e : entries) listed += (listed.empty() ? "" : ", ") + e;
    if (entries.empty()) {
      problem = "it exports no entry point (export one with TRAINTL_ENTRYPOINT)";
    } else if (function.empty() && entries.size() > 1) {
      problem = "it exports several entry points (" + listed + "); name one in entrypoint.function";
    } else if (!function.empty() &&
               std::find(entries.begin(), entries.end(), function) == entries.end()) {
      problem = "entrypoint.function: it exports no entry point " + function +
                " (it exports: " + listed + ")";
    } else {
      *summary = "exports " + (function.empty() ? entries[0] : function);
      return true;
    }
  }
  *ctx.err << "traintl: the training library " << library << " (entrypoint.library): " << problem
           << "\n";
  return false;
}

// Makes sure the daemon has the blob `sha256` (`what` names it); returns an exit code.
int UploadBlob(const std::string& what, const std::string& bytes, const std::string& sha256,
               CliContext& ctx) {
  HttpRequest head;
  head.method = "HEAD";
  head.target = "/v1/blobs/" + sha256;
  auto exists = ctx.client->Send(head);
  if (!exists.ok()) return ReportTransportError(ctx, exists.status());
  if (exists->status == 200) return kExitOk;
  if (exists->status != 404) return ReportHttpError(ctx, *exists);

  HttpRequest put;
  put.method = "PUT";
  put.target = "/v1/blobs/" + sha256;
  put.content_type = "application/octet-stream";
  put.body = bytes;
  put.timeout_ms = kUploadTimeoutMs;
  auto uploaded = ctx.client->Send(put);
  if (!uploaded.ok()) return ReportTransportError(ctx, uploaded.status());
  if (uploaded->status / 100 != 2) return ReportHttpError(ctx, *uploaded);
  if (!ctx.json) {
    *ctx.err << "uploaded " << what << " (" << FormatBytes(static_cast<double>(bytes.size()))
             << ", sha256 " << sha256.substr(0, 12) << ")\n";
  }
  return kExitOk;
}

bool IsTerminal(const std::string& state) {
  return state == "SUCCEEDED" || state == "FAILED" || state == "STOPPED";
}

// Follows one job's detail answers and prints what changed. Owns the redrawable status
// line on a terminal.
class ProgressPrinter {
 public:
  explicit ProgressPrinter(CliContext& ctx) : ctx_(ctx) {}

  void Update(const nlohmann::json& job) {
    std::string state = JsonString(job, "state");
    int64_t attempt = JsonInt(job, "attempt").value_or(0);
    const auto& attempts = JsonField(job, "attempts");

    // Attempts that began and ended between two polls (even before the first poll that
    // saw the job running) ended before this one began.
    for (int64_t a = last_ended_reported_ + 1; a < attempt; ++a) ReportAttemptEnd(job, a);
    last_ended_reported_ = std::max(last_ended_reported_, attempt - 1);

    std::string headline;
    if (state == "PENDING") {
      headline = "PENDING";
      std::string reason = JsonString(job, "pending_reason");
      if (!reason.empty()) headline += ": " + reason;
    } else if (state == "STARTING" || state == "RUNNING") {
      headline = "attempt " + std::to_string(attempt) + " " + state;
      if (state == "STARTING") {
        if (auto workers = JsonInt(job, "num_workers")) {
          headline += " (" + std::to_string(*workers) + " workers)";
        }
      }
      const auto& current = FindAttempt(attempts, attempt);
      std::string restored = JsonString(current, "restored_from");
      if (!restored.empty()) headline += ", restored from " + restored;
    }
    if (!headline.empty() && headline != last_headline_) {
      Line(headline);
      last_headline_ = headline;
    }

    const auto& ckpt = JsonField(job, "latest_checkpoint");
    if (auto id = JsonInt(ckpt, "id"); id && reported_checkpoints_.insert(*id).second) {
      std::string line = "checkpoint #" + std::to_string(*id) + " committed (attempt " +
                         std::to_string(JsonInt(ckpt, "attempt").value_or(0)) + ", seq " +
                         std::to_string(JsonInt(ckpt, "seq").value_or(0)) +
                         "): " + JsonString(ckpt, "path");
      Line(line);
    }

    std::string metrics = FormatMetrics(JsonField(job, "metrics"));
    if (!metrics.empty() && metrics != last_metrics_) {
      if (ctx_.out_is_tty) {
        // The outcome, printed next, repeats the final metrics.
        if (IsTerminal(state)) return;
        last_metrics_ = metrics;
        DrawStatus(state, attempt);
      } else if (last_metrics_line_ms_ < 0 ||
                 ctx_.now_ms() - last_metrics_line_ms_ >= kPlainMetricsIntervalMs) {
        last_metrics_ = metrics;
        last_metrics_line_ms_ = ctx_.now_ms();
        Line("metrics: " + metrics);
      }
    }
  }

  // A plain line, above the status line on a terminal.
  void Line(const std::string& text) {
    ClearStatus();
    *ctx_.out << "[" << FormatClock(ctx_.now_ms()) << "] " << Printable(text) << "\n";
    ctx_.out->flush();
  }

  void ClearStatus() {
    if (status_shown_) {
      *ctx_.out << "\r\033[K";
      status_shown_ = false;
    }
  }

  static const nlohmann::json& FindAttempt(const nlohmann::json& attempts, int64_t number) {
    static const nlohmann::json kNull;
    if (!attempts.is_array()) return kNull;
    for (const auto& a : attempts) {
      if (JsonInt(a, "attempt") == number) return a;
    }
    return kNull;
  }

  // "rank 1, SIGSEGV: reason" for an attempt that failed.
  static std::string FailureSummary(const nlohmann::json& attempt) {
    std::string out;
    if (auto rank = JsonInt(attempt, "failed_rank")) out = "rank " + std::to_string(*rank);
    std::string exit = FormatExit(attempt);
    if (!exit.empty()) out += (out.empty() ? "" : ", ") + exit;
    std::string reason = JsonString(attempt, "reason");
    if (!reason.empty()) out += (out.empty() ? "" : ": ") + reason;
    return out;
  }

 private:
  void ReportAttemptEnd(const nlohmann::json& job, int64_t number) {
    const auto& a = FindAttempt(JsonField(job, "attempts"), number);
    if (a.is_null()) return;
    std::string state = JsonString(a, "state", "ENDED");
    std::string summary = FailureSummary(a);
    std::string line = "attempt " + std::to_string(number) + " " + state;
    if (!summary.empty()) line += ": " + summary;
    if (state == "FAILED") {
      int64_t max_failures = JsonInt(job, "max_failures").value_or(0);
      line += "; restarting (failures " + std::to_string(JsonInt(job, "failures").value_or(0)) +
              (max_failures < 0 ? ", unlimited" : " of " + std::to_string(max_failures)) + ")";
    }
    Line(line);
  }

  void DrawStatus(const std::string& state, int64_t attempt) {
    std::string text = "[" + FormatClock(ctx_.now_ms()) + "] " + state + " attempt " +
                       std::to_string(attempt) + "  " + last_metrics_;
    size_t width = ctx_.terminal_width > 1 ? static_cast<size_t>(ctx_.terminal_width - 1) : 99;
    *ctx_.out << "\r\033[K" << Truncate(text, width);
    ctx_.out->flush();
    status_shown_ = true;
  }

  CliContext& ctx_;
  int64_t last_ended_reported_ = 0;
  std::string last_headline_;
  std::string last_metrics_;
  int64_t last_metrics_line_ms_ = -1;
  std::set<int64_t> reported_checkpoints_;
  bool status_shown_ = false;
};

int Outcome(const nlohmann::json& job, ProgressPrinter* progress, CliContext& ctx) {
  std::string state = JsonString(job, "state");
  int code = state == "SUCCEEDED" ? kExitOk : state == "STOPPED" ? kExitJobStopped : kExitJobFailed;
  if (ctx.json) {
    PrintJson(ctx, job);
    return code;
  }
  std::string span = FormatSpan(JsonInt(job, "started_at"), JsonInt(job, "ended_at"), ctx.now_ms());
  int64_t attempt = JsonInt(job, "attempt").value_or(0);
  std::string line = JsonString(job, "job_id") + " " + state;
  if (span != "-") line += " after " + span;
  if (attempt > 0) line += " (attempt " + std::to_string(attempt) + ")";
  std::string message = JsonString(job, "message");
  if (!message.empty()) line += ": " + message;
  progress->Line(line);

  std::string metrics = FormatMetrics(JsonField(job, "metrics"));
  if (!metrics.empty()) *ctx.out << "  final metrics: " << metrics << "\n";
  const auto& ckpt = JsonField(job, "latest_checkpoint");
  if (ckpt.is_object()) {
    *ctx.out << "  latest checkpoint: " << Printable(JsonString(ckpt, "path")) << "\n";
  }
  const auto& attempts = JsonField(job, "attempts");
  if (state == "FAILED" && attempts.is_array() && !attempts.empty()) {
    const auto& last = attempts.back();
    std::string summary = ProgressPrinter::FailureSummary(last);
    if (!summary.empty()) *ctx.out << "  failed: " << Printable(summary) << "\n";
    std::string tail = JsonString(last, "log_tail");
    if (!tail.empty()) {
      auto rank = JsonInt(last, "failed_rank");
      *ctx.out << "  log tail" << (rank ? " of rank " + std::to_string(*rank) : std::string())
               << ":\n"
               << Indent(PrintableLines(tail), "    ");
    }
  }
  ctx.out->flush();
  return code;
}

}  // namespace

// Streams rank 0's log (following the job across restarts) on a thread of its own. What
// the thread shares with WaitForJob lives in Shared, which the thread co-owns: it may
// outlive WaitForJob (a stream still open when the job ended dies with the process).
class RankZeroLog {
 public:
  struct Shared {
    std::mutex mu;  // held for every write to ctx.out, the progress printer's too
    std::condition_variable cv;
    bool closed = false;  // WaitForJob is done with ctx.out: write nothing more
    bool done = false;    // the stream ended
  };

  RankZeroLog(const std::string& job_id, CliContext& ctx) {
    HttpRequest request;
    request.target = JobPath(job_id, "/logs") + "?rank=0&follow=1";
    request.timeout_ms = -1;  // a quiet training loop can go minutes without a line
    std::shared_ptr<HttpClient> client = ctx.new_client();
    std::thread([client, request, shared = shared_, out = ctx.out] {
      // How it ended changes nothing: WaitForJob reports the job's outcome.
      (void)client->Stream(request, [&](std::string_view data) {
        std::lock_guard<std::mutex> l(shared->mu);
        if (shared->closed) return;
        out->write(data.data(), static_cast<std::streamsize>(data.size()));
        out->flush();
      });
      std::lock_guard<std::mutex> l(shared->mu);
      shared->done = true;
      shared->cv.notify_all();
    }).detach();
  }

  std::mutex& mu() { return shared_->mu; }
  // Gives the stream up to `ms` to deliver the job's last lines (it ends with the job),
  // then closes it: returns holding mu().
  std::unique_lock<std::mutex> End(int64_t ms) {
    std::unique_lock<std::mutex> l(shared_->mu);
    shared_->cv.wait_for(l, std::chrono::milliseconds(ms), [this] { return shared_->done; });
    shared_->closed = true;
    return l;
  }

 private:
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
};

int WaitForJob(const std::string& job_id, CliContext& ctx, bool logs) {
  // Log lines and a redrawn status line do not mix: with logs, progress comes as lines.
  CliContext progress_ctx = ctx;
  progress_ctx.out_is_tty = ctx.out_is_tty && !logs;
  ProgressPrinter progress(progress_ctx);
  std::unique_ptr<RankZeroLog> log;
  std::mutex no_log_mu;
  if (logs && ctx.new_client) log = std::make_unique<RankZeroLog>(job_id, ctx);
  std::unique_lock<std::mutex> printing(log ? log->mu() : no_log_mu, std::defer_lock);
  int64_t unreachable_since = -1;
  for (;;) {
    HttpRequest request;
    request.target = JobPath(job_id);
    auto response = ctx.client->Send(request);
    bool transient = !response.ok() || response->status == 503;
    if (transient) {
      int64_t now = ctx.now_ms();
      if (unreachable_since < 0) {
        unreachable_since = now;
        if (!ctx.json) {
          progress.ClearStatus();
          std::string why = response.ok() ? ErrorText(*response) : response.status().message();
          *ctx.err << "traintl: lost contact with the traintld at " << ctx.connection.address
                   << " (" << why << "); retrying\n";
        }
      } else if (now - unreachable_since >= ctx.reconnect_grace_ms) {
        progress.ClearStatus();
        return response.ok() ? ReportHttpError(ctx, *response)
                             : ReportTransportError(ctx, response.status());
      }
      ctx.sleep_ms(ctx.poll_interval_ms);
      continue;
    }
    if (unreachable_since >= 0 && !ctx.json) *ctx.err << "traintl: reconnected\n";
    unreachable_since = -1;
    if (response->status / 100 != 2) {
      progress.ClearStatus();
      return ReportHttpError(ctx, *response);
    }
    auto job = ParseJsonBounded(response->body);
    if (!job.is_object()) {
      progress.ClearStatus();
      *ctx.err << "traintl: the daemon's answer to GET " << request.target
               << " is not a JSON object\n";
      return kExitServerError;
    }
    if (IsTerminal(JsonString(job, "state"))) {
      // The log's last lines come first (its stream ends with the job).
      std::unique_lock<std::mutex> ended = log ? log->End(5000) : std::unique_lock<std::mutex>();
      if (!ctx.json) progress.Update(job);
      return Outcome(job, &progress, ctx);
    }
    printing.lock();
    if (!ctx.json) progress.Update(job);
    printing.unlock();
    ctx.sleep_ms(ctx.poll_interval_ms);
  }
}

int RunValidate(const std::string& spec_path, CliContext& ctx) {
  int code = kExitOk;
  nlohmann::json spec;
  if (!ReadSpecFile(spec_path, "job spec", kMaxSpecDepth, ctx, &spec, &code)) return code;
  SpecError bad;
  auto parsed = ParseJobSpec(spec, &bad);
  if (!parsed.ok()) {
    *ctx.err << "traintl: " << spec_path << ": invalid job spec: " << bad.ToString() << "\n";
    return kExitUsage;
  }
  std::string found;
  if (parsed->entry_kind == EntrypointKind::kLibrary) {
    std::string library, bytes;
    if (!ReadLibrary(spec, spec_path, ctx, &library, &bytes, &code)) return code;
    if (!CheckLibraryExports(library, parsed->function, ctx, &found)) return kExitUsage;
    found = library + " " + found;
  } else if (!parsed->working_dir.empty()) {
    PackedWorkingDir packed;
    if (!PackWorkingDir(*parsed, spec_path, ctx, &packed, &code)) return code;
    found = "working_dir " + parsed->working_dir + ": " + std::to_string(packed.files) +
            " files, " + std::to_string(packed.bytes.size()) + " bytes packed";
  }
  // The daemon's checks (the same spec rules, and whether the cluster could ever run it),
  // with nothing stored.
  HttpRequest post;
  post.method = "POST";
  post.target = "/v1/jobs?dry_run=1";
  post.content_type = "application/json";
  post.body = nlohmann::json{{"spec", spec}}.dump();
  ApiResult result = CallJson(ctx, post);
  if (!result.ok()) return result.exit_code;
  if (ctx.json) {
    PrintJson(ctx, result.body);
    return kExitOk;
  }
  *ctx.out << spec_path << ": valid";
  if (!found.empty()) *ctx.out << "; " << found;
  *ctx.out << "; the cluster can run it\n";
  return kExitOk;
}

bool ReadSpecFile(const std::string& path, const std::string& what, int max_depth, CliContext& ctx,
                  nlohmann::json* spec, int* exit_code) {
  *exit_code = kExitUsage;
  if (IsDirectory(path)) {
    *ctx.err << "traintl: " << path << " is a directory, not a " << what << "\n";
    return false;
  }
  auto text = ReadRegularFile(path, kMaxSpecTextBytes);
  if (!text.ok()) {
    *ctx.err << "traintl: cannot read the " << what << " " << path << ": "
             << text.status().message() << "\n";
    return false;
  }
  // Checked before parsing: the document is dumped (recursively) to send it.
  if (JsonTooDeep(*text, max_depth)) {
    *ctx.err << "traintl: " << path << ": invalid " << what << ": nested deeper than " << max_depth
             << " levels\n";
    return false;
  }
  try {
    *spec = nlohmann::json::parse(*text);
  } catch (const nlohmann::json::parse_error& e) {
    size_t offset = e.byte > 0 ? std::min<size_t>(e.byte - 1, text->size()) : 0;
    size_t line = 1, line_start = 0;
    for (size_t i = 0; i < offset; ++i) {
      if ((*text)[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    }
    *ctx.err << "traintl: " << path << ":" << line << ":" << (offset - line_start + 1)
             << ": invalid JSON: " << ParseErrorReason(e.what()) << "\n";
    return false;
  }
  if (!spec->is_object()) {
    *ctx.err << "traintl: " << path << ": the " << what << " must be a JSON object\n";
    return false;
  }
  // The parse above keeps the last of duplicate keys silently; the daemon refuses them, so
  // say it here, with the key's path, before anything is uploaded.
  SpecError strict;
  if (!ParseJsonStrict(*text, max_depth, kMaxSpecTextBytes, &strict).ok()) {
    *ctx.err << "traintl: " << path << ": invalid " << what << ": " << strict.ToString() << "\n";
    return false;
  }
  return true;
}

int PostWithJobCode(const std::string& spec_path, const nlohmann::json& job, const JobSpec& parsed,
                    nlohmann::json body, const std::string& target, CliContext& ctx,
                    nlohmann::json* answer) {
  // The job's code: the library, or a python or command job's packed working_dir.
  int code = kExitOk;
  // A library submitted before (same file, unchanged) is neither read nor hashed again,
  // nor asked after: the daemon says when it lacks the blob (missing_blob), and only then
  // is it read and uploaded.
  std::string cached_library;
  if (parsed.entry_kind == EntrypointKind::kLibrary) {
    std::optional<std::string> cached = CachedSha256(ctx.cache_dir, parsed.library);
    if (cached) {
      cached_library = parsed.library;
      body["library_sha256"] = *cached;
    } else {
      std::string library, bytes;
      if (!ReadLibrary(job, spec_path, ctx, &library, &bytes, &code)) return code;
      std::string sha256 = Sha256Hex(bytes);
      code = UploadBlob(library, bytes, sha256, ctx);
      if (code != kExitOk) return code;
      RememberSha256(ctx.cache_dir, library, sha256);
      body["library_sha256"] = sha256;
    }
  } else if (!parsed.working_dir.empty()) {
    PackedWorkingDir packed;
    if (!PackWorkingDir(parsed, spec_path, ctx, &packed, &code)) return code;
    code = UploadBlob(
        "working_dir " + parsed.working_dir + " (" + std::to_string(packed.files) + " files)",
        packed.bytes, packed.sha256, ctx);
    if (code != kExitOk) return code;
    body["working_dir_sha256"] = packed.sha256;
  }

  HttpRequest post;
  post.method = "POST";
  post.target = target;
  post.content_type = "application/json";
  // The idempotency key makes a retry after a lost answer return the first job instead of
  // submitting a second one.
  post.body = body.dump();
  Result<HttpResponse> response = Status::Internal("unset");
  for (int i = 0; i < kPostAttempts; ++i) {
    if (i > 0) ctx.sleep_ms(kPostRetryDelayMs);
    response = ctx.client->Send(post);
    if (response.ok() && response->status == 400 && !cached_library.empty() &&
        ParseJsonBounded(response->body).value("missing_blob", false)) {
      // The cluster lost (or never had) the cached library's blob: read, upload, post
      // again - once.
      std::string library, bytes;
      if (!ReadLibrary(job, spec_path, ctx, &library, &bytes, &code)) return code;
      const std::string sha256 = Sha256Hex(bytes);
      code = UploadBlob(library, bytes, sha256, ctx);
      if (code != kExitOk) return code;
      RememberSha256(ctx.cache_dir, library, sha256);
      body["library_sha256"] = sha256;
      post.body = body.dump();
      cached_library.clear();
      --i;
      continue;
    }
    if (response.ok() && response->status != 503) break;
  }
  if (!response.ok()) return ReportTransportError(ctx, response.status());
  if (response->status / 100 != 2) return ReportHttpError(ctx, *response);
  *answer = ParseJsonBounded(response->body);
  return kExitOk;
}

int RunSubmit(const SubmitOptions& options, CliContext& ctx) {
  int code = kExitOk;
  nlohmann::json spec;
  if (!ReadSpecFile(options.spec_path, "job spec", kMaxSpecDepth, ctx, &spec, &code)) return code;
  // Validated here as the daemon will (same rules, proto/job_spec.h), before a possibly
  // large library is read and uploaded for a spec that would be refused.
  SpecError bad;
  auto parsed = ParseJobSpec(spec, &bad);
  if (!parsed.ok()) {
    *ctx.err << "traintl: " << options.spec_path << ": invalid job spec: " << bad.ToString()
             << "\n";
    return kExitUsage;
  }
  nlohmann::json answer;
  code =
      PostWithJobCode(options.spec_path, spec, *parsed,
                      {{"spec", spec}, {"submission_id", RandomHex(16)}}, "/v1/jobs", ctx, &answer);
  if (code != kExitOk) return code;
  std::string job_id = JsonString(answer, "job_id");
  if (job_id.empty()) {
    *ctx.err << "traintl: the daemon accepted the job but its answer has no job_id\n";
    return kExitServerError;
  }
  if (!options.wait) {
    if (ctx.json) {
      PrintJson(ctx, answer);
    } else {
      *ctx.out << job_id << "\n";
    }
    return kExitOk;
  }
  if (!ctx.json) {
    std::string name = JsonString(spec, "name");
    *ctx.out << "[" << FormatClock(ctx.now_ms()) << "] submitted " << job_id
             << (name.empty() ? "" : " (" + name + ")") << "\n";
    if (ctx.out_is_tty) {
      *ctx.out << "  Ctrl-C stops watching, not the job (traintl stop " << job_id << ")\n";
    }
  }
  // --json prints one JSON document: no log text around it.
  return WaitForJob(job_id, ctx, options.logs && !ctx.json);
}

}  // namespace cli
}  // namespace traintl
