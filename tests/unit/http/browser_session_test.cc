// Browser sessions (daemon/http/browser_session.h): the cookie parser, and the server
// accepting the session cookie only together with its header.
#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "daemon/http/browser_session.h"
#include "daemon/http/client.h"
#include "daemon/http/responder.h"
#include "daemon/http/router.h"
#include "tests/unit/http/test_server.h"

using namespace traintl::http;
using namespace traintl::testing;

TEST_CASE("CookieValue finds one cookie among several") {
  CHECK(CookieValue("traintl_session=abc", "traintl_session") == "abc");
  CHECK(CookieValue("a=1; traintl_session=abc; b=2", "traintl_session") == "abc");
  CHECK(CookieValue("a=1;traintl_session=\"abc\"", "traintl_session") == "abc");
  CHECK(CookieValue("xtraintl_session=abc; traintl_sessionx=d", "traintl_session").empty());
  CHECK(CookieValue("traintl_session", "traintl_session").empty());
  CHECK(CookieValue("", "traintl_session").empty());
  CHECK(CookieValue("a=1;;  ; traintl_session=", "traintl_session").empty());
}

TEST_CASE("the session value is a digest of the token and none without one") {
  CHECK(SessionValueForToken("").empty());
  const std::string v = SessionValueForToken("tok");
  CHECK(v.size() == 64);
  CHECK(v != "tok");
  CHECK(v == SessionValueForToken("tok"));
  CHECK(v != SessionValueForToken("tok2"));
}

TEST_CASE("a session cookie authenticates only with the dashboard header") {
  auto run = [](bool browser_sessions) {
    TestServer s;
    s.options.browser_sessions = browser_sessions;
    s.router->Add("POST", "/v1/jobs/{job}/stop",
                  [](const Request&, std::shared_ptr<Responder> res) {
                    res->SendJson(200, {{"stopped", true}});
                  });
    s.Start();
    const std::string cookie =
        "other=1; " + std::string(kSessionCookie) + "=" + SessionValueForToken(kToken);
    auto post = [&](const std::map<std::string, std::string>& headers) {
      auto r = Fetch("127.0.0.1", s.port, "POST", "/v1/jobs/j1/stop", "", headers);
      REQUIRE(r.ok());
      return r->status;
    };
    const int with_header = post({{"Cookie", cookie}, {"X-Traintl-Ui", "1"}});
    // A cross-site form or image request can carry the cookie, never the header.
    CHECK(post({{"Cookie", cookie}}) == 401);
    // The token itself is not a session, nor is a digest of another token.
    CHECK(post({{"Cookie", std::string(kSessionCookie) + "=" + kToken}, {"X-Traintl-Ui", "1"}}) ==
          401);
    CHECK(post({{"Cookie", std::string(kSessionCookie) + "=" + SessionValueForToken("x")},
                {"X-Traintl-Ui", "1"}}) == 401);
    // A wrong bearer token is not rescued by a valid cookie.
    CHECK(post({{"Cookie", cookie}, {"X-Traintl-Ui", "1"}, {"Authorization", "Bearer no"}}) == 401);
    return with_header;
  };
  CHECK(run(true) == 200);
  CHECK(run(false) == 401);
}
