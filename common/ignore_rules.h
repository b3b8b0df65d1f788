// IgnoreRules: the .gitignore pattern language (the practical subset) that decides which
// paths of a job's working_dir are left out of its code archive (common/code_archive.h).
//
// Supported, as in git:
//   - blank lines and lines starting with '#' are skipped; "\#" and "\!" start a literal
//     '#' or '!'; trailing spaces are dropped unless escaped ("\ "); a trailing '\r' too;
//   - "!pat" re-includes what an earlier pattern excluded; the last matching pattern wins;
//   - a trailing '/' makes a pattern match directories only;
//   - a pattern with a '/' at the start or in the middle is anchored to the root (a leading
//     '/' is stripped); any other matches the last component at any depth ("*.ckpt",
//     "data/");
//   - '*' and '?' never match '/'; "[abc]", "[a-z]", "[!a-z]" classes; '\' escapes;
//   - "**" as a whole component matches zero or more components ("**/x", "a/**/b"), except
//     that a trailing "/**" matches everything *inside* (one or more: "x/**" leaves x itself);
//     "**" within a component ("a**b") is a plain '*'.
// Not supported: per-directory .gitignore files (rules are relative to one root; the code
// archive reads only the root's .gitignore and .traintlignore), git's core.excludesFile and
// .git/info/exclude.
//
// An excluded directory is not descended into, so a "!" pattern cannot re-include anything
// below it (as in git): IsExcluded says so for such paths; a top-down walker that skips
// excluded directories only needs MatchEntry.
//
// Thread-safety: Add* must not run concurrently with anything else; the const methods may
// be called from any number of threads.
#pragma once

#include <string>
#include <vector>

namespace traintl {

class IgnoreRules {
 public:
  // Adds one pattern line; blank and comment lines add nothing.
  void Add(const std::string& line);
  // Adds every line of a .gitignore-style file.
  void AddLines(const std::string& text);

  // The verdict of the rules on the entry `rel_path` itself ('/'-separated, relative to the
  // root, no leading "/" or "./"; a trailing '/' is ignored), without looking at its parent
  // directories: true when the last pattern that matches it is not a "!" one.
  bool MatchEntry(const std::string& rel_path, bool is_dir) const;
  // True when `rel_path` or one of its parent directories is excluded (git check-ignore).
  bool IsExcluded(const std::string& rel_path, bool is_dir) const;

  bool empty() const { return rules_.empty(); }

 private:
  struct Rule {
    std::vector<std::string> components;  // glob per path component; "**" kept whole
    bool negate = false;
    bool dir_only = false;
  };
  std::vector<Rule> rules_;
};

// Whether `name` (one path component) matches the glob `pattern` ('*', '?', classes, '\'
// escapes; nothing matches '/'). Exposed for tests.
bool GlobMatchComponent(const std::string& pattern, const std::string& name);

}  // namespace traintl
