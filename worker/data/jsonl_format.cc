// JSON Lines (text_formats.h): type inference from the first object and ParseJsonlRows.
#include <cstring>
#include <limits>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/json_depth.h"
#include "worker/data/text_format_internal.h"
#include "worker/data/text_formats.h"

namespace traintl {
namespace data {

using text_internal::OverrideHint;
using text_internal::Quote;

namespace {

using nlohmann::json;

enum Kind : unsigned {
  kNull = 1,
  kBool = 2,
  kInt = 4,
  kFloat = 8,
  kString = 16,
  kArray = 32,
  kObject = 64
};

unsigned KindOf(const json& v) {
  if (v.is_null()) return kNull;
  if (v.is_boolean()) return kBool;
  if (v.is_number_integer()) return kInt;
  if (v.is_number()) return kFloat;
  if (v.is_string()) return kString;
  if (v.is_array()) return kArray;
  return kObject;
}

// The shape of a rectangular array of numbers, and whether every element is an integer.
bool ArrayShape(const json& v, std::vector<int64_t>* shape, bool* all_int) {
  shape->clear();
  const json* cur = &v;
  while (cur->is_array()) {
    shape->push_back(static_cast<int64_t>(cur->size()));
    if (cur->empty()) break;
    cur = &(*cur)[0];
  }
  // Checks every element against the shape.
  *all_int = true;
  std::vector<const json*> level{&v};
  for (size_t d = 0; d < shape->size(); ++d) {
    std::vector<const json*> next;
    for (const json* a : level) {
      if (!a->is_array() || static_cast<int64_t>(a->size()) != (*shape)[d]) return false;
      for (const auto& e : *a) next.push_back(&e);
    }
    level.swap(next);
  }
  for (const json* e : level) {
    if (e->is_number_integer() || e->is_boolean()) continue;
    if (!e->is_number()) return false;
    *all_int = false;
  }
  return true;
}

std::string TooDeepMessage() {
  return "a JSON value nested deeper than " + std::to_string(kMaxJsonDepth) + " levels";
}

std::string JsonError(const TextPos& pos, int64_t line, uint64_t offset,
                      const json::parse_error& err) {
  const size_t at = err.byte > 0 ? err.byte - 1 : 0;
  std::string what = "invalid JSON at column " + std::to_string(at + 1);
  std::string msg = err.what();
  auto colon = msg.find("syntax error");
  if (colon != std::string::npos) what += ": " + msg.substr(colon);
  return Located(pos, line, offset, what);
}

// Writes the flattened numbers of `v` (checked against `shape`) at dst.
template <typename T>
bool WriteNumbers(const json& v, size_t depth, const std::vector<int64_t>& shape, bool int_only,
                  T** dst) {
  if (depth == shape.size()) {
    if (v.is_number_integer() || v.is_boolean()) {
      *(*dst)++ = v.is_boolean() ? T(v.get<bool>()) : static_cast<T>(v.get<int64_t>());
      return true;
    }
    if (v.is_number_unsigned()) {
      *(*dst)++ = static_cast<T>(v.get<uint64_t>());
      return true;
    }
    if (int_only) return false;
    if (v.is_number()) {
      *(*dst)++ = static_cast<T>(v.get<double>());
      return true;
    }
    if (v.is_null()) {
      *(*dst)++ = std::numeric_limits<T>::quiet_NaN();
      return true;
    }
    return false;
  }
  if (!v.is_array() || static_cast<int64_t>(v.size()) != shape[depth]) return false;
  for (const auto& e : v) {
    if (!WriteNumbers(e, depth + 1, shape, int_only, dst)) return false;
  }
  return true;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

Result<Schema> InferJsonlSchema(const char* buf, size_t len, int64_t max_rows,
                                const std::map<std::string, DType>& types, const TextPos& pos) {
  std::vector<std::string> names;
  std::vector<unsigned> kinds;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<bool> array_all_int;
  size_t p = 0;
  int64_t line = pos.line;
  for (int64_t rows = 0; rows < max_rows && p < len;) {
    const char* nl = static_cast<const char*>(std::memchr(buf + p, '\n', len - p));
    const char* b = buf + p;
    const char* e = nl != nullptr ? nl : buf + len;
    const uint64_t offset = pos.offset + p;
    const int64_t this_line = line;
    p = static_cast<size_t>(e - buf) + (nl != nullptr ? 1 : 0);
    ++line;
    // Blank exactly as ScanRecords counts it: a whitespace-only line is a (bad) row.
    const char* t = b;
    const char* te = e;
    if (te > t && te[-1] == '\r') --te;
    if (t == te) continue;
    ++rows;
    if (JsonTooDeep(std::string_view(t, static_cast<size_t>(te - t)))) {
      return Status::InvalidArgument(Located(pos, this_line, offset, TooDeepMessage()));
    }
    nlohmann::ordered_json row;
    try {
      row = nlohmann::ordered_json::parse(t, te);
    } catch (const json::parse_error& err) {
      return Status::InvalidArgument(JsonError(pos, this_line, offset, err));
    }
    if (!row.is_object()) {
      return Status::InvalidArgument(
          Located(pos, this_line, offset,
                  "a JSON Lines row must be an object, got " + std::string(row.type_name())));
    }
    if (names.empty()) {
      for (const auto& item : row.items()) names.push_back(item.key());
      kinds.assign(names.size(), 0);
      shapes.assign(names.size(), {});
      array_all_int.assign(names.size(), true);
    }
    for (size_t i = 0; i < names.size(); ++i) {
      auto it = row.find(names[i]);
      if (it == row.end()) continue;  // reported when the row is read
      const unsigned k = KindOf(*it);
      if (k == kArray) {
        std::vector<int64_t> shape;
        bool all_int = true;
        if (!ArrayShape(*it, &shape, &all_int)) {
          return Status::InvalidArgument(
              Located(pos, this_line, offset,
                      "key '" + names[i] + "': arrays must be rectangular and hold only numbers"));
        }
        if ((kinds[i] & kArray) && shape != shapes[i]) {
          return Status::InvalidArgument(
              Located(pos, this_line, offset,
                      "key '" + names[i] + "': an array of shape " + ShapeText(shape) +
                          ", while earlier rows have " + ShapeText(shapes[i])));
        }
        shapes[i] = shape;
        if (!all_int) array_all_int[i] = false;
      }
      kinds[i] |= k;
    }
  }
  Schema schema;
  for (size_t i = 0; i < names.size(); ++i) {
    ColumnSpec c;
    c.name = names[i];
    const unsigned k = kinds[i];
    if (k & kObject) {
      return Status::InvalidArgument(*pos.file + ": key '" + names[i] +
                                     "' holds JSON objects; only numbers, strings, bools and "
                                     "arrays of numbers can be read");
    }
    if (k & kArray) {
      if (k & ~(kArray | kNull)) {
        return Status::InvalidArgument(*pos.file + ": key '" + names[i] +
                                       "' mixes arrays and other values in the first rows");
      }
      c.shape = shapes[i];
      c.dtype = array_all_int[i] && !(k & kNull) ? DType::kInt64 : DType::kFloat64;
    } else if (k & kString) {
      if (k & ~(kString | kNull)) {
        return Status::InvalidArgument(*pos.file + ": key '" + names[i] +
                                       "' mixes strings and other values in the first rows");
      }
      c.dtype = DType::kString;
    } else if ((k & (kFloat | kNull)) || k == 0) {
      c.dtype = DType::kFloat64;
    } else {
      c.dtype = DType::kInt64;  // ints and bools
    }
    auto it = types.find(names[i]);
    if (it != types.end()) c.dtype = it->second;
    schema.push_back(std::move(c));
  }
  return schema;
}

Status ParseJsonlRows(const char* buf, size_t len, int64_t rows, const Schema& out_schema,
                      const std::vector<bool>& inferred, const TextPos& pos, RowBlock* out) {
  const int64_t base_row = out->num_rows;
  for (size_t o = 0; o < out_schema.size(); ++o) {
    if (out_schema[o].dtype != DType::kString) {
      out->columns[o].values.Resize(out_schema[o].RowBytes() *
                                    static_cast<size_t>(base_row + rows));
    }
  }
  size_t p = 0;
  int64_t line = pos.line;
  int64_t row = 0;
  json v;
  while (p < len) {
    const char* nl = static_cast<const char*>(std::memchr(buf + p, '\n', len - p));
    const char* b = buf + p;
    const char* e = nl != nullptr ? nl : buf + len;
    const uint64_t offset = pos.offset + p;
    const int64_t this_line = line;
    p = static_cast<size_t>(e - buf) + (nl != nullptr ? 1 : 0);
    ++line;
    // Blank exactly as ScanRecords counts it: a whitespace-only line is a (bad) row.
    const char* t = b;
    const char* te = e;
    if (te > t && te[-1] == '\r') --te;
    if (t == te) continue;
    if (row >= rows) {
      return Status::Internal(Located(pos, this_line, offset, "more rows than the scan counted"));
    }
    if (JsonTooDeep(std::string_view(t, static_cast<size_t>(te - t)))) {
      out->num_rows = base_row + row;
      return Status::InvalidArgument(Located(pos, this_line, offset, TooDeepMessage()));
    }
    try {
      v = json::parse(t, te);
    } catch (const json::parse_error& err) {
      out->num_rows = base_row + row;
      return Status::InvalidArgument(JsonError(pos, this_line, offset, err));
    }
    if (!v.is_object()) {
      out->num_rows = base_row + row;
      return Status::InvalidArgument(
          Located(pos, this_line, offset,
                  "a JSON Lines row must be an object, got " + std::string(v.type_name())));
    }
    const int64_t r = base_row + row;
    for (size_t o = 0; o < out_schema.size(); ++o) {
      const ColumnSpec& spec = out_schema[o];
      ColumnData& col = out->columns[o];
      auto it = v.find(spec.name);
      if (it == v.end()) {
        out->num_rows = base_row + row;
        return Status::InvalidArgument(
            Located(pos, this_line, offset, "the row has no key '" + spec.name + "'"));
      }
      auto bad = [&](const std::string& expected) {
        out->num_rows = base_row + row;
        const std::string got = it->dump();
        return Status::InvalidArgument(Located(
            pos, this_line, offset,
            "key '" + spec.name + "': expected " + expected + ", got " +
                Quote(got.data(), got.data() + got.size()) +
                OverrideHint(o < inferred.size() && inferred[o], pos.file ? *pos.file : "")));
      };
      const int64_t n = spec.RowElements();
      bool ok = false;
      switch (spec.dtype) {
        case DType::kString:
          if (it->is_string()) {
            const auto& s = it->get_ref<const std::string&>();
            col.AppendString(s.data(), s.size());
            ok = true;
          }
          break;
        case DType::kFloat64: {
          double* d = col.As<double>() + r * n;
          ok = WriteNumbers(*it, 0, spec.shape, false, &d);
          break;
        }
        case DType::kFloat32: {
          float* d = col.As<float>() + r * n;
          ok = WriteNumbers(*it, 0, spec.shape, false, &d);
          break;
        }
        case DType::kInt64: {
          int64_t* d = col.As<int64_t>() + r * n;
          ok = WriteNumbers(*it, 0, spec.shape, true, &d);
          break;
        }
        case DType::kInt32: {
          int32_t* d = col.As<int32_t>() + r * n;
          ok = WriteNumbers(*it, 0, spec.shape, true, &d);
          break;
        }
      }
      if (!ok) {
        std::string expected = spec.shape.empty() ? std::string(DTypeName(spec.dtype))
                                                  : "an array of shape " + ShapeText(spec.shape) +
                                                        " of " + DTypeName(spec.dtype);
        return bad(expected);
      }
    }
    ++row;
  }
  if (row != rows) {
    return Status::Internal(Located(
        pos, line, pos.offset + len,
        "the scan counted " + std::to_string(rows) + " rows, the parser " + std::to_string(row)));
  }
  out->num_rows = base_row + rows;
  return Status::Ok();
}

}  // namespace data
}  // namespace traintl
