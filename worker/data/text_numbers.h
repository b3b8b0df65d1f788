// Number parsing for the text formats (text_formats.h): the exact general path
// (fast_float::from_chars from Debian's libfast-float-dev, with strtod's answer for
// out-of-range values) and the fast paths that ParseCsvRows tries first on every numeric
// field (FastDecimal: short decimals a word at a time, SWAR, about 1.6x faster than
// fast_float on them; FastFloat / FastInt: any other number that ends at the field's end).
// Internal to worker/data; all inline, because the CSV parser's speed depends on these being
// inlined into its loops.
//
// Thread-safety: pure functions and constant tables.
#pragma once

#include <fast_float/fast_float.h>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <system_error>
#include <type_traits>

namespace traintl {
namespace data {
namespace text_internal {

inline void Trim(const char*& b, const char*& e) {
  while (b < e && (*b == ' ' || *b == '\t')) ++b;
  while (e > b && (e[-1] == ' ' || e[-1] == '\t')) --e;
}

// fast_float::from_chars: the correctly rounded F of the number at b (no leading '+' or
// space; "inf", "infinity" and "nan" in any case, "nan(chars)"), correctly rounded also
// for float (never through a double). Out of range, the fast_float of Debian 12 (3.9)
// gives +-inf or +-0 (correctly rounded, so strtod's answer) without an error; later
// versions report result_out_of_range, for which strtod / strtof answer here.
template <typename F>
inline fast_float::from_chars_result FromChars(const char* b, const char* e, F* out) {
  auto r = fast_float::from_chars(b, e, *out);
  if (r.ec == std::errc::result_out_of_range) {
    std::string s(b, r.ptr);
    if constexpr (std::is_same<F, float>::value) {
      *out = std::strtof(s.c_str(), nullptr);
    } else {
      *out = std::strtod(s.c_str(), nullptr);
    }
    r.ec = std::errc();
  }
  return r;
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
  auto r = FromChars(b, e, out);
  return r.ptr == e && r.ec == std::errc();
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

inline constexpr double kPow10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7};

inline bool AtFieldEnd(const char* p, const char* end) {
  return p == end || *p == ',' || *p == '\n' || (*p == '\r' && (p + 1 == end || p[1] == '\n'));
}

inline constexpr uint64_t kPow10u[] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000};

// A numeric CSV field that FastDecimal does not take, parsed in one pass when it is a
// number without a leading '+' or spaces that ends at the field's end (the general path,
// ParseFloat, would give the same value: it is the same conversion). Returns false
// (nothing consumed; *out may have been written) for anything else, which the caller hands
// to the general path.
template <typename F>
inline bool FastFloat(const char*& p, const char* end, F* out) {
  if (p == end || *p == '+') return false;
  auto r = FromChars(p, end, out);
  if (r.ec != std::errc() || !AtFieldEnd(r.ptr, end)) return false;
  p = r.ptr;
  return true;
}

// The same for an integer column: optional '-', digits, in range, then the field's end.
template <typename I>
inline bool FastInt(const char*& p, const char* end, I* out) {
  auto r = std::from_chars(p, end, *out);
  if (r.ec != std::errc() || !AtFieldEnd(r.ptr, end)) return false;
  p = r.ptr;
  return true;
}

// Bytes that FastDecimal may read from where it starts.
inline constexpr ptrdiff_t kFastDecimalReach = 32;

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
  // A byte is not a digit when x > 9: x + 0x76 sets its top bit, or x had it set. Carries
  // only disturb bytes after the first non-digit, which are not used.
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
// unchanged) for anything else; FastFloat / FastInt and the general path take it then.
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

}  // namespace text_internal
}  // namespace data
}  // namespace traintl
