// Nesting-depth checks for untrusted JSON text, before any parser sees it.
//
// nlohmann::json parses iteratively, but dumping, copying and comparing a document recurse
// once per level: a 100,000-deep array parsed without a limit later overflows the stack.
// Every parser of untrusted JSON (CLI, daemon, worker, dataset JSON Lines) checks the text
// with JsonTooDeep first, against the same kMaxJsonDepth. Job specs have their own, lower
// limit (kMaxSpecDepth in proto/job_spec.h), so a valid spec always fits inside the
// documents that carry it.
//
// Thread-safety: pure functions.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

namespace traintl {

// Arrays and objects nested deeper than this (the outermost one is level 1) are refused.
inline constexpr int kMaxJsonDepth = 128;

// The deepest nesting of arrays and objects in `text`, counting brackets outside strings;
// it stops counting once past `limit` (returns limit + 1). Malformed text is measured as
// far as it goes: the parser that follows reports its syntax errors.
int JsonNestingDepth(std::string_view text, int limit = kMaxJsonDepth);

inline bool JsonTooDeep(std::string_view text, int limit = kMaxJsonDepth) {
  return JsonNestingDepth(text, limit) > limit;
}

// nlohmann::json::parse without exceptions for untrusted text: a discarded value (see
// is_discarded()) when the text is not JSON or is nested deeper than `limit`.
inline nlohmann::json ParseJsonBounded(std::string_view text, int limit = kMaxJsonDepth) {
  if (JsonTooDeep(text, limit)) return nlohmann::json(nlohmann::json::value_t::discarded);
  return nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

}  // namespace traintl
