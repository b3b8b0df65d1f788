#include "common/json_depth.h"

#include <catch2/catch.hpp>
#include <string>

using traintl::JsonNestingDepth;
using traintl::JsonTooDeep;
using traintl::kMaxJsonDepth;

TEST_CASE("JsonNestingDepth counts arrays and objects outside strings") {
  CHECK(JsonNestingDepth("1") == 0);
  CHECK(JsonNestingDepth("{}") == 1);
  CHECK(JsonNestingDepth(R"({"a":[1,{"b":[]}],"c":{}})") == 4);
  CHECK(JsonNestingDepth(R"({"a":"[[[[{{{{"})") == 1);
  CHECK(JsonNestingDepth(R"({"a":"\"[[[["})") == 1);
  CHECK(JsonNestingDepth(R"(["\\",[[]]])") == 3);
  CHECK(JsonNestingDepth("]]]][") == 1);  // malformed: measured as far as it goes
}

TEST_CASE("JsonTooDeep refuses 100,000 levels without recursing, and stops counting early") {
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  CHECK(JsonTooDeep(deep));
  CHECK(JsonNestingDepth(deep, 10) == 11);
  std::string ok = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  CHECK_FALSE(JsonTooDeep(ok));
  CHECK(JsonTooDeep("[" + ok + "]"));
}
