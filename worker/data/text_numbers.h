// Number parsing for the text formats (text_formats.h): the exact general path
// (std::from_chars, with strtod's answer for out-of-range values) and the fast paths that
// ParseCsvRows tries first on every numeric field (FastNumber: Clinger's fast path in one
// pass; FastDecimal: short decimals a word at a time, SWAR). Internal to worker/data; all
// inline, because the CSV parser's speed depends on these being inlined into its loops.
//
// Thread-safety: pure functions and constant tables.
#pragma once

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

inline constexpr double kPow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                    1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                    1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
inline constexpr float kPow10f[] = {1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f,
                                    1e6f, 1e7f, 1e8f, 1e9f, 1e10f};

inline bool IsDigit(char c) { return static_cast<unsigned>(c - '0') < 10u; }
inline bool AtFieldEnd(const char* p, const char* end) {
  return p == end || *p == ',' || *p == '\n' || (*p == '\r' && (p + 1 == end || p[1] == '\n'));
}

inline constexpr uint64_t kPow10u[] = {1,      10,      100,      1000,     10000,
                                       100000, 1000000, 10000000, 100000000};

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

}  // namespace text_internal
}  // namespace data
}  // namespace traintl
