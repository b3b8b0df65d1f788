// Percent-decoding and query-string parsing for request targets (RFC 3986).
//
// Thread-safety: free functions with no shared state.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace traintl::http {

// Decodes %XX escapes. With `plus_as_space` (query strings), '+' becomes ' '. Returns
// nullopt for a malformed escape ('%' not followed by two hex digits) or an encoded NUL,
// since a NUL can only be an attempt to truncate a path or a key further down.
std::optional<std::string> PercentDecode(std::string_view in, bool plus_as_space = false);

// Parses "a=1&b=x%20y&flag" into {"a":"1","b":"x y","flag":""}. When a key repeats, the
// last occurrence wins. Returns nullopt when any part is malformed.
std::optional<std::map<std::string, std::string>> ParseQuery(std::string_view query);

// Splits a raw (still encoded) absolute path "/a/b/c" into {"a","b","c"}. "/" gives {""};
// "/a//b/" gives {"a","","b",""}: empty segments are kept so that routes can refuse them.
std::vector<std::string_view> SplitPath(std::string_view raw_path);

}  // namespace traintl::http
