// `traintl logs JOB [--rank N[,M..]] [--attempt N] [-f] [-n N] [--since T]`: the ranks' log
// text, interleaved by the daemon (daemon/api/log_stream.h).

#include <cstdlib>

#include "cli/exit_codes.h"
#include "cli/verbs.h"

namespace traintl {
namespace cli {
namespace {

// Colours "[rank N]" prefixes (a terminal only): cyan, yellow, magenta, green, blue, red.
class RankColourer {
 public:
  explicit RankColourer(std::ostream* out) : out_(out) {}

  void Write(std::string_view data) {
    pending_.append(data.data(), data.size());
    size_t start = 0;
    for (size_t nl; (nl = pending_.find('\n', start)) != std::string::npos; start = nl + 1)
      Line(std::string_view(pending_).substr(start, nl + 1 - start));
    pending_.erase(0, start);
  }
  void Finish() {
    if (!pending_.empty()) Line(pending_);
    pending_.clear();
  }

 private:
  void Line(std::string_view line) {
    static const int kColours[] = {36, 33, 35, 32, 34, 31};
    const size_t close = line.find("] ");
    if (line.rfind("[rank ", 0) != 0 || close == std::string_view::npos || close > 16) {
      *out_ << line;
      return;
    }
    const int rank = std::atoi(std::string(line.substr(6, close - 6)).c_str());
    *out_ << "\033[" << kColours[rank % 6] << "m" << line.substr(0, close + 1) << "\033[0m"
          << line.substr(close + 1);
  }

  std::ostream* out_;
  std::string pending_;
};

}  // namespace

std::string LogsTarget(const LogsOptions& options, int64_t since_ms) {
  std::string target = JobPath(options.job, "/logs");
  if (options.ranks.size() == 1) {
    target += "?rank=" + std::to_string(options.ranks[0]);
  } else if (options.ranks.empty()) {
    target += "?ranks=all";
  } else {
    std::string list;
    for (int r : options.ranks) list += (list.empty() ? "" : ",") + std::to_string(r);
    target += "?ranks=" + list;
  }
  if (options.attempt > 0) target += "&attempt=" + std::to_string(options.attempt);
  if (options.tail >= 0) target += "&tail=" + std::to_string(options.tail);
  if (since_ms > 0) target += "&since=" + std::to_string(since_ms);
  if (options.follow) target += "&follow=1";
  return target;
}

int RunLogs(const LogsOptions& options, CliContext& ctx) {
  int64_t since_ms = 0;
  if (!options.since.empty()) {
    Result<int64_t> since = ParseSince(options.since, ctx.now_ms());
    if (!since.ok()) {
      *ctx.err << "traintl: " << since.status().message() << "\n";
      return kExitUsage;
    }
    since_ms = std::max<int64_t>(*since, 1);
  }
  HttpRequest request;
  request.target = LogsTarget(options, since_ms);
  // NO_COLOR (no-color.org) turns colour off.
  const bool colour = ctx.out_is_tty && std::getenv("NO_COLOR") == nullptr;
  RankColourer colourer(ctx.out);
  // Streamed, follow or not: a long log is printed as it arrives.
  // A quiet training loop can go minutes without a line.
  if (options.follow) request.timeout_ms = -1;
  Result<HttpResponse> response = ctx.client->Stream(request, [&](std::string_view data) {
    if (colour) {
      colourer.Write(data);
    } else {
      ctx.out->write(data.data(), static_cast<std::streamsize>(data.size()));
    }
    ctx.out->flush();
  });
  if (colour) colourer.Finish();
  if (!response.ok()) {
    ctx.out->flush();
    return ReportTransportError(ctx, response.status());
  }
  if (response->status / 100 != 2) return ReportHttpError(ctx, *response);
  ctx.out->flush();
  return kExitOk;
}

}  // namespace cli
}  // namespace traintl
