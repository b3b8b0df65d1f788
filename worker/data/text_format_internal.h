// Helpers shared by the text formats' parsers (text_records.cc, csv_format.cc,
// jsonl_format.cc) for their error messages. Internal to worker/data.
//
// Thread-safety: pure functions.
#pragma once

#include <string>

namespace traintl {
namespace data {
namespace text_internal {

// The value [b, e) in quotes for a message, cut to a readable length.
std::string Quote(const char* b, const char* e);

// What to add to a conversion error: when the column's type was inferred, how to override
// it; else nothing.
std::string OverrideHint(bool inferred, const std::string& file);

}  // namespace text_internal
}  // namespace data
}  // namespace traintl
