// `traintl dashboard`: where the daemon's web dashboard is, and a link that logs in.
#include <nlohmann/json.hpp>

#include "cli/exit_codes.h"
#include "cli/verbs.h"

namespace traintl {
namespace cli {

int RunDashboard(CliContext& ctx) {
  const Connection& c = ctx.connection;
  const std::string url = std::string(c.tls ? "https://" : "http://") + c.address + "/ui/";
  // The daemon's tokens are hex; the link needs no escaping for them, and others are
  // refused by the daemon anyway rather than sent somewhere else.
  const std::string login = c.token.empty() ? "" : url + "?token=" + c.token;
  if (ctx.json) {
    *ctx.out << nlohmann::json{{"url", url}, {"login_url", login}}.dump(2) << "\n";
    return kExitOk;
  }
  *ctx.out << "Dashboard: " << url << "\n";
  if (login.empty()) {
    *ctx.out << "No token found (" << c.token_problem << "): log in on the page with the token.\n";
  } else {
    *ctx.out << "Log in:    " << login << "\n"
             << "(the link holds the cluster's token: share it as you would the token)\n";
  }
  return kExitOk;
}

}  // namespace cli
}  // namespace traintl
