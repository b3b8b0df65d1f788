// common/ignore_rules.h: the .gitignore subset that decides what a code archive leaves out.
// Each expectation is what `git check-ignore` says for the same pattern and path.
#include "common/ignore_rules.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

using namespace traintl;

namespace {

IgnoreRules Rules(const std::vector<std::string>& lines) {
  IgnoreRules r;
  for (const auto& l : lines) r.Add(l);
  return r;
}

constexpr bool kDir = true;
constexpr bool kFile = false;

}  // namespace

TEST_CASE("GlobMatchComponent: *, ?, classes and escapes within one component") {
  CHECK(GlobMatchComponent("*.ckpt", "model.ckpt"));
  CHECK(GlobMatchComponent("*.ckpt", ".ckpt"));
  CHECK_FALSE(GlobMatchComponent("*.ckpt", "model.ckpt.bak"));
  CHECK(GlobMatchComponent("a*b*c", "aXXbYYc"));
  CHECK_FALSE(GlobMatchComponent("a*b*c", "aXXbYY"));
  CHECK(GlobMatchComponent("?.py", "a.py"));
  CHECK_FALSE(GlobMatchComponent("?.py", "ab.py"));
  CHECK(GlobMatchComponent("file[0-9].txt", "file7.txt"));
  CHECK_FALSE(GlobMatchComponent("file[0-9].txt", "fileA.txt"));
  CHECK(GlobMatchComponent("[abc]x", "bx"));
  CHECK_FALSE(GlobMatchComponent("[abc]x", "dx"));
  CHECK(GlobMatchComponent("[!abc]x", "dx"));
  CHECK(GlobMatchComponent("[^abc]x", "dx"));
  CHECK_FALSE(GlobMatchComponent("[!abc]x", "ax"));
  CHECK(GlobMatchComponent("[]]", "]"));
  CHECK(GlobMatchComponent("[a-]", "-"));
  CHECK(GlobMatchComponent("\\*", "*"));
  CHECK_FALSE(GlobMatchComponent("\\*", "x"));
  CHECK(GlobMatchComponent("[unclosed", "[unclosed"));
  CHECK(GlobMatchComponent("a**b", "aXYb"));  // "**" inside a component is '*'
  CHECK(GlobMatchComponent("*", ""));
  CHECK_FALSE(GlobMatchComponent("?", ""));
}

TEST_CASE("IgnoreRules: blank lines and comments add nothing and escapes make them literal") {
  IgnoreRules r;
  r.AddLines("\n# a comment\n   \n\\#hash\n\\!bang\ntrailing   \nkept\\ \r\n");
  CHECK_FALSE(r.MatchEntry("# a comment", kFile));
  CHECK(r.MatchEntry("#hash", kFile));
  CHECK(r.MatchEntry("!bang", kFile));
  CHECK(r.MatchEntry("trailing", kFile));  // trailing spaces dropped
  CHECK_FALSE(r.MatchEntry("trailing   ", kFile));
  CHECK(r.MatchEntry("kept ", kFile));  // an escaped one kept
  CHECK_FALSE(r.MatchEntry("kept", kFile));
  CHECK(Rules({"", "#x", "/", "!"}).empty());
}

TEST_CASE("IgnoreRules: a pattern without '/' matches the basename at any depth") {
  IgnoreRules r = Rules({"*.ckpt", "notes.txt"});
  CHECK(r.MatchEntry("a.ckpt", kFile));
  CHECK(r.MatchEntry("deep/er/a.ckpt", kFile));
  CHECK(r.MatchEntry("ckpts.ckpt", kDir));  // files and directories alike
  CHECK(r.MatchEntry("x/notes.txt", kFile));
  CHECK_FALSE(r.MatchEntry("a.ckpt.txt", kFile));
  CHECK_FALSE(r.MatchEntry("notes.txt.bak", kFile));
}

TEST_CASE("IgnoreRules: a trailing '/' matches directories only") {
  IgnoreRules r = Rules({"data/"});
  CHECK(r.MatchEntry("data", kDir));
  CHECK(r.MatchEntry("src/data", kDir));
  CHECK_FALSE(r.MatchEntry("data", kFile));
  CHECK_FALSE(r.MatchEntry("src/data", kFile));
  // Everything below an excluded directory is excluded (the walker does not descend).
  CHECK(r.IsExcluded("data/x.csv", kFile));
  CHECK_FALSE(r.MatchEntry("data/x.csv", kFile));
}

TEST_CASE("IgnoreRules: a '/' at the start or in the middle anchors to the root") {
  IgnoreRules r = Rules({"/build", "docs/*.md", "/logs/"});
  CHECK(r.MatchEntry("build", kDir));
  CHECK(r.MatchEntry("build", kFile));
  CHECK_FALSE(r.MatchEntry("src/build", kDir));
  CHECK(r.MatchEntry("docs/a.md", kFile));
  CHECK_FALSE(r.MatchEntry("x/docs/a.md", kFile));
  CHECK_FALSE(r.MatchEntry("docs/sub/a.md", kFile));  // '*' does not cross '/'
  CHECK(r.MatchEntry("logs", kDir));
  CHECK_FALSE(r.MatchEntry("logs", kFile));
  CHECK_FALSE(r.MatchEntry("a/logs", kDir));
}

TEST_CASE("IgnoreRules: '*' and '?' never match '/'") {
  IgnoreRules r = Rules({"a/*", "b?c/x"});
  CHECK(r.MatchEntry("a/file", kFile));
  CHECK_FALSE(r.MatchEntry("a/dir/file", kFile));
  CHECK(r.IsExcluded("a/dir/file", kFile));  // through a/dir
  CHECK(r.MatchEntry("bXc/x", kFile));
  CHECK_FALSE(r.MatchEntry("b/c/x", kFile));
}

TEST_CASE("IgnoreRules: '**' components") {
  SECTION("leading **/ matches at any depth, including the root") {
    IgnoreRules r = Rules({"**/cache"});
    CHECK(r.MatchEntry("cache", kDir));
    CHECK(r.MatchEntry("a/b/cache", kFile));
    CHECK_FALSE(r.MatchEntry("a/cachex", kFile));
  }
  SECTION("a/**/b matches zero or more components between") {
    IgnoreRules r = Rules({"a/**/b"});
    CHECK(r.MatchEntry("a/b", kFile));
    CHECK(r.MatchEntry("a/x/b", kFile));
    CHECK(r.MatchEntry("a/x/y/z/b", kDir));
    CHECK_FALSE(r.MatchEntry("x/a/b", kFile));
    CHECK_FALSE(r.MatchEntry("a/x/bb", kFile));
  }
  SECTION("trailing /** matches everything inside, not the directory itself") {
    IgnoreRules r = Rules({"out/**"});
    CHECK(r.MatchEntry("out/x", kFile));
    CHECK(r.MatchEntry("out/x/y", kFile));
    CHECK_FALSE(r.MatchEntry("out", kDir));
    CHECK_FALSE(r.MatchEntry("src/out/x", kFile));
  }
  SECTION("repeated ** components act as one") {
    IgnoreRules r = Rules({"**/**/x/**/**/y"});
    CHECK(r.MatchEntry("x/y", kFile));
    CHECK(r.MatchEntry("p/q/x/r/s/y", kFile));
  }
}

TEST_CASE("IgnoreRules: '!' re-includes and the last matching pattern wins") {
  IgnoreRules r = Rules({"*.csv", "!keep.csv", "data/keep.csv"});
  CHECK(r.MatchEntry("a.csv", kFile));
  CHECK_FALSE(r.MatchEntry("keep.csv", kFile));
  CHECK_FALSE(r.MatchEntry("x/keep.csv", kFile));
  CHECK(r.MatchEntry("data/keep.csv", kFile));  // the later pattern excludes it again

  IgnoreRules order = Rules({"!keep.csv", "*.csv"});
  CHECK(order.MatchEntry("keep.csv", kFile));  // the re-include came first: it loses
}

TEST_CASE("IgnoreRules: '!' cannot re-include below an excluded directory") {
  IgnoreRules r = Rules({"data/", "!data/small.csv"});
  CHECK(r.MatchEntry("data", kDir));
  CHECK_FALSE(r.MatchEntry("data/small.csv", kFile));
  CHECK(r.IsExcluded("data/small.csv", kFile));  // as git: its directory is excluded
  // Excluding the contents instead of the directory lets '!' work.
  IgnoreRules contents = Rules({"data/*", "!data/small.csv"});
  CHECK_FALSE(contents.IsExcluded("data/small.csv", kFile));
  CHECK(contents.IsExcluded("data/big.csv", kFile));
}
