#include <catch2/catch.hpp>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "common/utf8.h"

using traintl::ClipMiddle;
using traintl::EscapeControls;
using traintl::PrefixForColumns;
using traintl::TerminalWidth;
using traintl::ToValidUtf8;

namespace {
const std::string R = "\xEF\xBF\xBD";  // U+FFFD
}

TEST_CASE("valid UTF-8 comes back unchanged") {
  for (std::string s : {std::string(), std::string("plain ascii\n"), std::string("\0x", 2),
                        std::string("caf\xC3\xA9 \xE2\x96\x88 \xF0\x9F\x98\x80"),
                        std::string("\xED\x9F\xBF\xEE\x80\x80\xF4\x8F\xBF\xBF")}) {
    CHECK(ToValidUtf8(s) == s);
  }
}

TEST_CASE("ill-formed bytes become U+FFFD, one per maximal subpart") {
  // The cases of the Unicode standard's table 3-8 and its neighbours; Python's
  // bytes.decode("utf-8", "replace") gives the same.
  CHECK(ToValidUtf8("\xFF") == R);
  CHECK(ToValidUtf8("a\x80z") == "a" + R + "z");
  CHECK(ToValidUtf8("\xC0\xAF") == R + R);                  // overlong
  CHECK(ToValidUtf8("\xE0\x80\xAF") == R + R + R);          // overlong, 3 bytes
  CHECK(ToValidUtf8("\xED\xA0\x80") == R + R + R);          // a surrogate
  CHECK(ToValidUtf8("\xF4\x90\x80\x80") == R + R + R + R);  // above U+10FFFF
  CHECK(ToValidUtf8("\xE2\x96") == R);                      // cut short: one subpart
  CHECK(ToValidUtf8("\xF0\x9F\x98") == R);
  CHECK(ToValidUtf8("\xE2\x96x") == R + "x");
  CHECK(ToValidUtf8("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64") ==
        "a" + R + R + R + "b" + R + "c" + R + R + "d");
  // A log tail cut in the middle of a character (TailFile starts anywhere).
  CHECK(ToValidUtf8("\x96\x88 100%\n") == R + R + " 100%\n");
}

TEST_CASE("whatever the bytes, the result is JSON-encodable and stable") {
  std::mt19937 rng(7);
  for (int round = 0; round < 2000; ++round) {
    std::string s(rng() % 64, '\0');
    for (auto& c : s) c = static_cast<char>(rng() % 4 == 0 ? rng() % 256 : 0x80 + rng() % 0x80);
    const std::string v = ToValidUtf8(s);
    INFO(round);
    CHECK_NOTHROW(nlohmann::json(v).dump());
    CHECK(ToValidUtf8(v) == v);
    CHECK(nlohmann::json::parse(nlohmann::json(v).dump()).get<std::string>() == v);
  }
}

TEST_CASE("ClipMiddle keeps the start and the longer end, whole characters only") {
  CHECK(ClipMiddle("short", 10) == "short");
  std::string text;
  for (int i = 0; i < 1000; ++i) text += "\xE2\x96\x88";  // 3 bytes each
  const std::string clipped = ClipMiddle(text, 100);
  CHECK(clipped.size() < 160);
  CHECK(ToValidUtf8(clipped) == clipped);
  CHECK(clipped.find("bytes left out") != std::string::npos);
  CHECK(clipped.rfind("\xE2\x96\x88", 0) == 0);
  CHECK(clipped.substr(clipped.size() - 3) == "\xE2\x96\x88");
}

TEST_CASE("EscapeControls leaves no control a terminal acts on, and is idempotent") {
  // Clear screen, home, retitle, a carriage return overwriting the line, DEL.
  const std::string hostile = "a\x1b[2J\x1b[H\x1b]0;owned\x07 b\rc\x7f";
  CHECK(EscapeControls(hostile, false) == "a\\x1b[2J\\x1b[H\\x1b]0;owned\\x07 b\\x0dc\\x7f");
  CHECK(EscapeControls("one\ntwo\tx", true) == "one\ntwo\tx");
  CHECK(EscapeControls("one\ntwo\tx", false) == "one\\x0atwo\tx");
  // C1 CSI (U+009B), a right-to-left override (U+202E) and isolate (U+2066); other
  // non-ASCII text is kept.
  CHECK(EscapeControls("\xC2\x9B"
                       "2J \xE2\x80\xAE"
                       "txt \xE2\x81\xA6"
                       "é€",
                       false) == "\\x9b2J \\u202etxt \\u2066é€");
  // The marks: LRM, RLM, the Arabic letter mark.
  CHECK(EscapeControls("a\xE2\x80\x8E"
                       "b\xE2\x80\x8F"
                       "c\xD8\x9C",
                       false) == "a\\u200eb\\u200fc\\u061c");
  // Invalid UTF-8 (a lone C1 byte included) becomes U+FFFD first.
  CHECK(EscapeControls("\x9b\xff", false) == "\xEF\xBF\xBD\xEF\xBF\xBD");
  for (const std::string& s : {hostile, std::string("x\xC2\x9Fy\xE2\x80\xAB")}) {
    const std::string once = EscapeControls(s, false);
    CHECK(EscapeControls(once, false) == once);
    for (unsigned char c : once) CHECK((c >= 0x20 && c != 0x7F));
  }
}

TEST_CASE("TerminalWidth counts the columns a terminal draws") {
  CHECK(TerminalWidth("") == 0);
  CHECK(TerminalWidth("plain ascii") == 11);
  CHECK(TerminalWidth("\u00e9t\u00e9") == 3);       // precomposed
  CHECK(TerminalWidth("e\u0301te\u0301") == 3);     // combining acute accents
  CHECK(TerminalWidth("\u8a13\u7df4") == 4);        // CJK ideographs
  CHECK(TerminalWidth("\ud55c\uad6d\uc5b4") == 6);  // Hangul syllables
  CHECK(TerminalWidth("\u1100\u1161\u11a8") == 2);  // a syllable as conjoining jamo
  CHECK(TerminalWidth("\uff21\uff22") == 4);        // fullwidth A B
  CHECK(TerminalWidth("\xf0\x9f\x9a\x80") == 2);    // U+1F680 rocket
  CHECK(TerminalWidth("\u2764\ufe0f") == 1);        // a text-default symbol, selector 0
  CHECK(TerminalWidth("a\u200bb") == 2);            // zero-width space
  CHECK(TerminalWidth("\xf0\xa0\x80\x80") == 2);    // U+20000, CJK extension B
  CHECK(TerminalWidth("\xff\xfe") == 2);            // ill-formed bytes: one column each
  CHECK(TerminalWidth("\u0394\u03b4") == 2);        // Greek
}

TEST_CASE("PrefixForColumns cuts at characters, keeping a last character's marks") {
  const std::string cjk = "\u8a13\u7df4\u30b8\u30e7\u30d6";  // 10 columns
  CHECK(PrefixForColumns(cjk, 10) == cjk.size());
  CHECK(PrefixForColumns(cjk, 4) == 6);  // two characters of 3 bytes
  CHECK(PrefixForColumns(cjk, 5) == 6);  // the third would need columns 5 and 6
  CHECK(PrefixForColumns(cjk, 0) == 0);
  CHECK(PrefixForColumns("e\u0301x", 1) == 3);  // e and its accent
  CHECK(PrefixForColumns("abc", 99) == 3);
}
