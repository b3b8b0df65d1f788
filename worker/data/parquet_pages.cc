#include "worker/data/parquet_pages.h"

#include <snappy-c.h>
#include <zlib.h>
#include <zstd.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "worker/data/parquet_thrift.h"

namespace traintl {
namespace data {
namespace parquet {
namespace {

Status Bad(const std::string& why) { return Status::InvalidArgument(why); }

uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;  // Parquet is little-endian, as every platform traintl builds for
}

// The RLE/bit-packed hybrid encoding (definition levels, dictionary indices, RLE booleans)
// over [p, end) with values of `bit_width` bits.
class RleDecoder {
 public:
  RleDecoder(const uint8_t* p, const uint8_t* end, int bit_width)
      : p_(p), end_(end), bit_width_(bit_width) {}

  // Reads `n` values into `out`; false when the runs end first or are malformed.
  bool Get(uint32_t* out, size_t n) {
    while (n > 0) {
      if (rle_left_ == 0 && packed_left_ == 0 && !NextRun()) return false;
      if (rle_left_ > 0) {
        const size_t k = static_cast<size_t>(std::min<uint64_t>(rle_left_, n));
        std::fill(out, out + k, rle_value_);
        out += k;
        n -= k;
        rle_left_ -= k;
      } else {
        const size_t k = static_cast<size_t>(std::min<uint64_t>(packed_left_, n));
        for (size_t i = 0; i < k; ++i) {
          if (!Unpack(packed_index_++, out++)) return false;
        }
        n -= k;
        packed_left_ -= k;
      }
    }
    return true;
  }

 private:
  bool NextRun() {
    uint64_t header = 0;
    for (int shift = 0;; shift += 7) {
      if (p_ >= end_ || shift > 63) return false;
      const uint8_t b = *p_++;
      header |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) break;
    }
    if (header & 1) {
      const uint64_t groups = header >> 1;
      if (groups == 0 || groups > (uint64_t{1} << 40)) return false;
      packed_ = p_;
      // The run may claim more groups than there are bytes (the last run of a page is
      // sometimes cut short); Unpack checks each value's bytes.
      const uint64_t bytes = groups * static_cast<uint64_t>(bit_width_);
      packed_bytes_ = static_cast<size_t>(std::min<uint64_t>(bytes, Remaining()));
      p_ += packed_bytes_;
      packed_left_ = groups * 8;
      packed_index_ = 0;
      if (bit_width_ == 0) {  // no bytes: every value is 0
        rle_value_ = 0;
        rle_left_ = packed_left_;
        packed_left_ = 0;
      }
    } else {
      rle_left_ = header >> 1;
      if (rle_left_ == 0) return false;
      const size_t bytes = static_cast<size_t>((bit_width_ + 7) / 8);
      if (Remaining() < bytes) return false;
      uint32_t v = 0;
      for (size_t i = 0; i < bytes; ++i) v |= static_cast<uint32_t>(p_[i]) << (8 * i);
      p_ += bytes;
      if (bit_width_ < 32 && (v >> bit_width_) != 0) return false;
      rle_value_ = v;
    }
    return true;
  }
  bool Unpack(uint64_t index, uint32_t* out) const {
    const uint64_t bit = index * static_cast<uint64_t>(bit_width_);
    const uint64_t first = bit / 8;
    const uint64_t last = (bit + static_cast<uint64_t>(bit_width_) - 1) / 8;
    if (last >= packed_bytes_) return false;
    uint64_t word = 0;
    if (first + 8 <= packed_bytes_) {
      std::memcpy(&word, packed_ + first, 8);
    } else {
      for (uint64_t i = first; i <= last; ++i)
        word |= static_cast<uint64_t>(packed_[i]) << (8 * (i - first));
    }
    word >>= bit % 8;
    *out = static_cast<uint32_t>(word & ((uint64_t{1} << bit_width_) - 1));
    return true;
  }
  size_t Remaining() const { return static_cast<size_t>(end_ - p_); }

  const uint8_t* p_;
  const uint8_t* end_;
  const int bit_width_;
  uint64_t rle_left_ = 0;
  uint32_t rle_value_ = 0;
  uint64_t packed_left_ = 0;
  uint64_t packed_index_ = 0;
  const uint8_t* packed_ = nullptr;
  size_t packed_bytes_ = 0;
};

struct Str {
  const char* p;
  uint32_t n;
};

// The values of one page or dictionary, decoded to their physical type.
struct Values {
  std::vector<uint8_t> bools;
  std::vector<int32_t> i32;
  std::vector<int64_t> i64;
  std::vector<float> f32;
  std::vector<double> f64;
  std::vector<Str> strs;
};

// Bytes per PLAIN value of a fixed-width numeric type; 0 for the others.
size_t FixedWidth(int32_t type) {
  switch (static_cast<PhysicalType>(type)) {
    case PhysicalType::kInt32:
    case PhysicalType::kFloat:
      return 4;
    case PhysicalType::kInt64:
    case PhysicalType::kDouble:
      return 8;
    default:
      return 0;
  }
}

template <typename T>
Status PlainFixed(const uint8_t* p, size_t len, size_t n, std::vector<T>* out) {
  if (n > len / sizeof(T)) {
    return Bad(std::to_string(n) + " values need " + std::to_string(n * sizeof(T)) +
               " bytes, the page has " + std::to_string(len));
  }
  out->resize(n);
  if (n > 0) std::memcpy(out->data(), p, n * sizeof(T));
  return Status::Ok();
}

// PLAIN-encoded values of `type` ([p, p + len) holds at least n of them).
Status DecodePlain(int32_t type, const uint8_t* p, size_t len, size_t n, Values* v) {
  switch (static_cast<PhysicalType>(type)) {
    case PhysicalType::kBoolean: {
      if (n > len * 8) return Bad("the page holds fewer booleans than it says");
      v->bools.resize(n);
      for (size_t i = 0; i < n; ++i) v->bools[i] = (p[i / 8] >> (i % 8)) & 1;
      return Status::Ok();
    }
    case PhysicalType::kInt32:
      return PlainFixed(p, len, n, &v->i32);
    case PhysicalType::kInt64:
      return PlainFixed(p, len, n, &v->i64);
    case PhysicalType::kFloat:
      return PlainFixed(p, len, n, &v->f32);
    case PhysicalType::kDouble:
      return PlainFixed(p, len, n, &v->f64);
    case PhysicalType::kByteArray: {
      if (n > len / 4) return Bad("the page holds fewer strings than it says");
      v->strs.resize(n);
      size_t at = 0;
      for (size_t i = 0; i < n; ++i) {
        if (len - at < 4) return Bad("the page ends inside a string's length");
        const uint32_t k = LoadU32(p + at);
        at += 4;
        if (k > len - at) {
          return Bad("a string of " + std::to_string(k) + " bytes where " +
                     std::to_string(len - at) + " remain in the page");
        }
        v->strs[i] = {reinterpret_cast<const char*>(p + at), k};
        at += k;
      }
      return Status::Ok();
    }
    default:
      return Bad(std::string("values of type ") + PhysicalTypeName(type) + " are not supported");
  }
}

template <typename T>
Status Gather(const std::vector<T>& dict, const std::vector<uint32_t>& idx, std::vector<T>* out) {
  out->resize(idx.size());
  const size_t n = dict.size();
  for (size_t i = 0; i < idx.size(); ++i) {
    if (idx[i] >= n) {
      return Bad("dictionary index " + std::to_string(idx[i]) + " is past the dictionary's " +
                 std::to_string(n) + " values");
    }
    (*out)[i] = dict[idx[i]];
  }
  return Status::Ok();
}

Status GatherDict(int32_t type, const Values& dict, const std::vector<uint32_t>& idx, Values* v) {
  switch (static_cast<PhysicalType>(type)) {
    case PhysicalType::kBoolean:
      return Gather(dict.bools, idx, &v->bools);
    case PhysicalType::kInt32:
      return Gather(dict.i32, idx, &v->i32);
    case PhysicalType::kInt64:
      return Gather(dict.i64, idx, &v->i64);
    case PhysicalType::kFloat:
      return Gather(dict.f32, idx, &v->f32);
    case PhysicalType::kDouble:
      return Gather(dict.f64, idx, &v->f64);
    case PhysicalType::kByteArray:
      return Gather(dict.strs, idx, &v->strs);
    default:
      return Bad(std::string("values of type ") + PhysicalTypeName(type) + " are not supported");
  }
}

Status NullError(int64_t row, DType dtype) {
  return Bad("row " + std::to_string(row) + " of the row group is null, and a null can be read " +
             "only in a float column (as NaN), not in a " + DTypeName(dtype) + " one");
}

// Appends rows [lo, hi) of a page (whose definition levels are `defs`, empty when the
// column is REQUIRED) with values `vals` (non-null ones only) to `out` as OutT.
// Values of type T at p (not necessarily aligned): PLAIN data in a page, or a vector.
template <typename T>
struct Span {
  const uint8_t* p = nullptr;
  size_t n = 0;
  size_t size() const { return n; }
  T operator[](size_t i) const {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    return v;
  }
};
template <typename T>
Span<T> SpanOf(const std::vector<T>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size()};
}

// Whether converting InT to OutT can fail: floats to ints (NaN, fractions, out of range) and
// ints to narrower ints. static_cast would be undefined behaviour or wrap silently there;
// CSV refuses such fields too.
template <typename OutT, typename InT>
constexpr bool kChecked = std::is_integral<OutT>::value &&
                          (std::is_floating_point<InT>::value || sizeof(InT) > sizeof(OutT));

template <typename OutT, typename InT>
bool Convert(InT v, OutT* out) {
  if constexpr (kChecked<OutT, InT>) {
    if constexpr (std::is_floating_point<InT>::value) {
      // The bounds are powers of two, exact in every float type.
      const InT lo = static_cast<InT>(std::numeric_limits<OutT>::min());
      if (!(v >= lo && v < -lo) || v != std::trunc(v)) return false;
    } else if (v < std::numeric_limits<OutT>::min() || v > std::numeric_limits<OutT>::max()) {
      return false;
    }
  }
  *out = static_cast<OutT>(v);
  return true;
}

template <typename OutT, typename InT>
Status NotConvertible(InT v, int64_t row, DType dtype) {
  return Bad("row " + std::to_string(row) + " of the row group holds " + std::to_string(v) +
             ", which is not a " + DTypeName(dtype) + " value");
}

template <typename OutT, typename InT>
Status Emit(Span<InT> vals, const std::vector<uint32_t>& defs, size_t lo, size_t hi,
            int64_t page_first_row, DType dtype, ColumnData* out) {
  OutT* dst = reinterpret_cast<OutT*>(out->values.Extend((hi - lo) * sizeof(OutT)));
  if (defs.empty()) {
    if (hi > vals.size()) return Bad("a page holds fewer values than it says");
    if constexpr (std::is_same<OutT, InT>::value) {
      std::memcpy(dst, vals.p + lo * sizeof(InT), (hi - lo) * sizeof(OutT));
    } else if constexpr (std::is_same<OutT, float>::value && std::is_same<InT, double>::value) {
      NarrowDoubles(vals.p + lo * sizeof(double), hi - lo, dst);
    } else if constexpr (kChecked<OutT, InT>) {
      for (size_t i = lo; i < hi; ++i) {
        if (!Convert(vals[i], dst++)) {
          return NotConvertible<OutT>(vals[i], page_first_row + static_cast<int64_t>(i), dtype);
        }
      }
    } else {
      for (size_t i = lo; i < hi; ++i) *dst++ = static_cast<OutT>(vals[i]);
    }
    return Status::Ok();
  }
  size_t k = 0;
  for (size_t i = 0; i < lo; ++i) k += defs[i];
  for (size_t i = lo; i < hi; ++i) {
    if (defs[i] != 0) {
      if (k >= vals.size()) return Bad("a page holds fewer values than it says");
      if (!Convert(vals[k], dst++)) {
        return NotConvertible<OutT>(vals[k], page_first_row + static_cast<int64_t>(i), dtype);
      }
      ++k;
    } else if constexpr (std::is_floating_point<OutT>::value) {
      *dst++ = std::numeric_limits<OutT>::quiet_NaN();
    } else {
      return NullError(page_first_row + static_cast<int64_t>(i), dtype);
    }
  }
  return Status::Ok();
}

template <typename InT>
Status EmitAs(Span<InT> vals, const std::vector<uint32_t>& defs, size_t lo, size_t hi,
              int64_t first, DType dtype, ColumnData* out) {
  switch (dtype) {
    case DType::kFloat32:
      return Emit<float>(vals, defs, lo, hi, first, dtype, out);
    case DType::kFloat64:
      return Emit<double>(vals, defs, lo, hi, first, dtype, out);
    case DType::kInt32:
      return Emit<int32_t>(vals, defs, lo, hi, first, dtype, out);
    case DType::kInt64:
      return Emit<int64_t>(vals, defs, lo, hi, first, dtype, out);
    case DType::kString:
      break;
  }
  return Bad(std::string("numbers cannot be read as ") + DTypeName(dtype));
}

Status EmitStrings(const std::vector<Str>& vals, const std::vector<uint32_t>& defs, size_t lo,
                   size_t hi, int64_t first, ColumnData* out) {
  size_t k = 0;
  if (!defs.empty()) {
    for (size_t i = 0; i < lo; ++i) k += defs[i];
  } else {
    k = lo;
  }
  for (size_t i = lo; i < hi; ++i) {
    if (!defs.empty() && defs[i] == 0)
      return NullError(first + static_cast<int64_t>(i), DType::kString);
    if (k >= vals.size()) return Bad("a page holds fewer values than it says");
    out->AppendString(vals[k].p, vals[k].n);
    ++k;
  }
  return Status::Ok();
}

// Decodes the pages of one column chunk.
class ChunkDecoder {
 public:
  ChunkDecoder(const uint8_t* data, size_t len, const ChunkDesc& desc, DType dtype, ColumnData* out,
               DecodeScratch* scratch)
      : data_(data),
        len_(len),
        desc_(desc),
        dtype_(dtype),
        out_(out),
        dict_buf_(scratch->dict),
        page_buf_(scratch->page) {}

  Status Run(int64_t skip, int64_t take) {
    if (dtype_ == DType::kString && desc_.type != static_cast<int32_t>(PhysicalType::kByteArray)) {
      return Bad(std::string(PhysicalTypeName(desc_.type)) + " values cannot be read as strings");
    }
    if (dtype_ != DType::kString && desc_.type == static_cast<int32_t>(PhysicalType::kByteArray)) {
      return Bad(std::string("BYTE_ARRAY values cannot be read as ") + DTypeName(dtype_));
    }
    const int64_t end = skip + take;
    int64_t row = 0;  // the first row of the next data page
    size_t pos = 0;
    while (row < end) {
      if (pos >= len_) {
        return Bad("the column chunk ends after " + std::to_string(row) + " rows, before row " +
                   std::to_string(end - 1));
      }
      size_t header_len = 0;
      TRAINTL_ASSIGN_OR_RETURN(PageHeader h,
                               DecodePageHeader(data_ + pos, len_ - pos, &header_len));
      pos += header_len;
      if (h.compressed_page_size < 0 || static_cast<size_t>(h.compressed_page_size) > len_ - pos) {
        return Bad("a page of " + std::to_string(h.compressed_page_size) +
                   " bytes where the column chunk has " + std::to_string(len_ - pos) + " left");
      }
      if (h.uncompressed_page_size < 0 || h.uncompressed_page_size > kMaxPageBytes) {
        return Bad("a page claims " + std::to_string(h.uncompressed_page_size) +
                   " uncompressed bytes (at most 256 MiB are read)");
      }
      const uint8_t* page = data_ + pos;
      const size_t page_len = static_cast<size_t>(h.compressed_page_size);
      pos += page_len;
      if (h.type == static_cast<int32_t>(PageType::kDictionaryPage)) {
        TRAINTL_RETURN_IF_ERROR(ReadDictionary(h, page, page_len));
        continue;
      }
      if (h.type == static_cast<int32_t>(PageType::kIndexPage)) continue;
      int64_t n = 0;
      if (h.type == static_cast<int32_t>(PageType::kDataPage) && h.data_page) {
        n = h.data_page->num_values;
      } else if (h.type == static_cast<int32_t>(PageType::kDataPageV2) && h.data_page_v2) {
        n = h.data_page_v2->num_values;
      } else {
        return Bad("a page of unknown type " + std::to_string(h.type));
      }
      if (n < 0 || n > kMaxPageValues) {
        return Bad("a page claims " + std::to_string(n) + " values (at most " +
                   std::to_string(kMaxPageValues) + " per page are read)");
      }
      if (row + n > skip) {
        const int64_t lo = std::max<int64_t>(skip - row, 0);
        const int64_t hi = std::min<int64_t>(end - row, n);
        TRAINTL_RETURN_IF_ERROR(ReadDataPage(h, page, page_len, static_cast<size_t>(n),
                                             static_cast<size_t>(lo), static_cast<size_t>(hi),
                                             row));
      }
      row += n;
    }
    return Status::Ok();
  }

 private:
  // The page's bytes after decompression (no copy when uncompressed).
  Result<const uint8_t*> Uncompressed(const uint8_t* p, size_t len, size_t uncompressed_len,
                                      bool compressed, Buffer* buf) {
    if (!compressed || desc_.codec == static_cast<int32_t>(Codec::kUncompressed)) {
      if (len != uncompressed_len) {
        return Bad("an uncompressed page of " + std::to_string(len) + " bytes says it has " +
                   std::to_string(uncompressed_len));
      }
      return p;
    }
    buf->Resize(std::max<size_t>(uncompressed_len, 1));
    TRAINTL_RETURN_IF_ERROR(
        Decompress(desc_.codec, p, len, reinterpret_cast<uint8_t*>(buf->data()), uncompressed_len));
    return reinterpret_cast<const uint8_t*>(buf->data());
  }

  // Whether a page's values can be decompressed straight into out_: PLAIN values of a
  // REQUIRED column read as their own type, compressed, all of them wanted, and nothing
  // else in the decompressed bytes (`values_len`, n values).
  bool Direct(int32_t encoding, bool compressed, size_t values_len, size_t n, size_t lo,
              size_t hi) const {
    if (!compressed || desc_.codec == static_cast<int32_t>(Codec::kUncompressed)) return false;
    if (desc_.optional || encoding != static_cast<int32_t>(Encoding::kPlain)) return false;
    if (n == 0 || lo != 0 || hi != n) return false;
    bool same = false;
    switch (static_cast<PhysicalType>(desc_.type)) {
      case PhysicalType::kInt32:
        same = dtype_ == DType::kInt32;
        break;
      case PhysicalType::kInt64:
        same = dtype_ == DType::kInt64;
        break;
      case PhysicalType::kFloat:
        same = dtype_ == DType::kFloat32;
        break;
      case PhysicalType::kDouble:
        same = dtype_ == DType::kFloat64;
        break;
      default:
        break;
    }
    return same && values_len == n * DTypeSize(dtype_);
  }

  // Decompresses a page's values (see Direct) to the end of out_'s values.
  Status DecompressInto(const uint8_t* p, size_t len, size_t values_len) {
    const size_t before = out_->values.size();
    char* dst = out_->values.Extend(values_len);
    Status st = Decompress(desc_.codec, p, len, reinterpret_cast<uint8_t*>(dst), values_len);
    if (!st.ok()) out_->values.Resize(before);
    return st;
  }

  Status ReadDictionary(const PageHeader& h, const uint8_t* page, size_t page_len) {
    if (!h.dictionary_page) return Bad("a dictionary page without its header");
    const auto& d = *h.dictionary_page;
    if (d.encoding != static_cast<int32_t>(Encoding::kPlain) &&
        d.encoding != static_cast<int32_t>(Encoding::kPlainDictionary)) {
      return Bad(std::string("a dictionary page encoded as ") + EncodingName(d.encoding) +
                 " is not supported");
    }
    if (d.num_values < 0) return Bad("a dictionary with a negative number of values");
    TRAINTL_ASSIGN_OR_RETURN(
        const uint8_t* p,
        Uncompressed(page, page_len, static_cast<size_t>(h.uncompressed_page_size), true,
                     &dict_buf_));
    dict_ = Values();
    TRAINTL_RETURN_IF_ERROR(DecodePlain(desc_.type, p,
                                        static_cast<size_t>(h.uncompressed_page_size),
                                        static_cast<size_t>(d.num_values), &dict_));
    has_dict_ = true;
    return Status::Ok();
  }

  Status ReadDataPage(const PageHeader& h, const uint8_t* page, size_t page_len, size_t n,
                      size_t lo, size_t hi, int64_t first_row) {
    const uint8_t* p = nullptr;
    size_t len = 0;
    int32_t encoding = 0;
    defs_.clear();
    if (h.data_page) {
      encoding = h.data_page->encoding;
      const size_t values_len = static_cast<size_t>(h.uncompressed_page_size);
      if (Direct(encoding, true, values_len, n, lo, hi)) {
        return DecompressInto(page, page_len, values_len);
      }
      TRAINTL_ASSIGN_OR_RETURN(
          p, Uncompressed(page, page_len, static_cast<size_t>(h.uncompressed_page_size), true,
                          &page_buf_));
      len = static_cast<size_t>(h.uncompressed_page_size);
      if (desc_.optional) {
        if (h.data_page->definition_level_encoding != static_cast<int32_t>(Encoding::kRle)) {
          return Bad(std::string("definition levels encoded as ") +
                     EncodingName(h.data_page->definition_level_encoding) + " are not supported");
        }
        if (len < 4) return Bad("the page ends before its definition levels");
        const uint32_t k = LoadU32(p);
        if (k > len - 4) return Bad("definition levels longer than their page");
        TRAINTL_RETURN_IF_ERROR(ReadDefs(p + 4, k, hi));
        p += 4 + k;
        len -= 4 + k;
      }
    } else {
      const auto& v2 = *h.data_page_v2;
      encoding = v2.encoding;
      if (v2.repetition_levels_byte_length != 0) return Bad("a flat column with repetition levels");
      if (v2.definition_levels_byte_length < 0 ||
          static_cast<size_t>(v2.definition_levels_byte_length) > page_len ||
          v2.definition_levels_byte_length > h.uncompressed_page_size) {
        return Bad("definition levels longer than their page");
      }
      const size_t k = static_cast<size_t>(v2.definition_levels_byte_length);
      if (desc_.optional) {
        TRAINTL_RETURN_IF_ERROR(ReadDefs(page, k, hi));
      } else if (k != 0) {
        return Bad("a REQUIRED column's page has definition levels");
      }
      len = static_cast<size_t>(h.uncompressed_page_size) - k;
      if (k == 0 && Direct(encoding, v2.is_compressed, len, n, lo, hi)) {
        return DecompressInto(page, page_len, len);
      }
      TRAINTL_ASSIGN_OR_RETURN(
          p, Uncompressed(page + k, page_len - k, len, v2.is_compressed, &page_buf_));
    }
    // Only the values up to row `hi` are decoded: a page's rows after it are not needed.
    size_t present = hi;
    if (desc_.optional) {
      present = 0;
      for (uint32_t d : defs_) present += d;
    }
    plain_ = nullptr;
    TRAINTL_RETURN_IF_ERROR(DecodeValues(encoding, p, len, present));
    return EmitPage(lo, hi, first_row);
  }

  Status ReadDefs(const uint8_t* p, size_t len, size_t n) {
    defs_.resize(n);
    RleDecoder rle(p, p + len, 1);
    if (!rle.Get(defs_.data(), n)) return Bad("bad definition levels");
    return Status::Ok();
  }

  Status DecodeValues(int32_t encoding, const uint8_t* p, size_t len, size_t n) {
    switch (static_cast<Encoding>(encoding)) {
      case Encoding::kPlain: {
        const size_t width = FixedWidth(desc_.type);
        if (width == 0) return DecodePlain(desc_.type, p, len, n, &vals_);
        // Fixed-width values are emitted straight from the page, not copied first.
        if (n > len / width) {
          return Bad(std::to_string(n) + " values need " + std::to_string(n * width) +
                     " bytes, the page has " + std::to_string(len));
        }
        plain_ = p;
        plain_count_ = n;
        return Status::Ok();
      }
      case Encoding::kPlainDictionary:
      case Encoding::kRleDictionary: {
        if (!has_dict_) return Bad("a dictionary-encoded page without a dictionary page");
        if (n == 0) return Status::Ok();
        if (len < 1 || p[0] > 32) return Bad("bad dictionary index bit width");
        idx_.resize(n);
        RleDecoder rle(p + 1, p + len, p[0]);
        if (!rle.Get(idx_.data(), n)) return Bad("bad dictionary indices");
        return GatherDict(desc_.type, dict_, idx_, &vals_);
      }
      case Encoding::kRle: {
        if (desc_.type != static_cast<int32_t>(PhysicalType::kBoolean)) {
          return Bad("RLE-encoded values of a non-boolean column");
        }
        if (len < 4) return Bad("the page ends before its RLE length");
        const uint32_t k = LoadU32(p);
        if (k > len - 4) return Bad("RLE values longer than their page");
        idx_.resize(n);
        RleDecoder rle(p + 4, p + 4 + k, 1);
        if (!rle.Get(idx_.data(), n)) return Bad("bad RLE booleans");
        vals_.bools.assign(idx_.begin(), idx_.end());
        return Status::Ok();
      }
      default:
        return Bad(std::string("the ") + EncodingName(encoding) +
                   " encoding is not supported (PLAIN, dictionary and RLE are)");
    }
  }

  Status EmitPage(size_t lo, size_t hi, int64_t first) {
    const bool plain = plain_ != nullptr;
    switch (static_cast<PhysicalType>(desc_.type)) {
      case PhysicalType::kBoolean:
        return EmitAs(SpanOf(vals_.bools), defs_, lo, hi, first, dtype_, out_);
      case PhysicalType::kInt32:
        return EmitAs(plain ? Span<int32_t>{plain_, plain_count_} : SpanOf(vals_.i32), defs_, lo,
                      hi, first, dtype_, out_);
      case PhysicalType::kInt64:
        return EmitAs(plain ? Span<int64_t>{plain_, plain_count_} : SpanOf(vals_.i64), defs_, lo,
                      hi, first, dtype_, out_);
      case PhysicalType::kFloat:
        return EmitAs(plain ? Span<float>{plain_, plain_count_} : SpanOf(vals_.f32), defs_, lo, hi,
                      first, dtype_, out_);
      case PhysicalType::kDouble:
        return EmitAs(plain ? Span<double>{plain_, plain_count_} : SpanOf(vals_.f64), defs_, lo, hi,
                      first, dtype_, out_);
      case PhysicalType::kByteArray:
        return EmitStrings(vals_.strs, defs_, lo, hi, first, out_);
      default:
        return Bad(std::string("values of type ") + PhysicalTypeName(desc_.type) +
                   " are not supported");
    }
  }

  const uint8_t* const data_;
  const size_t len_;
  const ChunkDesc desc_;
  const DType dtype_;
  ColumnData* const out_;
  Buffer& dict_buf_;  // the dictionary's bytes (its strings point into them)
  Values dict_;
  bool has_dict_ = false;
  Buffer& page_buf_;
  Values vals_;                     // decoded values of the page, unless plain_
  const uint8_t* plain_ = nullptr;  // PLAIN fixed-width values of the page, in place
  size_t plain_count_ = 0;
  std::vector<uint32_t> defs_;
  std::vector<uint32_t> idx_;
};

}  // namespace

Status Decompress(int32_t codec, const uint8_t* in, size_t in_len, uint8_t* out, size_t out_len) {
  switch (static_cast<Codec>(codec)) {
    case Codec::kUncompressed:
      if (in_len != out_len) return Bad("an uncompressed page whose sizes differ");
      if (out_len > 0) std::memcpy(out, in, out_len);
      return Status::Ok();
    case Codec::kSnappy: {
      size_t n = 0;
      if (snappy_uncompressed_length(reinterpret_cast<const char*>(in), in_len, &n) != SNAPPY_OK) {
        return Bad("bad SNAPPY data");
      }
      if (n != out_len) {
        return Bad("SNAPPY data decompresses to " + std::to_string(n) +
                   " bytes, its page header says " + std::to_string(out_len));
      }
      size_t got = out_len;
      if (snappy_uncompress(reinterpret_cast<const char*>(in), in_len, reinterpret_cast<char*>(out),
                            &got) != SNAPPY_OK ||
          got != out_len) {
        return Bad("bad SNAPPY data");
      }
      return Status::Ok();
    }
    case Codec::kZstd: {
      // One context per thread, reused: creating one per page costs its window buffers.
      struct Ctx {
        ZSTD_DCtx* ctx = ZSTD_createDCtx();
        ~Ctx() { ZSTD_freeDCtx(ctx); }
      };
      thread_local Ctx dctx;
      if (dctx.ctx == nullptr) return Status::ResourceExhausted("ZSTD_createDCtx failed");
      const size_t got = ZSTD_decompressDCtx(dctx.ctx, out, out_len, in, in_len);
      if (ZSTD_isError(got)) {
        return Bad(std::string("bad ZSTD data (") + ZSTD_getErrorName(got) + ")");
      }
      if (got != out_len) {
        return Bad("ZSTD data decompresses to " + std::to_string(got) +
                   " bytes, its page header says " + std::to_string(out_len));
      }
      return Status::Ok();
    }
    case Codec::kGzip: {
      z_stream z;
      std::memset(&z, 0, sizeof z);
      if (inflateInit2(&z, 15 + 32) != Z_OK) return Status::Internal("inflateInit2 failed");
      z.next_in = const_cast<Bytef*>(in);
      z.avail_in = static_cast<uInt>(std::min<size_t>(in_len, UINT32_MAX));
      z.next_out = out;
      z.avail_out = static_cast<uInt>(out_len);
      int rc = inflate(&z, Z_FINISH);
      // Some writers concatenate gzip members; read them all into the same output.
      while (rc == Z_STREAM_END && z.avail_in > 0 && z.avail_out > 0) {
        if (inflateReset(&z) != Z_OK) break;
        rc = inflate(&z, Z_FINISH);
      }
      const size_t got = out_len - z.avail_out;
      inflateEnd(&z);
      if (rc != Z_STREAM_END) {
        if (z.avail_out == 0 && rc == Z_BUF_ERROR) {
          return Bad("GZIP data decompresses to more bytes than its page header says (" +
                     std::to_string(out_len) + ")");
        }
        return Bad("bad GZIP data");
      }
      if (got != out_len) {
        return Bad("GZIP data decompresses to " + std::to_string(got) +
                   " bytes, its page header says " + std::to_string(out_len));
      }
      return Status::Ok();
    }
    default:
      return Bad(std::string("the ") + CodecName(codec) +
                 " codec is not supported (UNCOMPRESSED, SNAPPY, GZIP and ZSTD are)");
  }
}

void NarrowDoubles(const uint8_t* src, size_t n, float* dst) {
  size_t i = 0;
#if defined(__SSE2__)
  // cvtpd2ps rounds as cvtsd2ss does (by MXCSR, round to nearest unless the process changed
  // it, which static_cast would follow too), so the results are the same bits; the compiler
  // does not vectorize the scalar loop at -O2. Eight a round keeps the loads and stores
  // independent.
  for (; i + 8 <= n; i += 8) {
    const uint8_t* p = src + i * sizeof(double);
    const __m128 a = _mm_cvtpd_ps(_mm_loadu_pd(reinterpret_cast<const double*>(p)));
    const __m128 b = _mm_cvtpd_ps(_mm_loadu_pd(reinterpret_cast<const double*>(p + 16)));
    const __m128 c = _mm_cvtpd_ps(_mm_loadu_pd(reinterpret_cast<const double*>(p + 32)));
    const __m128 d = _mm_cvtpd_ps(_mm_loadu_pd(reinterpret_cast<const double*>(p + 48)));
    _mm_storeu_ps(dst + i, _mm_movelh_ps(a, b));
    _mm_storeu_ps(dst + i + 4, _mm_movelh_ps(c, d));
  }
#endif
  for (; i < n; ++i) {
    double v;
    std::memcpy(&v, src + i * sizeof(double), sizeof v);
    dst[i] = static_cast<float>(v);
  }
}

Status DecodeColumnChunk(const uint8_t* data, size_t len, const ChunkDesc& desc, int64_t skip,
                         int64_t take, DType dtype, ColumnData* out, DecodeScratch* scratch) {
  if (skip < 0 || take < 0) return Status::Internal("negative row range");
  if (take == 0) return Status::Ok();
  DecodeScratch own;
  ChunkDecoder d(data, len, desc, dtype, out, scratch != nullptr ? scratch : &own);
  return d.Run(skip, take);
}

}  // namespace parquet
}  // namespace data
}  // namespace traintl
