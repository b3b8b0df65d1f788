// `traintl dashboard`: where the daemon's web dashboard is, and a link that logs in.
#include <nlohmann/json.hpp>

#include "cli/exit_codes.h"
#include "cli/format.h"
#include "cli/verbs.h"

namespace traintl {
namespace cli {

int RunDashboard(CliContext& ctx) {
  const Connection& c = ctx.connection;
  const std::string url = std::string(c.tls ? "https://" : "http://") + c.address + "/ui/";
  // The link holds a single-use code the daemon makes for the token (valid two minutes),
  // not the token: a browser's history keeps every link it opened.
  std::string login;
  int64_t expires_in_s = 0;
  if (!c.token.empty()) {
    HttpRequest request;
    request.method = "POST";
    request.target = "/ui/codes";
    ApiResult result = CallJson(ctx, request);
    if (!result.ok()) return result.exit_code;
    const std::string code = JsonString(result.body, "code");
    // Hex from the daemon; anything else is not put in a link.
    if (code.empty() || code.find_first_not_of("0123456789abcdef") != std::string::npos) {
      *ctx.err << "traintl: the daemon's answer has no login code\n";
      return kExitServerError;
    }
    login = url + "?code=" + code;
    expires_in_s = JsonInt(result.body, "expires_in_s").value_or(0);
  }
  if (ctx.json) {
    nlohmann::json out = {{"url", url}, {"login_url", login}};
    if (!login.empty()) out["login_expires_in_s"] = expires_in_s;
    *ctx.out << out.dump(2) << "\n";
    return kExitOk;
  }
  *ctx.out << "Dashboard: " << url << "\n";
  if (login.empty()) {
    *ctx.out << "No token found (" << c.token_problem << "): log in on the page with the token.\n";
  } else {
    *ctx.out << "Log in:    " << login << "\n"
             << "(the link logs in once, within " << expires_in_s << " s)\n";
  }
  return kExitOk;
}

}  // namespace cli
}  // namespace traintl
