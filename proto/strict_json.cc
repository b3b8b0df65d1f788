// ParseJsonStrict (job_spec.h): JSON text parsing for untrusted input.
#include "proto/job_spec.h"

#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "proto/job_spec_internal.h"

namespace traintl {
namespace {

using spec_internal::Child;
using spec_internal::Invalid;
using spec_internal::json;
using spec_internal::ValidUtf8;

// Strict text parsing: a SAX handler that builds the DOM itself so it can refuse
// duplicate keys and excessive depth while parsing, before anything recursive runs.

class StrictBuilder : public nlohmann::json_sax<json> {
 public:
  explicit StrictBuilder(int max_depth) : max_depth_(max_depth) {}

  bool null() override { return Put(json(nullptr)); }
  bool boolean(bool v) override { return Put(json(v)); }
  bool number_integer(number_integer_t v) override { return Put(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return Put(json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return Put(json(v)); }
  bool string(string_t& v) override { return Put(json(std::move(v))); }
  bool binary(binary_t& v) override { return Put(json::binary(std::move(v))); }

  bool start_object(std::size_t) override { return Open(json::object()); }
  bool start_array(std::size_t) override { return Open(json::array()); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }

  bool key(string_t& k) override {
    Frame& top = stack_.back();
    if (top.node->contains(k)) {
      return Refuse(Child(PathOf(stack_.size()), k), "duplicate key");
    }
    top.key = std::move(k);
    return true;
  }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    std::string what = ex.what();
    // Drop nlohmann's "[json.exception.parse_error.101] " tag; keep the explanation.
    if (auto p = what.find("] "); p != std::string::npos && what[0] == '[') {
      what = what.substr(p + 2);
    }
    std::string where = "invalid JSON at byte " + std::to_string(position);
    // "parse error at line 1, column 5: <why>" -> "... (line 1, column 5): <why>"
    const std::string prefix = "parse error at ";
    if (what.rfind(prefix, 0) == 0) {
      if (auto colon = what.find(": "); colon != std::string::npos) {
        where += " (" + what.substr(prefix.size(), colon - prefix.size()) + ")";
        what = what.substr(colon + 2);
      }
    }
    error_ = {"", where + ": " + ValidUtf8(what)};
    return false;
  }

  json& root() { return root_; }
  const SpecError& error() const { return error_; }

 private:
  struct Frame {
    json* node;
    std::string key;  // pending key when node is an object
  };

  // The path of the container at stack depth `n` (stack_[0..n-1]).
  std::string PathOf(std::size_t n) const {
    std::string path;
    for (std::size_t i = 1; i < n; ++i) {
      const Frame& parent = stack_[i - 1];
      if (parent.node->is_object()) {
        path = Child(path, parent.key);
      } else {
        path += "[" + std::to_string(parent.node->size() - 1) + "]";
      }
    }
    return path;
  }

  json* Insert(json&& v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Frame& top = stack_.back();
    if (top.node->is_array()) {
      top.node->push_back(std::move(v));
      return &top.node->back();
    }
    json& slot = (*top.node)[top.key];
    slot = std::move(v);
    return &slot;
  }

  bool Put(json&& v) {
    Insert(std::move(v));
    return true;
  }

  bool Open(json&& v) {
    if (static_cast<int>(stack_.size()) >= max_depth_) {
      // The top-level member the nesting is in (a full path could be max_depth long).
      std::string field;
      if (stack_.size() >= 1 && stack_[0].node->is_object()) field = Child("", stack_[0].key);
      return Refuse(field, "is nested deeper than " + std::to_string(max_depth_) + " levels");
    }
    json* node = Insert(std::move(v));
    stack_.push_back({node, {}});
    return true;
  }

  bool Close() {
    stack_.pop_back();
    return true;
  }

  bool Refuse(std::string field, std::string message) {
    error_ = {std::move(field), std::move(message)};
    return false;
  }

  int max_depth_;
  json root_;
  std::vector<Frame> stack_;
  SpecError error_;
};

}  // namespace

Result<nlohmann::json> ParseJsonStrict(const std::string& text, int max_depth,
                                       std::size_t max_bytes, SpecError* error) {
  if (text.size() > max_bytes) {
    return Invalid({"", "the document is larger than " + std::to_string(max_bytes) + " bytes"},
                   error);
  }
  StrictBuilder builder(max_depth);
  bool ok = false;
  try {
    ok = json::sax_parse(text, &builder, json::input_format_t::json, /*strict=*/true,
                         /*ignore_comments=*/false);
  } catch (const std::exception& e) {
    return Invalid({"", std::string("invalid JSON: ") + e.what()}, error);
  }
  if (!ok) {
    SpecError e = builder.error();
    if (e.message.empty()) e.message = "invalid JSON";
    return Invalid(e, error);
  }
  return std::move(builder.root());
}

}  // namespace traintl
