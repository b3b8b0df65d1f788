#include "cli/context.h"

#include "cli/exit_codes.h"
#include "cli/format.h"
#include "common/json_depth.h"

namespace traintl {
namespace cli {

int ExitCodeForHttpStatus(int http_status) {
  if (http_status >= 200 && http_status < 300) return kExitOk;
  switch (http_status) {
    case 400:
      return kExitUsage;
    case 401:
    case 403:
      return kExitAuth;
    case 404:
    case 409:
      return kExitNotFound;
    case 503:
      return kExitUnavailable;
    default:
      return kExitServerError;
  }
}

static std::string RawErrorText(const HttpResponse& response) {
  auto parsed = ParseJsonBounded(response.body);
  if (parsed.is_object() && parsed.contains("error") && parsed["error"].is_string()) {
    return parsed["error"].get<std::string>();
  }
  std::string text = response.body;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.pop_back();
  }
  if (!text.empty() && text.size() < 500 && !parsed.is_object()) return text;
  return "HTTP " + std::to_string(response.status);
}

// The daemon's message (it may quote a job's name or failure): shown, never acted on.
std::string ErrorText(const HttpResponse& response) {
  return PrintableLines(RawErrorText(response));
}

int ReportTransportError(const CliContext& ctx, const Status& status) {
  if (status.code() == Status::Code::kUnavailable) {
    *ctx.err << "traintl: cannot connect to the traintld at " << ctx.connection.address << " ("
             << status.message() << "). Is traintld running? Use --address or --data-dir.\n";
  } else {
    *ctx.err << "traintl: lost the connection to the traintld at " << ctx.connection.address << " ("
             << status.message() << ").\n";
  }
  return kExitUnavailable;
}

int ReportHttpError(const CliContext& ctx, const HttpResponse& response) {
  int code = ExitCodeForHttpStatus(response.status);
  auto parsed = ParseJsonBounded(response.body);
  std::string error = ErrorText(response);
  std::ostream& err = *ctx.err;
  switch (response.status) {
    case 400:
      if (parsed.is_object() && parsed.contains("field") && parsed["field"].is_string()) {
        // The daemon's message may already start with the field (its SpecError text): the
        // path is printed once.
        const std::string field = Printable(parsed["field"].get<std::string>());
        const bool named = !field.empty() && error.rfind(field + ": ", 0) == 0;
        err << "traintl: invalid job spec: " << (named || field.empty() ? "" : field + ": ")
            << error << "\n";
      } else {
        err << "traintl: " << error << "\n";
      }
      break;
    case 401:
    case 403: {
      const Connection& c = ctx.connection;
      std::string where;
      if (!c.token_problem.empty()) {
        where = "no token: " + c.token_problem;
      } else if (c.token_source == "TRAINTL_TOKEN") {
        where = "token from TRAINTL_TOKEN";
      } else {
        where = "token read from " + c.token_source;
      }
      err << "traintl: the daemon rejected the token (" << error << "; " << where
          << "). Check TRAINTL_TOKEN / --token-file / " << c.token_path << "\n";
      break;
    }
    case 409: {
      err << "traintl: " << error << "\n";
      const auto& candidates =
          parsed.is_object() ? parsed.value("candidates", nlohmann::json()) : nlohmann::json();
      if (candidates.is_array() && !candidates.empty()) {
        err << "matching jobs:\n";
        for (const auto& id : candidates) {
          err << "  " << Printable(id.is_string() ? id.get<std::string>() : id.dump()) << "\n";
        }
      }
      break;
    }
    case 503:
      err << "traintl: the traintld at " << ctx.connection.address << " is not ready: " << error
          << "\n";
      break;
    case 404:
    case 413:
      err << "traintl: " << error << "\n";
      break;
    default:
      err << "traintl: the daemon answered HTTP " << response.status << ": " << error << "\n";
  }
  return code;
}

ApiResult CallJson(CliContext& ctx, const HttpRequest& request) {
  ApiResult result;
  auto response = ctx.client->Send(request);
  if (!response.ok()) {
    result.exit_code = ReportTransportError(ctx, response.status());
    return result;
  }
  result.http_status = response->status;
  if (response->status / 100 != 2) {
    result.exit_code = ReportHttpError(ctx, *response);
    return result;
  }
  if (response->body.empty()) return result;
  result.body = ParseJsonBounded(response->body);
  if (result.body.is_discarded()) {
    *ctx.err << "traintl: the daemon's answer to " << request.method << " " << request.target
             << " is not JSON\n";
    result.exit_code = kExitServerError;
  }
  return result;
}

std::string JobPath(const std::string& job, const std::string& suffix) {
  return "/v1/jobs/" + UrlEncode(job) + suffix;
}

void PrintJson(const CliContext& ctx, const nlohmann::json& value) {
  *ctx.out << value.dump(2) << "\n";
}

int GetAndShow(CliContext& ctx, const std::string& target,
               const std::function<std::string(const nlohmann::json&)>& format) {
  HttpRequest request;
  request.target = target;
  ApiResult result = CallJson(ctx, request);
  if (!result.ok()) return result.exit_code;
  if (ctx.json) {
    PrintJson(ctx, result.body);
  } else {
    *ctx.out << format(result.body);
  }
  return kExitOk;
}

}  // namespace cli
}  // namespace traintl
