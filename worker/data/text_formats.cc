#include "worker/data/text_formats.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>
#include <string_view>
#include <system_error>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include <nlohmann/json.hpp>

#include "common/json_depth.h"

namespace traintl {
namespace data {
namespace {

// Longest value quoted in a message.
constexpr size_t kMaxQuoted = 64;

std::string Quote(const char* b, const char* e) {
  std::string s(b, static_cast<size_t>(e - b));
  if (s.size() > kMaxQuoted) s = s.substr(0, kMaxQuoted) + "...";
  return "'" + s + "'";
}

inline void Trim(const char*& b, const char*& e) {
  while (b < e && (*b == ' ' || *b == '\t')) ++b;
  while (e > b && (e[-1] == ' ' || e[-1] == '\t')) --e;
}

// Parses a whole (trimmed) field as a floating-point number; empty is NaN.
template <typename F>
bool ParseFloat(const char* b, const char* e, F* out) {
  Trim(b, e);
  if (b == e) {
    *out = std::numeric_limits<F>::quiet_NaN();
    return true;
  }
  if (*b == '+') {
    ++b;
    if (b == e || *b == '-' || *b == '+') return false;
  }
  auto r = std::from_chars(b, e, *out);
  if (r.ptr != e) return false;
  if (r.ec == std::errc::result_out_of_range) {  // as strtod: +-inf, or 0 for underflow
    std::string s(b, e);
    // strtof for floats: rounding through a double first could differ from it.
    if constexpr (std::is_same<F, float>::value) {
      *out = std::strtof(s.c_str(), nullptr);
    } else {
      *out = static_cast<F>(std::strtod(s.c_str(), nullptr));
    }
    return true;
  }
  return r.ec == std::errc();
}

enum class IntParse { kOk, kNotAnInt, kOutOfRange };

template <typename I>
IntParse ParseInt(const char* b, const char* e, I* out) {
  Trim(b, e);
  if (b < e && *b == '+') {
    ++b;
    if (b < e && (*b == '-' || *b == '+')) return IntParse::kNotAnInt;
  }
  if (b == e) return IntParse::kNotAnInt;
  auto r = std::from_chars(b, e, *out);
  if (r.ptr != e) return IntParse::kNotAnInt;
  if (r.ec == std::errc::result_out_of_range) return IntParse::kOutOfRange;
  return r.ec == std::errc() ? IntParse::kOk : IntParse::kNotAnInt;
}

std::string OverrideHint(bool inferred, const std::string& file) {
  if (!inferred) return "";
  return "; the column's type was inferred from the first rows of " + file +
         ": set column_types to read it as another type";
}

constexpr double kPow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                             1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
constexpr float kPow10f[] = {1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f, 1e6f, 1e7f, 1e8f, 1e9f, 1e10f};

inline bool IsDigit(char c) { return static_cast<unsigned>(c - '0') < 10u; }
inline bool AtFieldEnd(const char* p, const char* end) {
  return p == end || *p == ',' || *p == '\n' || (*p == '\r' && (p + 1 == end || p[1] == '\n'));
}

constexpr uint64_t kPow10u[] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};

// Reads the run of decimal digits at q (up to 8 of them, with 8 bytes readable) as one
// number, SWAR-style: returns how many digits there were, their value in *value.
inline int DigitRun8(const char* q, uint64_t* value) {
  uint64_t v;
  std::memcpy(&v, q, 8);
  const uint64_t x = v ^ 0x3030303030303030ull;  // digits become 0..9
  // A byte is not a digit when x > 9: x + 0x76 sets its top bit, or x had it set. Carries
  // only disturb bytes after the first non-digit, which are not used.
  const uint64_t non_digit = ((x + 0x7676767676767676ull) | x) & 0x8080808080808080ull;
  const int n = non_digit == 0 ? 8 : __builtin_ctzll(non_digit) >> 3;
  if (n == 0) return 0;
  // Keep the n digits as the low-order end of an 8-digit number (leading zeros before).
  uint64_t d = n == 8 ? x : x << (8 * (8 - n));
  d = (d * 10) + (d >> 8);
  d = (((d & 0x000000FF000000FFull) * 0x000F424000000064ull) +
       (((d >> 16) & 0x000000FF000000FFull) * 0x0000271000000001ull)) >>
      32;
  *value = static_cast<uint32_t>(d);
  return n;
}

// Accumulates the digits at *q into *mantissa, counting them in *digits; false when there
// are more than 19 (the mantissa could overflow).
inline bool ReadDigits(const char*& q, const char* end, uint64_t* mantissa, int* digits) {
  for (;;) {
    if (end - q >= 8) {
      uint64_t run;
      const int n = DigitRun8(q, &run);
      if (n == 0) return true;
      if (*digits + n > 19) return false;
      *mantissa = *mantissa * kPow10u[n] + run;
      *digits += n;
      q += n;
      if (n < 8) return true;
    } else {
      while (q < end && IsDigit(*q)) {
        if (++*digits > 19) return false;
        *mantissa = *mantissa * 10 + static_cast<uint64_t>(*q++ - '0');
      }
      return true;
    }
  }
}

// The common case of a numeric CSV field, parsed in one pass: a plain decimal ([-+]digits
// [.digits][e[-+]digits]) that ends at the field's end. Exact: Clinger's fast path, where
// the decimal mantissa and the power of ten are both exact in the target type, so one
// rounded operation gives the correctly rounded value. Returns false (nothing consumed)
// for anything else, which the caller hands to the general path.
template <typename T>
inline bool FastNumber(const char*& p, const char* end, T* out) {
  const char* q = p;
  bool negative = false;
  if (q < end && (*q == '-' || *q == '+')) negative = *q++ == '-';
  uint64_t mantissa = 0;
  int digits = 0;
  int exponent = 0;
  const char* start = q;
  if (!ReadDigits(q, end, &mantissa, &digits)) return false;
  if (q < end && *q == '.') {
    ++q;
    const int before = digits;
    if (!ReadDigits(q, end, &mantissa, &digits)) return false;
    exponent -= digits - before;
  }
  if (digits == 0) return false;
  if (q < end && (*q == 'e' || *q == 'E')) {
    ++q;
    bool exp_negative = false;
    if (q < end && (*q == '-' || *q == '+')) exp_negative = *q++ == '-';
    if (q == end || !IsDigit(*q)) return false;
    int e = 0;
    while (q < end && IsDigit(*q) && e < 1000) e = e * 10 + (*q++ - '0');
    exponent += exp_negative ? -e : e;
  }
  if (!AtFieldEnd(q, end)) return false;
  if constexpr (std::is_same<T, double>::value) {
    if (mantissa > (uint64_t{1} << 53) || exponent < -22 || exponent > 22) return false;
    double v = static_cast<double>(mantissa);
    v = exponent < 0 ? v / kPow10[-exponent] : v * kPow10[exponent];
    *out = negative ? -v : v;
  } else if constexpr (std::is_same<T, float>::value) {
    if (mantissa > (uint64_t{1} << 24) || exponent < -10 || exponent > 10) return false;
    float v = static_cast<float>(mantissa);
    v = exponent < 0 ? v / kPow10f[-exponent] : v * kPow10f[exponent];
    *out = negative ? -v : v;
  } else {  // integers: no fraction, no exponent
    if (exponent != 0 || q - start != digits) return false;
    if (negative) {
      if (mantissa > static_cast<uint64_t>(std::numeric_limits<T>::max()) + 1) return false;
      *out = static_cast<T>(0 - mantissa);
    } else {
      if (mantissa > static_cast<uint64_t>(std::numeric_limits<T>::max())) return false;
      *out = static_cast<T>(mantissa);
    }
  }
  p = q;
  return true;
}

// Bytes that FastDecimal may read from where it starts.
constexpr ptrdiff_t kFastDecimalReach = 32;

// The value of the first n (1..8) digits of x (bytes '0'..'9' minus '0', the first digit
// in the lowest byte; the bytes after the n digits may hold anything).
[[gnu::always_inline]] inline uint64_t SwarDigits(uint64_t x, int n) {
  uint64_t d = x << (8 * (8 - n));  // the n digits as the low end of an 8-digit number
  d = (d * 10) + (d >> 8);
  d = (((d & 0x000000FF000000FFull) * 0x000F424000000064ull) +
       (((d >> 16) & 0x000000FF000000FFull) * 0x0000271000000001ull)) >>
      32;
  return static_cast<uint32_t>(d);
}

// The bytes of v minus '0', and how many of them are digits before the first that is not,
// up to 7: 7 also when all 8 are (byte 7 is then a digit where the caller wants a
// non-digit, so it gives up).
[[gnu::always_inline]] inline int LeadingDigits(uint64_t v, uint64_t* x) {
  *x = v ^ 0x3030303030303030ull;
  // As in DigitRun8: a byte is not a digit when x > 9.
  const uint64_t non_digit = ((*x + 0x7676767676767676ull) | *x) & 0x8080808080808080ull;
  return __builtin_ctzll(non_digit | (uint64_t{1} << 63)) >> 3;
}

// The usual numeric CSV field, "[-]digits[.digits]" with at most 7 digits on either side
// of the point, followed by a field end, in as few instructions as can be: the digits
// before and after the point are read 8 bytes at a time and, when there are at most 8 in
// all, joined into one word that is converted at once. Needs kFastDecimalReach bytes
// readable at p (the caller checks that the buffer has them), so it tests no bounds.
// Exact: the decimal mantissa m < 10^14 and 10^k (k <= 7) are exact doubles, so m / 10^k
// is the correctly rounded double (Clinger's fast path); for floats, rounding that double
// to float gives the correctly rounded float, because the exact quotient is never within
// half a double ulp of a float rounding boundary without being on it (with k <= 8 its
// distance from one is at least 2^-25 / 10^k relative, over 2^-53). Returns false (p
// unchanged) for anything else; FastNumber and the general path take it then.
// Inlined into every caller: as a call it costs a quarter more.
// What FastDecimal accepts after the number: any field end, only ',', or only a line end.
enum class FieldEnd { kAny, kComma, kLine };

template <typename T, FieldEnd kEnd = FieldEnd::kAny>
[[gnu::always_inline]] inline bool FastDecimal(const char*& p, T* out) {
  const char* q = p;
  const bool negative = *q == '-';
  q += negative;
  uint64_t w;
  std::memcpy(&w, q, 8);
  uint64_t x;
  const int a = LeadingDigits(w, &x);  // digits before the point
  int b = 0;                           // digits after it
  uint64_t m;
  const char* after;
  if (q[a] == '.') {
    if constexpr (std::is_integral<T>::value) return false;
    std::memcpy(&w, q + a + 1, 8);
    uint64_t y;
    b = LeadingDigits(w, &y);
    const int n = a + b;
    if (n == 0) return false;
    if (n <= 8) {
      // The integer digits, then the fraction's in the bytes after them: one number.
      const uint64_t low = (uint64_t{1} << (8 * a)) - 1;
      m = SwarDigits((x & low) | (y << (8 * a)), n);
    } else {
      m = SwarDigits(x, a) * kPow10u[b] + SwarDigits(y, b);
    }
    after = q + a + 1 + b;
  } else {
    if (a == 0) return false;
    m = SwarDigits(x, a);
    after = q + a;
  }
  const char c = *after;
  if constexpr (kEnd == FieldEnd::kComma) {
    if (c != ',') return false;
  } else if constexpr (kEnd == FieldEnd::kLine) {
    if (c != '\n' && !(c == '\r' && after[1] == '\n')) return false;
  } else {
    if (c != ',' && c != '\n' && !(c == '\r' && after[1] == '\n')) return false;
  }
  if constexpr (std::is_floating_point<T>::value) {
    // m < 2^63: the signed conversion is one instruction, the unsigned one is not.
    double v = static_cast<double>(static_cast<int64_t>(m)) / kPow10[b];
    // The sign as a bit (v >= 0 here), which costs no branch; rounding to float is
    // symmetric, so it may come before.
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof v);
    bits |= static_cast<uint64_t>(negative) << 63;
    std::memcpy(&v, &bits, sizeof v);
    *out = static_cast<T>(v);
  } else {
    // At most 7 digits: fits int32 and int64 either way.
    *out = negative ? static_cast<T>(-static_cast<int64_t>(m)) : static_cast<T>(m);
  }
  p = after;
  return true;
}

// Where ParseCsvRows puts one field's values.
struct Sink {
  DType dtype = DType::kString;
  bool numeric = false;       // false also for fields that are not read
  ColumnData* col = nullptr;  // the output column; null when not read
  char* values = nullptr;     // numeric: the value of the block's first row
};

// FastDecimal into `sink` at the block's row `row`.
inline bool FastDecimal(const Sink& sink, const char*& p, int64_t row) {
  switch (sink.dtype) {
    case DType::kFloat64:
      return FastDecimal(p, reinterpret_cast<double*>(sink.values) + row);
    case DType::kFloat32:
      return FastDecimal(p, reinterpret_cast<float*>(sink.values) + row);
    case DType::kInt64:
      return FastDecimal(p, reinterpret_cast<int64_t*>(sink.values) + row);
    case DType::kInt32:
      return FastDecimal(p, reinterpret_cast<int32_t*>(sink.values) + row);
    case DType::kString:
      return false;
  }
  return false;
}

// One whole record of numeric fields that all go to columns of type T, each a
// FastDecimal, ending with its line: `values[f]` is field f's column (of T) at the block's
// first row. Advances p past the record's newline; false when some field is not that simple
// (the general path then reads the record from its start, overwriting what this wrote).
template <typename T>
inline bool FastRecord(const char*& p, const char* end, char* const* values, size_t nf,
                       int64_t row) {
  const char* q = p;
  // A FastDecimal field is at most 16 bytes and FastDecimal reads at most kFastDecimalReach
  // from its start, so with this many bytes left no field of a fast record needs its own
  // bounds check, and each field's terminator is known: ',' but after the last.
  if (end - q >= static_cast<ptrdiff_t>(17 * nf) + kFastDecimalReach) {
    for (size_t f = 0; f + 1 < nf; ++f) {
      if (!FastDecimal<T, FieldEnd::kComma>(q, reinterpret_cast<T*>(values[f]) + row)) {
        return false;
      }
      ++q;
    }
    if (!FastDecimal<T, FieldEnd::kLine>(q, reinterpret_cast<T*>(values[nf - 1]) + row)) {
      return false;
    }
    p = q + (*q == '\r' ? 2 : 1);
    return true;
  }
  for (size_t f = 0; f < nf; ++f) {
    T* out = reinterpret_cast<T*>(values[f]) + row;
    if (end - q < kFastDecimalReach || !FastDecimal(q, out)) return false;
    if (*q == ',') {
      if (f + 1 == nf) return false;  // too many fields
      ++q;
    }
  }
  if (*q == '\r') ++q;
  if (*q != '\n') return false;  // too few fields
  p = q + 1;
  return true;
}

// The fast path for column `col` at `row`; false when the field needs the general path.
inline bool FastValue(DType dtype, const char*& p, const char* end, ColumnData* col, int64_t row) {
  switch (dtype) {
    case DType::kFloat64:
      return FastNumber(p, end, col->As<double>() + row);
    case DType::kFloat32:
      return FastNumber(p, end, col->As<float>() + row);
    case DType::kInt64:
      return FastNumber(p, end, col->As<int64_t>() + row);
    case DType::kInt32:
      return FastNumber(p, end, col->As<int32_t>() + row);
    case DType::kString:
      return false;
  }
  return false;
}

// Writes one CSV value into column `out` at `row`.
inline bool ConvertValue(DType dtype, const char* b, const char* e, ColumnData* col, int64_t row,
                         std::string* why) {
  switch (dtype) {
    case DType::kFloat64:
      if (ParseFloat(b, e, col->As<double>() + row)) return true;
      break;
    case DType::kFloat32:
      if (ParseFloat(b, e, col->As<float>() + row)) return true;
      break;
    case DType::kInt64: {
      IntParse r = ParseInt(b, e, col->As<int64_t>() + row);
      if (r == IntParse::kOk) return true;
      if (r == IntParse::kOutOfRange) *why = " (out of range)";
      break;
    }
    case DType::kInt32: {
      IntParse r = ParseInt(b, e, col->As<int32_t>() + row);
      if (r == IntParse::kOk) return true;
      if (r == IntParse::kOutOfRange) *why = " (out of range)";
      break;
    }
    case DType::kString:
      col->AppendString(b, static_cast<size_t>(e - b));
      return true;
  }
  return false;
}

// What a sample of values allows a column to be.
struct TypeVote {
  bool all_int = true;
  bool all_number = true;
  bool any_value = false;
  void Add(const char* b, const char* e) {
    Trim(b, e);
    if (b == e) {
      all_int = false;  // an empty int is NaN: needs a float column
      return;
    }
    any_value = true;
    int64_t i;
    if (all_int && ParseInt(b, e, &i) == IntParse::kOk) return;
    all_int = false;
    double d;
    if (!ParseFloat(b, e, &d)) all_number = false;
  }
  DType Type() const {
    if (!any_value || !all_number) return DType::kString;
    return all_int ? DType::kInt64 : DType::kFloat64;
  }
};

// ScanRecords counts lines in windows of this many bytes: large enough that the per-window
// work (memrchr, the loop setup) does not matter, small enough that the window in which
// max_rows is reached, which goes through the record loop, is cheap.
constexpr size_t kCountWindow = 64 << 10;
// When few rows are wanted, the window is about this many bytes per row wanted (at least
// kMinCountWindow); a record longer than that goes through the record loop, as it would.
constexpr size_t kSmallWindowRowBytes = 128;
constexpr size_t kMinCountWindow = 256;

struct LineCount {
  int64_t newlines = 0;
  // The window may hold something that is not a plain line: a blank line (a '\n' followed
  // by '\n' or '\r', or the window starting with one), which is not a row, or, in CSV, a
  // quote, which may open a field with newlines in it.
  bool unsettled = false;
};

#if defined(__x86_64__) && defined(__GNUC__)
// CountLines 32 bytes at a time, for CPUs with AVX2 (checked at run time: the build
// targets baseline x86-64). Leaves the last 1..32 bytes (from *p) to the caller.
__attribute__((target("avx2"))) void CountLinesAvx2(const char*& p, const char* e, bool csv,
                                                    LineCount* c) {
  const __m256i nl = _mm256_set1_epi8('\n');
  const __m256i cr = _mm256_set1_epi8('\r');
  const __m256i quote = _mm256_set1_epi8(csv ? '"' : '\n');
  const __m256i zero = _mm256_setzero_si256();
  __m256i odd = zero;
  while (e - p > 32) {
    __m256i lanes = zero;
    for (int i = 0; i < 255 && e - p > 32; ++i, p += 32) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      const __m256i next = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 1));
      const __m256i is_nl = _mm256_cmpeq_epi8(v, nl);
      lanes = _mm256_sub_epi8(lanes, is_nl);
      const __m256i blank = _mm256_and_si256(
          is_nl, _mm256_or_si256(_mm256_cmpeq_epi8(next, nl), _mm256_cmpeq_epi8(next, cr)));
      odd = _mm256_or_si256(
          odd, _mm256_or_si256(blank, _mm256_andnot_si256(is_nl, _mm256_cmpeq_epi8(v, quote))));
    }
    const __m256i sums = _mm256_sad_epu8(lanes, zero);  // four 64-bit lane sums
    c->newlines += _mm256_extract_epi64(sums, 0) + _mm256_extract_epi64(sums, 1) +
                   _mm256_extract_epi64(sums, 2) + _mm256_extract_epi64(sums, 3);
  }
  c->unsettled = c->unsettled || _mm256_movemask_epi8(odd) != 0;
}

// __builtin_cpu_init: this runs as a static initializer, perhaps before libgcc's own.
const bool kHaveAvx2 = (__builtin_cpu_init(), __builtin_cpu_supports("avx2") != 0);
#endif

// Counts the newlines of [b, e), which starts at a record boundary and ends with '\n'.
// One pass does what memchr per line and a memchr for quotes did in two.
inline LineCount CountLines(const char* b, const char* e, bool csv) {
  LineCount c;
  c.unsettled = *b == '\n' || *b == '\r';
  const char* p = b;
#if defined(__x86_64__) && defined(__GNUC__)
  if (kHaveAvx2) CountLinesAvx2(p, e, csv, &c);
#endif
#if defined(__SSE2__)
  const __m128i nl = _mm_set1_epi8('\n');
  const __m128i cr = _mm_set1_epi8('\r');
  // JSON Lines has no quoting: then this matches the newlines, already counted.
  const __m128i quote = _mm_set1_epi8(csv ? '"' : '\n');
  const __m128i zero = _mm_setzero_si128();
  __m128i odd = zero;
  // Newlines are counted per byte lane (a match is -1, subtracted), and the lanes are
  // added up before any can pass 255.
  while (e - p > 16) {
    __m128i lanes = zero;
    // p + 16 < e: the load at p + 1 stays inside the range.
    for (int i = 0; i < 255 && e - p > 16; ++i, p += 16) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      const __m128i next = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 1));
      const __m128i is_nl = _mm_cmpeq_epi8(v, nl);
      lanes = _mm_sub_epi8(lanes, is_nl);
      const __m128i blank =
          _mm_and_si128(is_nl, _mm_or_si128(_mm_cmpeq_epi8(next, nl), _mm_cmpeq_epi8(next, cr)));
      odd =
          _mm_or_si128(odd, _mm_or_si128(blank, _mm_andnot_si128(is_nl, _mm_cmpeq_epi8(v, quote))));
    }
    const __m128i sums = _mm_sad_epu8(lanes, zero);  // two 64-bit lane sums
    c.newlines += _mm_cvtsi128_si32(sums) + _mm_cvtsi128_si32(_mm_srli_si128(sums, 8));
  }
  c.unsettled = c.unsettled || _mm_movemask_epi8(odd) != 0;
#endif
  for (; p < e; ++p) {
    if (csv && *p == '"') c.unsettled = true;
    if (*p != '\n') continue;
    ++c.newlines;
    if (p + 1 < e && (p[1] == '\n' || p[1] == '\r')) c.unsettled = true;
  }
  return c;
}

// Advances *p past blank lines (ScanRecords consumes them together with the next record).
void SkipBlankLines(const char* buf, size_t len, size_t* p, int64_t* line) {
  for (;;) {
    if (*p < len && buf[*p] == '\n') {
      *p += 1;
    } else if (*p + 1 < len && buf[*p] == '\r' && buf[*p + 1] == '\n') {
      *p += 2;
    } else {
      return;
    }
    ++*line;
  }
}

}  // namespace

std::string Located(const TextPos& pos, int64_t line, uint64_t offset, const std::string& what) {
  return (pos.file != nullptr ? *pos.file : std::string("<data>")) + ":" + std::to_string(line) +
         ": " + what + " (byte offset " + std::to_string(offset) + ")";
}

size_t Utf8BomLength(const char* buf, size_t len) {
  return len >= 3 && static_cast<unsigned char>(buf[0]) == 0xEF &&
                 static_cast<unsigned char>(buf[1]) == 0xBB &&
                 static_cast<unsigned char>(buf[2]) == 0xBF
             ? 3
             : 0;
}

Result<ScanResult> ScanRecords(const char* buf, size_t len, int64_t max_rows, bool at_eof, bool csv,
                               const TextPos& pos) {
  ScanResult r;
  size_t p = 0;
  for (bool more = true; more;) {
    // The record loop below takes records while p < limit (the last may end past it),
    // minding quotes when `quotes`.
    size_t limit = len;
    bool quotes = csv;
    // Whole windows of plain lines (no blank line, no quote: each line a record) are
    // counted a vector at a time; the record loop gets what that cannot settle: the window
    // in which max_rows is reached, a window with a blank line or a quote, a record longer
    // than a window, and the end of the buffer.
    while (p < len && r.rows < max_rows) {
      // A window much longer than the rows still wanted would be counted for nothing
      // (InferCsvSchema asks for one record at a time).
      const int64_t wanted = max_rows - r.rows;
      const size_t window = wanted >= int64_t{kCountWindow / kSmallWindowRowBytes}
                                ? kCountWindow
                                : std::max<size_t>(kMinCountWindow, static_cast<size_t>(wanted) *
                                                                        kSmallWindowRowBytes);
      const size_t window_end = std::min(len, p + window);
      const void* last = memrchr(buf + p, '\n', window_end - p);
      if (last == nullptr) {
        limit = p + 1;
        break;
      }
      const size_t stop = static_cast<size_t>(static_cast<const char*>(last) - buf) + 1;
      const LineCount c = CountLines(buf + p, buf + stop, csv);
      if (c.unsettled || r.rows + c.newlines >= max_rows) {
        limit = stop;
        quotes = csv && std::memchr(buf + p, '"', stop - p) != nullptr;
        break;
      }
      r.rows += c.newlines;
      r.lines += c.newlines;
      p = stop;
    }
    more = false;
    while (r.rows < max_rows && p < len) {
      if (p >= limit) {
        more = true;
        break;
      }
      size_t end;  // just past the record's newline
      int64_t lines = 1;
      if (!quotes) {
        const void* nl = std::memchr(buf + p, '\n', len - p);
        if (nl == nullptr) {
          if (!at_eof) break;
          end = len;
        } else {
          end = static_cast<size_t>(static_cast<const char*>(nl) - buf) + 1;
        }
      } else {
        bool in_quotes = false, field_start = true, found = false;
        size_t q = p;
        int64_t quote_line = 0;
        while (q < len) {
          const char c = buf[q++];
          if (in_quotes) {
            if (c == '"') {
              if (q < len && buf[q] == '"') {
                ++q;
              } else {
                in_quotes = false;
              }
            } else if (c == '\n') {
              ++lines;
            }
          } else if (c == '\n') {
            found = true;
            break;
          } else if (c == '"' && field_start) {
            in_quotes = true;
            quote_line = lines;
            field_start = false;
          } else {
            field_start = c == ',';
          }
        }
        if (!found) {
          if (!at_eof) break;
          if (in_quotes) {
            return Status::InvalidArgument(
                Located(pos, pos.line + r.lines + quote_line - 1, pos.offset + p,
                        "a quoted field is not closed before the end of the file"));
          }
          end = len;
        } else {
          end = q;
        }
      }
      size_t content_end = end;
      if (content_end > p && buf[content_end - 1] == '\n') --content_end;
      if (content_end > p && buf[content_end - 1] == '\r') --content_end;
      if (content_end > p) ++r.rows;
      r.lines += lines;
      p = end;
    }
  }
  r.consumed = p;
  return r;
}

Status SplitCsvRecord(const char* p, size_t n, const TextPos& pos, std::vector<std::string>* out) {
  out->clear();
  const char* end = p + n;
  const char* start = p;
  for (;;) {
    std::string field;
    if (p < end && *p == '"') {
      ++p;
      for (;;) {
        if (p >= end) {
          return Status::InvalidArgument(
              Located(pos, pos.line, pos.offset, "a quoted field is not closed"));
        }
        if (*p == '"') {
          if (p + 1 < end && p[1] == '"') {
            field += '"';
            p += 2;
            continue;
          }
          ++p;
          break;
        }
        field += *p++;
      }
      if (p < end && *p != ',') {
        return Status::InvalidArgument(
            Located(pos, pos.line, pos.offset + static_cast<uint64_t>(p - start),
                    "unexpected " + Quote(p, p + 1) + " after the closing quote of field " +
                        std::to_string(out->size() + 1)));
      }
    } else {
      const char* fs = p;
      while (p < end && *p != ',') ++p;
      field.assign(fs, p);
    }
    out->push_back(std::move(field));
    if (p < end && *p == ',') {
      ++p;
      continue;
    }
    return Status::Ok();
  }
}

Result<CsvHeader> ParseCsvHeader(const char* buf, size_t len, bool at_eof,
                                 const std::vector<std::string>& column_names, const TextPos& pos) {
  CsvHeader h;
  h.data_offset = Utf8BomLength(buf, len);
  h.data_line = pos.line;
  if (!column_names.empty()) {
    h.names = column_names;
  } else {
    // Blank lines before the header are skipped, as blank lines anywhere.
    SkipBlankLines(buf, len, &h.data_offset, &h.data_line);
    const TextPos at{pos.file, h.data_line, pos.offset + h.data_offset};
    TRAINTL_ASSIGN_OR_RETURN(ScanResult r, ScanRecords(buf + h.data_offset, len - h.data_offset, 1,
                                                       at_eof, /*csv=*/true, at));
    if (r.rows == 0) {
      if (at_eof) {
        return Status::InvalidArgument(
            (pos.file ? *pos.file : std::string()) +
            ": the file has no header row (an empty CSV file; every CSV file starts with a "
            "header, or set column_names)");
      }
      return Status::InvalidArgument(Located(
          at, at.line, at.offset,
          "the header row is longer than the first " + std::to_string(len) + " bytes of the file"));
    }
    const char* rec = buf + h.data_offset;
    size_t n = r.consumed;
    h.data_offset += r.consumed;
    h.data_line += r.lines;
    while (n > 0 && (rec[n - 1] == '\n' || rec[n - 1] == '\r')) --n;
    TRAINTL_RETURN_IF_ERROR(SplitCsvRecord(rec, n, at, &h.names));
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < h.names.size(); ++i) {
    if (h.names[i].empty() && column_names.empty()) h.names[i] = "Unnamed: " + std::to_string(i);
    if (!seen.insert(h.names[i]).second) {
      return Status::InvalidArgument(
          (pos.file ? *pos.file : std::string()) + ": column '" + h.names[i] + "' appears twice " +
          (column_names.empty() ? "in the header row" : "in column_names"));
    }
  }
  return h;
}

Result<Schema> InferCsvSchema(const std::vector<std::string>& names, const char* buf, size_t len,
                              int64_t max_rows, const std::map<std::string, DType>& types,
                              const TextPos& pos) {
  std::vector<TypeVote> votes(names.size());
  std::vector<std::string> fields;
  size_t p = 0;
  int64_t line = pos.line;
  for (int64_t rows = 0; rows < max_rows && p < len;) {
    SkipBlankLines(buf, len, &p, &line);
    TextPos at{pos.file, line, pos.offset + p};
    TRAINTL_ASSIGN_OR_RETURN(ScanResult r,
                             ScanRecords(buf + p, len - p, 1, /*at_eof=*/true, /*csv=*/true, at));
    if (r.consumed == 0 || r.rows == 0) break;
    const char* rec = buf + p;
    size_t n = r.consumed;
    p += r.consumed;
    line += r.lines;
    ++rows;
    while (n > 0 && (rec[n - 1] == '\n' || rec[n - 1] == '\r')) --n;
    TRAINTL_RETURN_IF_ERROR(SplitCsvRecord(rec, n, at, &fields));
    if (fields.size() != names.size()) {
      return Status::InvalidArgument(Located(at, at.line, at.offset,
                                             "expected " + std::to_string(names.size()) +
                                                 " fields (as the header has), got " +
                                                 std::to_string(fields.size())));
    }
    for (size_t i = 0; i < fields.size(); ++i) {
      votes[i].Add(fields[i].data(), fields[i].data() + fields[i].size());
    }
  }
  Schema schema;
  for (size_t i = 0; i < names.size(); ++i) {
    ColumnSpec c;
    c.name = names[i];
    auto it = types.find(names[i]);
    c.dtype = it != types.end() ? it->second : votes[i].Type();
    schema.push_back(std::move(c));
  }
  return schema;
}

namespace {

// About how many records buf[0, len) holds, from the length of its first few (a little
// more, so that the columns rarely need to grow).
int64_t EstimateRows(const char* buf, size_t len) {
  constexpr int kSample = 8;
  const char* p = buf;
  const char* const end = buf + len;
  int n = 0;
  while (n < kSample && p < end) {
    const void* nl = std::memchr(p, '\n', static_cast<size_t>(end - p));
    p = nl == nullptr ? end : static_cast<const char*>(nl) + 1;
    ++n;
  }
  if (n == 0) return 0;
  const int64_t per_record = std::max<int64_t>(1, (p - buf) / n);
  const int64_t estimate = static_cast<int64_t>(len) / per_record;
  return estimate + estimate / 8 + 16;
}

}  // namespace

Status ParseCsvRows(const char* buf, size_t len, int64_t rows, const std::vector<FieldPlan>& fields,
                    const Schema& out_schema, const TextPos& pos, RowBlock* out,
                    int64_t* lines_out) {
  const int64_t base_row = out->num_rows;
  // Rows the numeric columns have room for: `rows`, or when unknown an estimate, grown
  // when the records turn out to be more.
  int64_t capacity = rows >= 0 ? rows : EstimateRows(buf, len);
  auto size_columns = [&] {
    for (size_t o = 0; o < out_schema.size(); ++o) {
      if (out_schema[o].dtype != DType::kString) {
        out->columns[o].values.Resize(out_schema[o].RowBytes() *
                                      static_cast<size_t>(base_row + capacity));
      }
    }
  };
  size_columns();
  const size_t nf = fields.size();
  // Per field, where its values go, looked up once rather than per value; the last entry
  // stands for fields beyond nf (an error, found at the end of the record).
  std::vector<Sink> sinks(nf + 1);
  std::vector<char*> uniform_values(nf);
  // Points the sinks at the columns' (perhaps moved) values.
  auto point_sinks = [&] {
    for (size_t f = 0; f < nf; ++f) {
      if (fields[f].out < 0) continue;
      const ColumnSpec& spec = out_schema[static_cast<size_t>(fields[f].out)];
      ColumnData* col = &out->columns[static_cast<size_t>(fields[f].out)];
      sinks[f].dtype = spec.dtype;
      sinks[f].col = col;
      if (spec.dtype != DType::kString) {
        sinks[f].numeric = true;
        sinks[f].values = col->values.data() + spec.RowBytes() * static_cast<size_t>(base_row);
      }
      uniform_values[f] = sinks[f].values;
    }
  };
  point_sinks();
  const char* p = buf;
  const char* const end = buf + len;
  int64_t line = pos.line;
  int64_t row = 0;
  // When every field is read into a column of one numeric type (what iter_torch_batches
  // with one dtype asks for), whole records go through FastRecord, which skips the
  // per-field dispatch below. It stops being tried when it fails for many records.
  DType uniform = nf > 0 && sinks[0].numeric ? sinks[0].dtype : DType::kString;
  for (size_t f = 1; f < nf && uniform != DType::kString; ++f) {
    if (!sinks[f].numeric || sinks[f].dtype != uniform) uniform = DType::kString;
  }
  char* const* values = uniform_values.data();
  int64_t fast_misses = 0;
  auto fast_record = [&](const char*& q) {
    if (fast_misses > 64 && fast_misses * 8 > row) return false;
    bool ok = false;
    switch (uniform) {
      case DType::kFloat32:
        ok = FastRecord<float>(q, end, values, nf, row);
        break;
      case DType::kFloat64:
        ok = FastRecord<double>(q, end, values, nf, row);
        break;
      case DType::kInt64:
        ok = FastRecord<int64_t>(q, end, values, nf, row);
        break;
      case DType::kInt32:
        ok = FastRecord<int32_t>(q, end, values, nf, row);
        break;
      case DType::kString:
        return false;
    }
    if (!ok) ++fast_misses;
    return ok;
  };
  std::string scratch;
  std::string why;
  while (p < end) {
    if (*p == '\n') {
      ++p;
      ++line;
      continue;
    }
    if (*p == '\r' && (p + 1 == end || p[1] == '\n')) {
      p += p + 1 == end ? 1 : 2;
      ++line;
      continue;
    }
    if (row >= capacity) {
      if (rows >= 0) {
        return Status::Internal(Located(pos, line, pos.offset + static_cast<uint64_t>(p - buf),
                                        "more records than the scan counted"));
      }
      capacity += capacity / 2 + 16;
      size_columns();
      point_sinks();
    }
    if (fast_record(p)) {
      ++line;
      ++row;
      continue;
    }
    const char* const rec = p;
    const int64_t rec_line = line;
    // The rows before the bad one stay in `out`, so that they are still delivered.
    auto error = [&](const std::string& what) {
      out->num_rows = base_row + row;
      return Status::InvalidArgument(
          Located(pos, rec_line, pos.offset + static_cast<uint64_t>(rec - buf), what));
    };
    size_t f = 0;
    for (;;) {
      const char* fs;
      const char* fe;
      if (p < end && *p == '"') {
        ++p;
        scratch.clear();
        const char* seg = p;
        const int64_t quote_line = line;
        for (;;) {
          if (p >= end) {
            // Only reachable for a block the reader did not scan (rows < 0), which
            // ends at the end of the file.
            out->num_rows = base_row + row;
            return Status::InvalidArgument(
                Located(pos, quote_line, pos.offset + static_cast<uint64_t>(rec - buf),
                        "a quoted field is not closed before the end of the file"));
          }
          if (*p == '"') {
            if (p + 1 < end && p[1] == '"') {
              scratch.append(seg, p + 1);
              p += 2;
              seg = p;
              continue;
            }
            scratch.append(seg, p);
            ++p;
            break;
          }
          if (*p == '\n') ++line;
          ++p;
        }
        fs = scratch.data();
        fe = fs + scratch.size();
        if (p < end && *p != ',' && *p != '\n' && !(*p == '\r' && (p + 1 == end || p[1] == '\n'))) {
          return error("unexpected " + Quote(p, p + 1) + " after the closing quote of field " +
                       std::to_string(f + 1));
        }
      } else {
        const Sink& sink = sinks[f < nf ? f : nf];
        if (sink.numeric) {
          if ((end - p >= kFastDecimalReach && FastDecimal(sink, p, row)) ||
              FastValue(sink.dtype, p, end, sink.col, base_row + row)) {
            ++f;
            if (p < end && *p == ',') {
              ++p;
              continue;
            }
            break;
          }
        }
        fs = p;
        while (p < end && *p != ',' && *p != '\n') ++p;
        fe = p;
        if (fe > fs && fe[-1] == '\r' && (p == end || *p == '\n')) --fe;
      }
      if (f < nf && fields[f].out >= 0) {
        const int o = fields[f].out;
        const ColumnSpec& spec = out_schema[static_cast<size_t>(o)];
        why.clear();
        if (!ConvertValue(spec.dtype, fs, fe, &out->columns[static_cast<size_t>(o)], base_row + row,
                          &why)) {
          return error("column '" + spec.name + "': cannot parse " + Quote(fs, fe) + " as " +
                       DTypeName(spec.dtype) + why +
                       OverrideHint(fields[f].inferred, pos.file ? *pos.file : ""));
        }
      }
      ++f;
      if (p < end && *p == ',') {
        ++p;
        continue;
      }
      break;
    }
    if (f != nf) {
      return error("expected " + std::to_string(nf) + " fields (as the header has), got " +
                   std::to_string(f));
    }
    if (p < end && *p == '\r') ++p;
    if (p < end && *p == '\n') {
      ++p;
      ++line;
    }
    ++row;
  }
  if (rows >= 0 && row != rows) {
    return Status::Internal(Located(pos, line, pos.offset + len,
                                    "the scan counted " + std::to_string(rows) +
                                        " records, the parser " + std::to_string(row)));
  }
  if (rows < 0) {
    capacity = row;
    size_columns();
  }
  out->num_rows = base_row + row;
  if (lines_out != nullptr) *lines_out = line - pos.line;
  return Status::Ok();
}

// ---- JSON Lines

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
