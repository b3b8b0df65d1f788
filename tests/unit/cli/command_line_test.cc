#include <catch2/catch.hpp>

#include "cli/command_line.h"

using traintl::cli::CommandLine;
using traintl::cli::HelpText;
using traintl::cli::ParseCommandLine;

namespace {

CommandLine Parse(std::vector<std::string> args) {
  auto r = ParseCommandLine(args);
  INFO(r.status().message());
  REQUIRE(r.ok());
  return *r;
}

std::string ParseError(std::vector<std::string> args) {
  auto r = ParseCommandLine(args);
  REQUIRE_FALSE(r.ok());
  return r.status().message();
}

}  // namespace

TEST_CASE("submit takes a spec and --wait") {
  auto cl = Parse({"submit", "job.json"});
  CHECK(cl.verb == "submit");
  CHECK(cl.submit.spec_path == "job.json");
  CHECK_FALSE(cl.submit.wait);
  cl = Parse({"submit", "--wait", "dir/job.json"});
  CHECK(cl.submit.wait);
  CHECK(cl.submit.spec_path == "dir/job.json");
  CHECK_THAT(ParseError({"submit"}), Catch::Contains("missing argument"));
  CHECK_THAT(ParseError({"submit", "a.json", "b.json"}),
             Catch::Contains("unexpected argument 'b.json'"));
}

TEST_CASE("global options go before or after the verb") {
  auto cl = Parse(
      {"--address", "10.0.0.1:9000", "--json", "list", "--data-dir", "/d", "--token-file=/t"});
  CHECK(cl.verb == "list");
  CHECK(cl.global.address == "10.0.0.1:9000");
  CHECK(cl.global.json);
  CHECK(cl.global.data_dir == "/d");
  CHECK(cl.global.token_file == "/t");
  cl = Parse({"status", "abc", "--address=h:1"});
  CHECK(cl.verb == "status");
  CHECK(cl.job == "abc");
  CHECK(cl.global.address == "h:1");
}

TEST_CASE("status takes an optional job") {
  CHECK(Parse({"status"}).job.empty());
  CHECK(Parse({"status", "3f9c"}).job == "3f9c");
  CHECK_THAT(ParseError({"status", "a", "b"}), Catch::Contains("unexpected argument"));
}

TEST_CASE("logs options") {
  auto cl = Parse({"logs", "3f9c"});
  CHECK(cl.logs.job == "3f9c");
  CHECK(cl.logs.ranks.empty());
  CHECK(cl.logs.attempt == 0);
  CHECK(cl.logs.tail == -1);
  CHECK_FALSE(cl.logs.follow);
  cl = Parse({"logs", "-f", "--rank", "2", "--attempt=3", "--tail", "50", "3f9c"});
  CHECK(cl.logs.job == "3f9c");
  CHECK(cl.logs.ranks == std::vector<int>{2});
  CHECK(cl.logs.attempt == 3);
  CHECK(cl.logs.tail == 50);
  CHECK(cl.logs.follow);
  CHECK(Parse({"logs", "x", "--follow"}).logs.follow);
  cl = Parse({"logs", "x", "-n", "7", "--rank", "0,2", "--since", "5m"});
  CHECK(cl.logs.tail == 7);
  CHECK(cl.logs.ranks == std::vector<int>{0, 2});
  CHECK(cl.logs.since == "5m");
  CHECK_THAT(ParseError({"logs", "x", "--since", "yesterday"}), Catch::Contains("--since takes"));
  CHECK_THAT(ParseError({"logs", "x", "--rank", "1,,2"}), Catch::Contains("comma-separated"));
  CHECK_THAT(ParseError({"logs", "x", "--rank", "abc"}), Catch::Contains("rank"));
  CHECK_THAT(ParseError({"logs", "x", "--attempt", "0"}), Catch::Contains("--attempt"));
  CHECK_THAT(ParseError({"logs", "x", "--tail"}), Catch::Contains("tail"));
  CHECK_THAT(ParseError({"logs"}), Catch::Contains("usage: traintl logs JOB"));
}

TEST_CASE("logs since: durations back from now, or UTC times") {
  const int64_t now = 1764752400000;  // 2025-12-03T09:00:00Z
  CHECK(*traintl::cli::ParseSince("30s", now) == now - 30000);
  CHECK(*traintl::cli::ParseSince("5m", now) == now - 300000);
  CHECK(*traintl::cli::ParseSince("2h", now) == now - 7200000);
  CHECK(*traintl::cli::ParseSince("1d", now) == now - 86400000);
  CHECK(*traintl::cli::ParseSince("2025-12-03T08:00:00", now) == now - 3600000);
  CHECK(*traintl::cli::ParseSince("2025-12-03T08:00:00Z", now) == now - 3600000);
  CHECK(*traintl::cli::ParseSince("2025-12-03T08:00:00.25Z", now) == now - 3600000 + 250);
  CHECK(*traintl::cli::ParseSince("2025-12-03 08:30", now) == now - 1800000);
  CHECK(*traintl::cli::ParseSince("2025-12-03", now) == now - 9 * 3600000);
  for (const char* bad : {"", "5", "m", "5w", "5mm", "tomorrow", "2025-13-45T99:00:00"})
    CHECK_FALSE(traintl::cli::ParseSince(bad, now).ok());
}

TEST_CASE("job verbs need exactly one job") {
  for (const char* verb : {"stop", "checkpoints", "metrics"}) {
    INFO(verb);
    auto cl = Parse({verb, "abc123"});
    CHECK(cl.verb == verb);
    CHECK(cl.job == "abc123");
    CHECK_THAT(ParseError({verb}), Catch::Contains("missing argument"));
  }
  CHECK(Parse({"nodes"}).verb == "nodes");
  CHECK(Parse({"list"}).verb == "list");
  CHECK_THAT(ParseError({"nodes", "extra"}), Catch::Contains("unexpected argument 'extra'"));
}

TEST_CASE("tune actions: delete takes the experiment and --checkpoints") {
  auto run = Parse({"tune", "tune.json", "--wait"});
  CHECK(run.tune.action == "run");
  CHECK(run.tune.argument == "tune.json");
  CHECK(run.tune.wait);
  auto del = Parse({"tune", "delete", "digits-tune", "--checkpoints"});
  CHECK(del.tune.action == "delete");
  CHECK(del.tune.argument == "digits-tune");
  CHECK(del.tune.checkpoints);
  CHECK_FALSE(Parse({"tune", "delete", "e1"}).tune.checkpoints);
  CHECK_THAT(ParseError({"tune", "delete"}), Catch::Contains("tune delete needs the experiment"));
  CHECK_THAT(ParseError({"tune", "stop", "e1", "--checkpoints"}),
             Catch::Contains("--checkpoints goes with tune delete"));
  CHECK_THAT(ParseError({"tune", "delete", "e1", "--wait"}),
             Catch::Contains("--wait goes with tune TUNE_JSON or tune resume"));
}

TEST_CASE("--help works alone, per verb, and as a verb") {
  auto cl = Parse({"--help"});
  CHECK(cl.global.help);
  CHECK(cl.verb.empty());
  CHECK(Parse({"-h"}).global.help);
  for (const auto& verb : traintl::cli::VerbNames()) {
    INFO(verb);
    cl = Parse({verb, "--help"});  // no required argument needed with --help
    CHECK(cl.global.help);
    CHECK(cl.verb == verb);
    std::string text = HelpText(verb);
    CHECK_THAT(text, Catch::StartsWith("Usage: traintl " + verb));
    CHECK_THAT(text, Catch::Contains("--address"));
  }
  cl = Parse({"help", "logs"});
  CHECK(cl.global.help);
  CHECK(cl.verb == "logs");
  CHECK_THAT(HelpText("logs"), Catch::Contains("--follow"));
  CHECK_THAT(HelpText("submit"), Catch::Contains("--wait"));
  CHECK_THAT(HelpText(""), Catch::Contains("Exit codes"));
  CHECK_THAT(HelpText(""), Catch::Contains("checkpoints JOB"));
}

TEST_CASE("bad command lines are errors") {
  CHECK_THAT(ParseError({}), Catch::Contains("no command"));
  CHECK_THAT(ParseError({"frobnicate"}), Catch::Contains("unknown command 'frobnicate'"));
  CHECK_THAT(ParseError({"frobnicate"}), !Catch::Contains("did you mean"));
  CHECK_THAT(ParseError({"sbumit"}),
             Catch::Contains("unknown command 'sbumit' (did you mean 'submit'?"));
  CHECK_THAT(ParseError({"stauts"}), Catch::Contains("did you mean 'status'?"));
  CHECK_THAT(ParseError({"list", "--bogus"}), Catch::Contains("--bogus"));
  CHECK_THAT(ParseError({"list", "--bogus"}), Catch::Contains("traintl list --help"));
  // Options of one verb are not options of another.
  CHECK_THAT(ParseError({"status", "x", "--wait"}), Catch::Contains("--wait"));
  // No abbreviations: --add is not --address.
  CHECK_THAT(ParseError({"list", "--add", "h:1"}), Catch::Contains("--add"));
  CHECK_THAT(ParseError({"--address"}), Catch::Contains("address"));
}
