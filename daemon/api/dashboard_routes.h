// The web dashboard's routes: the page and its files under /ui/, and the login that turns
// the cluster token into a browser session (daemon/http/browser_session.h). The page then
// calls the ordinary /v1 API with its session cookie; nothing here reads cluster state.
//
//   GET /, GET /ui          -> 302 to /ui/
//   GET /ui/                -> index.html (with ?code=C the page logs itself in with it)
//   GET /ui/{file}          -> one of the embedded files (daemon/dashboard/embedded_files.h)
//   POST /ui/login          -> form "token=T" or "code=C": 200 {"page_key"} with the
//                              session cookie (browser_session.h), or 401
//   POST /ui/logout         -> 200, the cookie cleared
//   POST /ui/codes          -> with the token: 200 {"code", "expires_in_s"}, a single-use
//                              login code valid 120 s, for a link that holds no token
//                              (`traintl dashboard`): a browser's history keeps links
//
// Only /ui/codes needs the token: the files hold no data, and the login checks its own.
//
// Thread-safety: handlers run on the server's io_context thread; they share the options,
// constant after registration, and the outstanding codes, under a mutex.
#pragma once

#include <string>

#include "daemon/http/router.h"

namespace traintl {

struct DashboardOptions {
  // The cluster's bearer token: what a login checks, and the key of the sessions' MACs.
  // Empty: every login fails (the API then fails closed too). Default "".
  std::string token;
  // The API is served over TLS: the cookie gets "Secure". Default false.
  bool tls = false;
  // Serve /ui/{file} from this directory instead of the built-in copies, read on each
  // request: for working on the dashboard without rebuilding the daemon (traintld takes
  // it from the environment variable TRAINTL_UI_DIR). Default "": the built-in copies.
  std::string files_dir;
};

void RegisterDashboardRoutes(http::Router& router, DashboardOptions options);

}  // namespace traintl
