#include <catch2/catch.hpp>

#include "cli/exit_codes.h"
#include "cli/format.h"
#include "test_util.h"

using namespace traintl::cli;
using nlohmann::json;

TEST_CASE("FormatDuration") {
  CHECK(FormatDuration(0) == "0s");
  CHECK(FormatDuration(999) == "0s");
  CHECK(FormatDuration(45000) == "45s");
  CHECK(FormatDuration(185000) == "3m05s");
  CHECK(FormatDuration(2 * 3600000 + 4 * 60000 + 59000) == "2h04m");
  CHECK(FormatDuration(3 * 86400000LL + 5 * 3600000) == "3d05h");
  CHECK(FormatDuration(-1) == "-");
}

TEST_CASE("FormatTime and FormatSpan") {
  CHECK(FormatTime(testing::kT0, /*utc=*/true) == "2024-01-02 03:04:05");
  CHECK(FormatTime(std::nullopt) == "-");
  CHECK(FormatClock(testing::kT0, true) == "03:04:05");
  CHECK(FormatSpan(std::nullopt, std::nullopt, 5000) == "-");
  CHECK(FormatSpan(1000, 61000, 999999) == "1m00s");
  CHECK(FormatSpan(1000, std::nullopt, 11000) == "10s");  // still running: until now
}

TEST_CASE("Table aligns columns without trailing blanks") {
  Table t({"ID", "NAME", "N"});
  t.AlignRight(2);
  t.AddRow({"a", "long-name", "7"});
  t.AddRow({"bbbb", "", "123"});
  t.AddRow({"c"});  // short rows are padded
  CHECK(t.Render() ==
        "ID    NAME         N\n"
        "a     long-name    7\n"
        "bbbb             123\n"
        "c\n");
  Table u({"X", "Y"});
  u.AddRow({"é", "1"});  // widths count terminal columns, not bytes
  CHECK(u.Render() == "X  Y\né  1\n");
  // A CJK name or an emoji takes two columns, a combining accent none.
  Table v({"NAME", "STATE"});
  v.AddRow({"訓練", "RUNNING"});
  v.AddRow({"e\u0301t\u00e9", "FAILED"});
  v.AddRow({"go🚀", "STOPPED"});
  CHECK(v.Render() ==
        "NAME  STATE\n"
        "訓練  RUNNING\n"
        "e\u0301té   FAILED\n"
        "go🚀  STOPPED\n");
}

TEST_CASE("metrics, scalars, bytes, signals, truncation") {
  CHECK(FormatMetrics(json::parse(R"({"loss":0.123456789,"epoch":3,"tag":"a b","ok":true})")) ==
        "epoch=3 loss=0.123457 ok=true tag=\"a b\"");
  CHECK(FormatMetrics(json::object()).empty());
  CHECK(FormatMetrics(json()).empty());
  CHECK(FormatScalar(json(2.0)) == "2");
  CHECK(FormatScalar(json(0.5)) == "0.5");
  CHECK(FormatBytes(512) == "512 B");
  CHECK(FormatBytes(1536) == "1.5 KiB");
  CHECK(FormatBytes(16.0 * 1024 * 1024 * 1024) == "16.0 GiB");
  CHECK(SignalName(11) == "SIGSEGV");
  CHECK(SignalName(9) == "SIGKILL");
  CHECK(SignalName(15) == "SIGTERM");
  CHECK(SignalName(99) == "signal 99");
  CHECK(Truncate("short", 10) == "short");
  CHECK(Truncate("a long message here", 10) == "a long ...");
  CHECK(Truncate("two\nlines", 20) == "two lines");
  CHECK(Truncate("日本語のジョブ名", 9) == "日本語...");        // 6 columns and the dots
  CHECK(Truncate("日本語のジョブ名", 8) == "日本...");          // a wide character does not split
  CHECK(Truncate("cafe\u0301 au lait", 7) == "cafe\u0301...");  // the accent stays
  CHECK(Indent("a\nb", "  ") == "  a\n  b\n");
  CHECK(Indent("a\n", "> ") == "> a\n");
}

TEST_CASE("what a job wrote is printed, never acted on by the terminal") {
  // Clear screen and home, a window title, a carriage return, C1 CSI, a bidi override.
  const std::string evil =
      "x\x1b[2J\x1b[H\x1b]0;owned\x07\ry\xC2\x9B"
      "1m\xE2\x80\xAEz";
  const std::string shown = "x\\x1b[2J\\x1b[H\\x1b]0;owned\\x07\\x0dy\\x9b1m\\u202ez";
  auto clean = [](const std::string& s) {
    for (unsigned char c : s) {
      if (c == '\n') continue;
      if (c < 0x20 || c == 0x7F) return false;
    }
    return s.find("\xC2\x9B") == std::string::npos && s.find("\xE2\x80\xAE") == std::string::npos;
  };
  CHECK(Printable(evil) == shown);
  CHECK(PrintableLines("a\nb\x1b[K") == "a\nb\\x1b[K");
  Table table({"NAME", "STATE"});
  table.AddRow({evil, "RUNNING"});
  const std::string rendered = table.Render();
  CHECK(clean(rendered));
  CHECK(rendered.find(shown) != std::string::npos);
  const json metrics = {{"k\x1b[31m", "v\x1b[5m"}, {"nl\nx", 3}};
  CHECK(clean(FormatMetrics(metrics)));
  // A string value with a backslash (an escape) is quoted, as JSON.
  CHECK(FormatMetrics(metrics) == "k\\x1b[31m=\"v\\u001b[5m\" nl\\x0ax=3");
  CHECK(clean(FormatScalar(json::array({evil}))));
  CHECK(clean(Truncate(evil, 12)));
  CHECK(Truncate(evil, 12) == "x\\x1b[2J\\...");
}

TEST_CASE("tolerant JSON accessors") {
  json j = json::parse(R"({"s":"x","i":5,"f":2.5,"n":null})");
  CHECK(JsonString(j, "s") == "x");
  CHECK(JsonString(j, "i", "fb") == "fb");
  CHECK(JsonString(j, "missing").empty());
  CHECK(JsonInt(j, "i") == 5);
  CHECK(JsonInt(j, "f") == 2);
  CHECK_FALSE(JsonInt(j, "n").has_value());
  CHECK_FALSE(JsonInt(json::array(), "i").has_value());
  CHECK(JsonField(j, "missing").is_null());
}

TEST_CASE("exit codes from HTTP statuses") {
  CHECK(ExitCodeForHttpStatus(200) == kExitOk);
  CHECK(ExitCodeForHttpStatus(201) == kExitOk);
  CHECK(ExitCodeForHttpStatus(400) == kExitUsage);
  CHECK(ExitCodeForHttpStatus(401) == kExitAuth);
  CHECK(ExitCodeForHttpStatus(403) == kExitAuth);
  CHECK(ExitCodeForHttpStatus(404) == kExitNotFound);
  CHECK(ExitCodeForHttpStatus(409) == kExitNotFound);
  CHECK(ExitCodeForHttpStatus(413) == kExitServerError);
  CHECK(ExitCodeForHttpStatus(500) == kExitServerError);
  CHECK(ExitCodeForHttpStatus(503) == kExitUnavailable);
}
