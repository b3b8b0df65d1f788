// The agent <-> worker channel codec (proto/worker_events.h): every message round-trips as
// one line in the bytes the worker and the agent have always sent, malformed lines are
// refused naming the message and the field, ill-typed optional fields count as absent,
// unknown types are NotFound, and the size and depth limits hold. Never throws.
#include <catch2/catch.hpp>

#include <climits>
#include <string>
#include <variant>

#include <nlohmann/json.hpp>

#include "common/json_depth.h"
#include "proto/worker_events.h"

using namespace traintl;
using nlohmann::json;

namespace {

template <typename T>
T DecodeEventAs(const std::string& line) {
  auto e = events::DecodeWorkerEvent(line);
  INFO(line << " -> " << (e.ok() ? "ok" : e.status().message()));
  REQUIRE(e.ok());
  REQUIRE(std::holds_alternative<T>(*e));
  return std::get<T>(*e);
}

// The error of decoding `line` as a worker event; fails when it decodes.
Status EventError(const std::string& line) {
  auto e = events::DecodeWorkerEvent(line);
  INFO(line);
  REQUIRE_FALSE(e.ok());
  return e.status();
}

Status AgentError(const std::string& line) {
  auto m = events::DecodeAgentMessage(line);
  INFO(line);
  REQUIRE_FALSE(m.ok());
  return m.status();
}

}  // namespace

TEST_CASE("worker events round-trip as the lines the worker has always sent") {
  events::Report report{3, {{"loss", 0.5}, {"epoch", 1}}, "/s/seq_3/rank_0"};
  const std::vector<std::pair<events::WorkerEvent, std::string>> cases = {
      {events::Hello{2, 4242}, R"({"pid":4242,"rank":2,"type":"hello"})"},
      {report,
       R"({"checkpoint":"/s/seq_3/rank_0","metrics":{"epoch":1,"loss":0.5},"seq":3,"type":"report"})"},
      {events::Report{0, json::object(), ""},
       R"({"checkpoint":null,"metrics":{},"seq":0,"type":"report"})"},
      {events::Report{1, json::object(), "", /*held=*/true},
       R"({"checkpoint":null,"held":true,"metrics":{},"seq":1,"type":"report"})"},
      {events::Done{true, "", true}, R"({"ok":true,"type":"done"})"},
      {events::Done{false, "boom", false},
       R"({"error":"boom","ok":false,"retryable":false,"type":"done"})"},
      {events::Done{true, "odd", true},
       R"({"error":"odd","ok":true,"retryable":true,"type":"done"})"},
      {events::Done{false, "the command exited with code 7", true, 7},
       R"({"command_exit_code":7,"error":"the command exited with code 7","ok":false,"retryable":true,"type":"done"})"},
      {events::Done{false, "killed", true, std::nullopt, 9},
       R"({"command_signal":9,"error":"killed","ok":false,"retryable":true,"type":"done"})"},
  };
  for (const auto& [event, wire] : cases) {
    const std::string line = events::Encode(event);
    CHECK(line == wire + "\n");
    auto back = events::DecodeWorkerEvent(line);
    REQUIRE(back.ok());
    CHECK(*back == event);
    CHECK(events::TypeOf(*back) == events::TypeOf(event));
    // Without its newline too (WorkerPool strips nothing; the fuzz target does).
    CHECK(*events::DecodeWorkerEvent(wire) == event);
  }
  CHECK(events::TypeOf(events::WorkerEvent(report)) == "report");
}

TEST_CASE("agent messages round-trip as the lines the agent has always sent") {
  CHECK(events::Encode(events::Ack{7}) == "{\"seq\":7,\"type\":\"ack\"}\n");
  CHECK(events::Encode(events::Stop{}) == "{\"type\":\"stop\"}\n");
  auto ack = events::DecodeAgentMessage(events::Encode(events::Ack{INT_MAX}));
  REQUIRE(ack.ok());
  CHECK(std::get<events::Ack>(*ack).seq == INT_MAX);
  auto stop = events::DecodeAgentMessage("{\"type\":\"stop\"}");
  REQUIRE(stop.ok());
  CHECK(std::holds_alternative<events::Stop>(*stop));
  CHECK(events::TypeOf(*stop) == "stop");
  CHECK(events::Encode(events::Regroup{2, {}, "", 0}) ==
        "{\"generation\":2,\"type\":\"regroup\"}\n");
  auto regroup = events::DecodeAgentMessage(events::Encode(events::Regroup{5, {}, "", 0}));
  REQUIRE(regroup.ok());
  CHECK(std::get<events::Regroup>(*regroup).generation == 5);
  CHECK(std::get<events::Regroup>(*regroup).ranks.empty());
  // An elastic regroup names the group and its store.
  const events::Regroup elastic{3, {1, 2}, "10.0.0.3", 21001};
  auto back = events::DecodeAgentMessage(events::Encode(elastic));
  REQUIRE(back.ok());
  CHECK(std::get<events::Regroup>(*back) == elastic);
  CHECK(AgentError(R"({"type":"regroup"})").message() ==
        "malformed regroup message: generation: missing");
}

TEST_CASE("invalid UTF-8 in a worker event is replaced, never thrown") {
  events::Done done{false, std::string("bad \xff byte"), true};
  const std::string line = events::Encode(done);
  CHECK(line.find('\xff') == std::string::npos);
  auto back = events::DecodeWorkerEvent(line);
  REQUIRE(back.ok());
  CHECK(std::get<events::Done>(*back).error.rfind("bad ", 0) == 0);
}

TEST_CASE("a malformed worker event is refused naming the event and the field") {
  CHECK(EventError(R"({"type":"report"})").message() == "malformed report event: seq: missing");
  CHECK(EventError(R"({"type":"report","seq":"1"})").message() ==
        "malformed report event: seq: wrong type (string)");
  CHECK(EventError(R"({"type":"report","seq":1.5})").message() ==
        "malformed report event: seq: wrong type (number)");
  CHECK(EventError(R"({"type":"report","seq":-1})").message() ==
        "malformed report event: seq: out of range (-1)");
  CHECK(EventError(R"({"type":"report","seq":2147483648})").message() ==
        "malformed report event: seq: out of range (2147483648)");
  CHECK(EventError(R"({"type":"report","seq":18446744073709551615})").message() ==
        "malformed report event: seq: out of range (18446744073709551615)");
  CHECK(DecodeEventAs<events::Report>(R"({"type":"report","seq":2147483647})").seq == INT_MAX);
  CHECK(EventError(R"({"type":"hello","pid":5})").message() ==
        "malformed hello event: rank: missing");
  CHECK(EventError(R"({"type":"hello","rank":0,"pid":null})").message() ==
        "malformed hello event: pid: wrong type (null)");
  for (const char* line : {R"({"type":"report"})", R"({"type":"hello","rank":0})"}) {
    CHECK(EventError(line).code() == Status::Code::kInvalidArgument);
  }
}

TEST_CASE("a line that is no worker event at all is refused saying why") {
  CHECK(EventError("not json").message() ==
        "malformed worker event: not JSON, or nested deeper than 128 levels");
  CHECK(EventError("").message().find("not JSON") != std::string::npos);
  CHECK(EventError("[1]").message() == "malformed worker event: not a JSON object");
  CHECK(EventError(R"({"rank":0})").message() == "malformed worker event: type: missing");
  CHECK(EventError(R"({"type":7})").message() ==
        "malformed worker event: type: wrong type (number)");
}

TEST_CASE("ill-typed optional fields of a worker event count as absent") {
  // As the agent always did (a wrong type once threw out of the io_context).
  auto done =
      DecodeEventAs<events::Done>(R"({"type":"done","ok":"yes","error":7,"retryable":"no"})");
  CHECK(done == events::Done{false, "", true});
  // A command's end outside what an exit code or a signal can be counts as absent.
  for (const char* bad :
       {R"("command_exit_code":0)", R"("command_exit_code":256)", R"("command_exit_code":"7")",
        R"("command_signal":-9)", R"("command_signal":1e3)"}) {
    INFO(bad);
    auto d = DecodeEventAs<events::Done>(std::string(R"({"type":"done","ok":false,)") + bad + "}");
    CHECK_FALSE(d.command_exit_code);
    CHECK_FALSE(d.command_signal);
  }
  auto report =
      DecodeEventAs<events::Report>(R"({"type":"report","seq":1,"metrics":[1],"checkpoint":5})");
  CHECK(report.metrics == json::object());
  CHECK(report.checkpoint.empty());
  auto bare = DecodeEventAs<events::Report>(R"({"type":"report","seq":1,"checkpoint":null})");
  CHECK(bare.metrics == json::object());
  CHECK(bare.checkpoint.empty());
  // Fields a newer worker adds are ignored.
  CHECK(DecodeEventAs<events::Hello>(R"({"type":"hello","rank":1,"pid":9,"host":"x"})") ==
        events::Hello{1, 9});
}

TEST_CASE("an unknown type is NotFound, for the receiver to ignore") {
  Status worker = EventError(R"({"type":"future","x":1})");
  CHECK(worker.code() == Status::Code::kNotFound);
  CHECK(worker.message() == "unknown worker event type \"future\"");
  Status agent = AgentError(R"({"type":"pause"})");
  CHECK(agent.code() == Status::Code::kNotFound);
  CHECK(agent.message() == "unknown agent message type \"pause\"");
  // Each direction knows only its own types.
  CHECK(AgentError(R"({"type":"hello","rank":0,"pid":1})").code() == Status::Code::kNotFound);
  CHECK(EventError(R"({"type":"stop"})").code() == Status::Code::kNotFound);
}

TEST_CASE("a malformed agent message is refused naming the message and the field") {
  CHECK(AgentError(R"({"type":"ack"})").message() == "malformed ack message: seq: missing");
  CHECK(AgentError(R"({"type":"ack","seq":"0"})").message() ==
        "malformed ack message: seq: wrong type (string)");
  CHECK(AgentError(R"({"type":"ack","seq":-3})").message() ==
        "malformed ack message: seq: out of range (-3)");
  CHECK(AgentError("{oops").message().find("malformed agent message: not JSON") == 0);
}

TEST_CASE("oversize and overdeep lines are refused") {
  const std::string metrics(1000, 'x');
  const std::string line = events::Encode(events::Report{0, {{"m", metrics}}, ""});
  CHECK(events::DecodeWorkerEvent(line, line.size()).ok());
  Status over = events::DecodeWorkerEvent(line, line.size() - 1).status();
  CHECK(over.code() == Status::Code::kInvalidArgument);
  CHECK(over.message() == "malformed worker event: a line of " + std::to_string(line.size()) +
                              " bytes, over the limit of " + std::to_string(line.size() - 1));
  // Without its newline the line still counts one for it.
  CHECK_FALSE(events::DecodeWorkerEvent(line.substr(0, line.size() - 1), line.size() - 1).ok());
  CHECK(events::kMaxEventBytes == 4u << 20);
  CHECK_FALSE(events::DecodeAgentMessage(events::Encode(events::Ack{1}), 5).ok());

  std::string deep = R"({"type":"report","seq":0,"metrics":{"a":)";
  for (int i = 0; i < kMaxJsonDepth; ++i) deep += "[";
  for (int i = 0; i < kMaxJsonDepth; ++i) deep += "]";
  deep += "}}";
  CHECK(EventError(deep).message().find("nested deeper than 128") != std::string::npos);
}
