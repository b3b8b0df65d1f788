// Did-you-mean hints: the candidate a mistyped name most likely meant. Shared by the job
// spec's validation (unknown fields) and the CLI (unknown verbs).
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace traintl {

// ASCII lower case.
std::string Lower(std::string s);
// Levenshtein distance (insertions, deletions, substitutions).
std::size_t EditDistance(const std::string& a, const std::string& b);
// The closest candidate (case-insensitively) within a distance that still looks like a
// typo (1 for names up to 4 characters, 2 up to 8, 3 beyond), or "".
std::string Closest(const std::string& key, const std::vector<std::string>& candidates);

}  // namespace traintl
