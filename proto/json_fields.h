// Fields: reads a JSON object's fields for proto's codecs, naming the field in every error
// ("job.policy.max_failures: wrong type (string)"). A codec's Decode catches FieldError at
// its boundary and returns InvalidArgument; FieldError never leaves proto/.
//
// Thread-safety: a Fields refers to the JSON it reads; use it on one thread.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

namespace traintl::proto_internal {

// A field that is missing or of the wrong type.
struct FieldError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Fields {
 public:
  // `prefix` names the object in errors ("" at the top, "job." for a nested one).
  Fields(const nlohmann::json& j, std::string prefix) : j_(j), prefix_(std::move(prefix)) {
    if (!j_.is_object()) throw FieldError(Name("") + "must be an object");
  }

  template <typename T>
  void Req(const char* key, T* out) const {
    Get(key, At(key), out);
  }
  // Absent or null: `out` keeps its default (a field a newer release added).
  template <typename T>
  void Opt(const char* key, T* out) const {
    auto it = j_.find(key);
    if (it != j_.end() && !it->is_null()) Get(key, *it, out);
  }
  template <typename T>
  void Opt(const char* key, std::optional<T>* out) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return;
    T v{};
    Get(key, *it, &v);
    *out = v;
  }
  const nlohmann::json& At(const char* key) const {
    auto it = j_.find(key);
    if (it == j_.end()) throw FieldError(Name(key) + "missing");
    return *it;
  }
  // The nested object `key` (required), its fields named "<prefix><key>.<field>".
  Fields Object(const char* key) const { return Fields(At(key), prefix_ + key + "."); }
  std::string Name(const char* key) const { return prefix_ + key + ": "; }

 private:
  template <typename T>
  void Get(const char* key, const nlohmann::json& v, T* out) const {
    try {
      *out = v.get<T>();
    } catch (const nlohmann::json::exception&) {
      throw FieldError(Name(key) + "wrong type (" + v.type_name() + ")");
    }
  }

  const nlohmann::json& j_;
  const std::string prefix_;
};

}  // namespace traintl::proto_internal
