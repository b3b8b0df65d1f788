#include <catch2/catch.hpp>

#include "daemon/http/responder.h"
#include "daemon/http/router.h"
#include "daemon/http/uri.h"

using namespace traintl::http;

namespace {
void Noop(const Request&, std::shared_ptr<Responder>) {}
}  // namespace

TEST_CASE("PercentDecode decodes and refuses malformed escapes and NUL") {
  CHECK(PercentDecode("a%20b%2Fc") == std::optional<std::string>("a b/c"));
  CHECK(PercentDecode("%2e%2E") == std::optional<std::string>(".."));
  CHECK(PercentDecode("a+b") == std::optional<std::string>("a+b"));
  CHECK(PercentDecode("a+b", true) == std::optional<std::string>("a b"));
  CHECK_FALSE(PercentDecode("%zz").has_value());
  CHECK_FALSE(PercentDecode("abc%2").has_value());
  CHECK_FALSE(PercentDecode("abc%").has_value());
  CHECK_FALSE(PercentDecode("a%00b").has_value());
}

TEST_CASE("ParseQuery splits, decodes, keeps the last repeated key") {
  auto q = ParseQuery("a=1&b=x%20y&c=p+q&flag&&a=2&=ignored");
  REQUIRE(q.has_value());
  CHECK(q->at("a") == "2");
  CHECK(q->at("b") == "x y");
  CHECK(q->at("c") == "p q");
  CHECK(q->at("flag").empty());
  CHECK(q->count("") == 0);
  CHECK_FALSE(ParseQuery("a=%G1").has_value());
  CHECK(ParseQuery("")->empty());
}

TEST_CASE("Router matches literals before captures and reports 405 methods") {
  Router r;
  r.Add("GET", "/v1/jobs", Noop);
  r.Add("POST", "/v1/jobs", Noop);
  r.Add("GET", "/v1/jobs/{job}", Noop);
  r.Add("GET", "/v1/jobs/special", Noop);
  r.Add("POST", "/v1/jobs/{job}/stop", Noop);

  auto m = r.Match("GET", "/v1/jobs/special");
  REQUIRE(m.kind == RouteMatch::Kind::kFound);
  CHECK(m.route->pattern == "/v1/jobs/special");

  m = r.Match("GET", "/v1/jobs/abc%20d");
  REQUIRE(m.kind == RouteMatch::Kind::kFound);
  CHECK(m.route->pattern == "/v1/jobs/{job}");
  CHECK(m.params.at("job") == "abc d");

  m = r.Match("DELETE", "/v1/jobs");
  CHECK(m.kind == RouteMatch::Kind::kMethodNotAllowed);
  CHECK(m.allow == "GET, POST");

  CHECK(r.Match("GET", "/v1/jobs/x/stop").kind == RouteMatch::Kind::kMethodNotAllowed);
  CHECK(r.Match("GET", "/v1/nope").kind == RouteMatch::Kind::kNotFound);
  CHECK(r.Match("GET", "/v1/jobs/").kind == RouteMatch::Kind::kBadRequest);
  CHECK(r.Match("GET", "/v1/jobs/a/").kind == RouteMatch::Kind::kNotFound);
}

TEST_CASE("Router refuses traversal in captures") {
  Router r;
  r.Add("GET", "/files/{name}", Noop);
  for (const char* p :
       {"/files/..", "/files/.", "/files/%2e%2e", "/files/%2E%2e", "/files/..%2Fetc",
        "/files/a%2fb", "/files/%2F", "/files/%00", "/files/%zz", "/files/"}) {
    INFO(p);
    CHECK(r.Match("GET", p).kind == RouteMatch::Kind::kBadRequest);
  }
  // Dots inside a name are fine.
  auto m = r.Match("GET", "/files/a..b");
  REQUIRE(m.kind == RouteMatch::Kind::kFound);
  CHECK(m.params.at("name") == "a..b");
  // "/files/../x" has a different segment count: no route at all.
  CHECK(r.Match("GET", "/files/../x").kind == RouteMatch::Kind::kNotFound);
}
