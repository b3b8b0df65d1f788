// Browser sessions (daemon/http/browser_session.h): the cookie parser, and the server
// accepting the session cookie only together with its header.
#include <catch2/catch.hpp>
#include <ctime>
#include <map>
#include <memory>
#include <string>
#include <vector>

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

TEST_CASE("CookieValues finds every cookie of the name") {
  CHECK(CookieValues("traintl_session=a; x=1; traintl_session=\"b\"", "traintl_session") ==
        std::vector<std::string>{"a", "b"});
  CHECK(CookieValues("x=1", "traintl_session").empty());
  // The first non-empty one.
  CHECK(CookieValue("traintl_session=; traintl_session=c", "traintl_session") == "c");
}

TEST_CASE("session cookies are named after the page's port, and all of them are tried") {
  CHECK(SessionCookieName("127.0.0.1:7450") == "traintl_session_7450");
  CHECK(SessionCookieName("[::1]:8080") == "traintl_session_8080");
  CHECK(SessionCookieName("[::1]") == "traintl_session");
  CHECK(SessionCookieName("host") == "traintl_session");
  CHECK(SessionCookieName("host:12345678") == "traintl_session");
  CHECK(SessionCookieName("host:80x") == "traintl_session");
  CHECK(SessionCookies("a=1; traintl_session_7450=x; traintl_session=y; traintl_sessionz=w; "
                       "traintl_session_7x=v") ==
        std::vector<std::string>{"traintl_session_7450=x", "traintl_session=y"});
  const BrowserSession s = NewBrowserSession("tok", 1000, 60);
  CHECK(BrowserSessionValid("traintl_session_7451=x; traintl_session_7450=" + s.cookie, s.page_key,
                            "tok", 1000));
  CHECK_FALSE(BrowserSessionValid("other_7450=" + s.cookie, s.page_key, "tok", 1000));
}

TEST_CASE("a session is its cookie and its page key together, until it expires") {
  const int64_t now = 1700000000;
  CHECK(NewBrowserSession("", now, 60).cookie.empty());
  const BrowserSession s = NewBrowserSession("tok", now, 60);
  const BrowserSession other = NewBrowserSession("tok", now, 60);
  CHECK(s.cookie.rfind("v2.", 0) == 0);
  CHECK(s.cookie.find("tok") == std::string::npos);
  CHECK(s.page_key.size() == 64);
  CHECK(s.cookie != other.cookie);  // random ids: each login its own session
  const std::string c = "traintl_session=" + s.cookie;
  CHECK(BrowserSessionValid(c, s.page_key, "tok", now));
  CHECK(BrowserSessionValid("x=1; " + c, s.page_key, "tok", now + 59));
  CHECK_FALSE(BrowserSessionValid(c, s.page_key, "tok", now + 60));  // expired
  CHECK_FALSE(BrowserSessionValid(c, "1", "tok", now));              // the old header
  CHECK_FALSE(BrowserSessionValid(c, other.page_key, "tok", now));   // another's key
  CHECK_FALSE(BrowserSessionValid(c, s.page_key, "tok2", now));      // a new token
  CHECK_FALSE(BrowserSessionValid(c, s.page_key, "", now));
  CHECK_FALSE(BrowserSessionValid("traintl_session=tok", s.page_key, "tok", now));
  // A later expiry does not keep the MAC.
  std::string longer = s.cookie;
  const size_t b = longer.find('.', 3), e = longer.find('.', b + 1);
  longer.replace(b + 1, e - b - 1, std::to_string(now + 999999));
  CHECK_FALSE(BrowserSessionValid("traintl_session=" + longer, s.page_key, "tok", now));
  // A cookie another service on the host set beside ours (cookies ignore ports) does not
  // shadow ours, whichever comes first.
  CHECK(BrowserSessionValid("traintl_session=x; " + c, s.page_key, "tok", now));
  for (const char* junk : {"v2.", "v2...", "v2.a.b.c", "v2.a.99999999999999999.c", "v1.x"}) {
    CHECK_FALSE(
        BrowserSessionValid(std::string("traintl_session=") + junk, s.page_key, "tok", now));
  }
}

TEST_CASE("a session cookie authenticates only with its page key") {
  auto run = [](bool browser_sessions) {
    TestServer s;
    s.options.browser_sessions = browser_sessions;
    s.router->Add("POST", "/v1/jobs/{job}/stop",
                  [](const Request&, std::shared_ptr<Responder> res) {
                    res->SendJson(200, {{"stopped", true}});
                  });
    s.Start();
    const BrowserSession session = NewBrowserSession(kToken, std::time(nullptr), 3600);
    const std::string cookie = "other=1; " + std::string(kSessionCookie) + "=" + session.cookie;
    auto post = [&](const std::map<std::string, std::string>& headers) {
      auto r = Fetch("127.0.0.1", s.port, "POST", "/v1/jobs/j1/stop", "", headers);
      REQUIRE(r.ok());
      return r->status;
    };
    const int with_key = post({{"Cookie", cookie}, {"X-Traintl-Ui", session.page_key}});
    // A cross-site form or image request can carry the cookie, never the header; a service
    // on another port of the host gets the cookie, never the key.
    CHECK(post({{"Cookie", cookie}}) == 401);
    CHECK(post({{"Cookie", cookie}, {"X-Traintl-Ui", "1"}}) == 401);
    // The token itself is not a session.
    CHECK(post({{"Cookie", std::string(kSessionCookie) + "=" + kToken},
                {"X-Traintl-Ui", session.page_key}}) == 401);
    // A wrong bearer token is not rescued by a valid session.
    CHECK(post({{"Cookie", cookie},
                {"X-Traintl-Ui", session.page_key},
                {"Authorization", "Bearer no"}}) == 401);
    return with_key;
  };
  CHECK(run(true) == 200);
  CHECK(run(false) == 401);
}
