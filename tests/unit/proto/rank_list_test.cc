// Rank lists of `logs --rank` and ?ranks=: sorted, de-duplicated, refused when malformed.

#include <catch2/catch.hpp>

#include "proto/rank_list.h"

using traintl::ParseRankList;

TEST_CASE("rank lists: one rank or several, sorted and de-duplicated") {
  CHECK(*ParseRankList("3") == std::vector<int>{3});
  CHECK(*ParseRankList("2,0,2") == std::vector<int>{0, 2});
  for (const char* bad : {"", ",", "1,", ",1", "1,,2", "-1", "a", "1 2", "1234567"}) {
    auto r = ParseRankList(bad);
    CHECK_FALSE(r.ok());
    CHECK_THAT(r.status().message(), Catch::Contains("comma-separated"));
  }
}
