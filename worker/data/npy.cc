#include "worker/data/npy.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace traintl {
namespace data {
namespace {

// The value of `key` in numpy's header dict: the text after "'key':" up to the next
// top-level ',' or '}' (a tuple's commas are inside parentheses).
bool DictValue(const std::string& dict, const std::string& key, std::string* out) {
  const std::string pattern = "'" + key + "'";
  auto k = dict.find(pattern);
  if (k == std::string::npos) return false;
  auto colon = dict.find(':', k + pattern.size());
  if (colon == std::string::npos) return false;
  size_t p = colon + 1;
  int depth = 0;
  size_t end = p;
  for (; end < dict.size(); ++end) {
    const char c = dict[end];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
  }
  std::string v = dict.substr(p, end - p);
  auto first = v.find_first_not_of(" \t");
  auto last = v.find_last_not_of(" \t");
  *out = first == std::string::npos ? "" : v.substr(first, last - first + 1);
  return true;
}

uint64_t LoadLittle(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// The raw bits of one element as a native-endian integer of itemsize bytes.
inline uint64_t LoadBits(const char* p, int itemsize, bool big_endian) {
  unsigned char b[8];
  std::memcpy(b, p, static_cast<size_t>(itemsize));
  if (big_endian) {
    for (int i = 0; i < itemsize / 2; ++i) std::swap(b[i], b[itemsize - 1 - i]);
  }
  return LoadLittle(b, itemsize);
}

// One element as a double (floats) or int64 (integers and bools).
inline bool LoadElement(const NpyHeader& h, const char* p, double* d, int64_t* i, bool* is_float) {
  const uint64_t bits = LoadBits(p, h.itemsize, h.big_endian);
  switch (h.kind) {
    case 'f':
      *is_float = true;
      if (h.itemsize == 8) {
        std::memcpy(d, &bits, 8);
      } else {
        const uint32_t b32 = static_cast<uint32_t>(bits);
        float f;
        std::memcpy(&f, &b32, 4);
        *d = f;
      }
      return true;
    case 'i': {
      *is_float = false;
      const int shift = 64 - 8 * h.itemsize;
      *i = static_cast<int64_t>(bits << shift) >> shift;  // sign-extend
      return true;
    }
    case 'u':
      *is_float = false;
      if (bits > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
      *i = static_cast<int64_t>(bits);
      return true;
    case 'b':
      *is_float = false;
      *i = bits != 0;
      return true;
  }
  return false;
}

}  // namespace

int64_t NpyHeader::row_elements() const {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

DType NpyHeader::natural_dtype() const {
  if (kind == 'f') return itemsize == 4 ? DType::kFloat32 : DType::kFloat64;
  if (kind == 'i' && itemsize == 4) return DType::kInt32;
  return DType::kInt64;
}

Result<NpyHeader> ParseNpyHeader(const char* buf, size_t len, const std::string& file) {
  auto bad = [&](const std::string& what) {
    return Status::InvalidArgument(file + ": not a valid .npy file: " + what);
  };
  if (len < 10 || std::memcmp(buf, "\x93NUMPY", 6) != 0) {
    return bad("it does not start with the .npy magic \\x93NUMPY");
  }
  const int major = static_cast<unsigned char>(buf[6]);
  const auto* u = reinterpret_cast<const unsigned char*>(buf);
  uint64_t header_len;
  size_t prefix;
  if (major == 1) {
    header_len = LoadLittle(u + 8, 2);
    prefix = 10;
  } else if (major == 2 || major == 3) {
    if (len < 12) return bad("truncated header");
    header_len = LoadLittle(u + 8, 4);
    prefix = 12;
  } else {
    return bad("unsupported format version " + std::to_string(major));
  }
  if (header_len > kMaxNpyHeaderBytes) return bad("the header is longer than 1 MiB");
  if (prefix + header_len > len) return bad("truncated header");
  const std::string dict(buf + prefix, static_cast<size_t>(header_len));

  NpyHeader h;
  h.data_offset = prefix + header_len;
  std::string descr, fortran, shape;
  if (!DictValue(dict, "descr", &descr) || !DictValue(dict, "fortran_order", &fortran) ||
      !DictValue(dict, "shape", &shape)) {
    return bad("the header lacks descr, fortran_order or shape: " + dict);
  }
  if (descr.size() < 2 || (descr.front() != '\'' && descr.front() != '"')) {
    return bad("unsupported dtype " + descr + " (structured arrays cannot be read)");
  }
  h.descr = descr.substr(1, descr.size() - 2);
  if (h.descr.size() < 3) return bad("unsupported dtype '" + h.descr + "'");
  const char order = h.descr[0];
  h.kind = h.descr[1];
  try {
    h.itemsize = std::stoi(h.descr.substr(2));
  } catch (...) {
    return bad("unsupported dtype '" + h.descr + "'");
  }
  h.big_endian = order == '>';  // '=' is native: little-endian on every supported target
  const bool ok = (h.kind == 'f' && (h.itemsize == 4 || h.itemsize == 8)) ||
                  ((h.kind == 'i' || h.kind == 'u') &&
                   (h.itemsize == 1 || h.itemsize == 2 || h.itemsize == 4 || h.itemsize == 8)) ||
                  (h.kind == 'b' && h.itemsize == 1);
  if (!ok || (order != '<' && order != '>' && order != '|' && order != '=')) {
    return Status::InvalidArgument(
        file + ": unsupported .npy dtype '" + h.descr +
        "' (float64/32, int64/32/16/8, uint32/16/8 and bool can be read)");
  }
  if (fortran != "False") {
    return Status::InvalidArgument(file +
                                   ": the array is in Fortran order; save it with "
                                   "np.save(path, np.ascontiguousarray(a))");
  }
  if (shape.size() < 2 || shape.front() != '(' || shape.back() != ')') {
    return bad("bad shape " + shape);
  }
  std::string inner = shape.substr(1, shape.size() - 2);
  size_t p = 0;
  while (p < inner.size()) {
    while (p < inner.size() && (inner[p] == ' ' || inner[p] == ',')) ++p;
    if (p >= inner.size()) break;
    size_t q = p;
    while (q < inner.size() && inner[q] != ',') ++q;
    try {
      h.shape.push_back(std::stoll(inner.substr(p, q - p)));
    } catch (...) {
      return bad("bad shape " + shape);
    }
    if (h.shape.back() < 0) return bad("bad shape " + shape);
    p = q;
  }
  if (h.shape.empty()) {
    return Status::InvalidArgument(file +
                                   ": the array is 0-dimensional (a scalar); a dataset "
                                   "needs an array of rows");
  }
  return h;
}

Status AppendNpyRows(const NpyHeader& h, const char* raw, int64_t rows, const ColumnSpec& out,
                     const std::string& file, uint64_t offset, ColumnData* col) {
  const int64_t per_row = h.row_elements();
  const int64_t n = rows * per_row;
  const size_t out_size = DTypeSize(out.dtype);
  char* dst = col->values.Extend(static_cast<size_t>(n) * out_size);
  const bool native = !h.big_endian && out.dtype == h.natural_dtype() &&
                      static_cast<size_t>(h.itemsize) == out_size;
  if (native) {
    std::memcpy(dst, raw, static_cast<size_t>(n) * out_size);
    return Status::Ok();
  }
  for (int64_t k = 0; k < n; ++k) {
    double d = 0;
    int64_t i = 0;
    bool is_float = false;
    const uint64_t at = offset + static_cast<uint64_t>(k) * static_cast<uint64_t>(h.itemsize);
    if (!LoadElement(h, raw + k * h.itemsize, &d, &i, &is_float)) {
      return Status::InvalidArgument(file + ": byte offset " + std::to_string(at) +
                                     ": a uint64 value above the int64 range");
    }
    const bool to_int = out.dtype == DType::kInt64 || out.dtype == DType::kInt32;
    if (is_float && to_int && !(std::fabs(d) < 9.2e18)) {  // NaN, inf, out of range
      return Status::InvalidArgument(file + ": byte offset " + std::to_string(at) + ": " +
                                     std::to_string(d) + " cannot be read as " +
                                     DTypeName(out.dtype));
    }
    switch (out.dtype) {
      case DType::kFloat64:
        reinterpret_cast<double*>(dst)[k] = is_float ? d : static_cast<double>(i);
        break;
      case DType::kFloat32:
        reinterpret_cast<float*>(dst)[k] =
            static_cast<float>(is_float ? d : static_cast<double>(i));
        break;
      case DType::kInt64:
        reinterpret_cast<int64_t*>(dst)[k] = is_float ? static_cast<int64_t>(d) : i;
        break;
      case DType::kInt32:
        reinterpret_cast<int32_t*>(dst)[k] =
            static_cast<int32_t>(is_float ? static_cast<int64_t>(d) : i);
        break;
      case DType::kString:
        return Status::InvalidArgument(file + ": numeric .npy data cannot be read as strings");
    }
  }
  return Status::Ok();
}

}  // namespace data
}  // namespace traintl
