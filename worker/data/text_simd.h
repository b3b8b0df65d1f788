// Vector helpers for the CSV parser (csv_format.cc): where the field separators of a
// 64-byte window are, as a bitmask, so that the fields of a record can be found without
// parsing the ones before them. SSE2 (the x86-64 baseline) where available, else a
// portable loop with the same result (also on x86 when TRAINTL_CSV_PORTABLE is defined,
// to test it). Internal to worker/data.
//
// Thread-safety: pure functions.
#pragma once

#include <atomic>
#include <cstdint>

#include <cstring>
#include <type_traits>

#if defined(__SSE2__) && !defined(TRAINTL_CSV_PORTABLE)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(TRAINTL_CSV_PORTABLE)
#include <immintrin.h>
#define TRAINTL_CSV_SSE41 1
#endif

namespace traintl {
namespace data {
namespace text_internal {

// Whether SeparatorMask64 is vectorized; the portable loop is slower than reading the
// fields one after the other (FastRecord), so ParseCsvRows then does not use it.
#if defined(__SSE2__) && !defined(TRAINTL_CSV_PORTABLE)
inline constexpr bool kSeparatorMaskVectorized = true;
#else
inline constexpr bool kSeparatorMaskVectorized = false;
#endif

// Bytes that SeparatorMask64 reads from where it starts.
inline constexpr int kSeparatorWindow = 64;

// The portable version (also the reference in tests).
inline uint64_t SeparatorMask64Scalar(const char* p) {
  uint64_t mask = 0;
  for (int i = 0; i < 64; ++i) {
    if (p[i] == ',' || p[i] == '\n') mask |= uint64_t{1} << i;
  }
  return mask;
}

// Bit i (0..63) set where p[i] is ',' or '\n'. Reads p[0, 64).
[[gnu::always_inline]] inline uint64_t SeparatorMask64(const char* p) {
#if defined(__SSE2__) && !defined(TRAINTL_CSV_PORTABLE)
  const __m128i comma = _mm_set1_epi8(',');
  const __m128i newline = _mm_set1_epi8('\n');
  uint64_t mask = 0;
  for (int i = 0; i < 4; ++i) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i));
    const __m128i hit = _mm_or_si128(_mm_cmpeq_epi8(v, comma), _mm_cmpeq_epi8(v, newline));
    mask |= static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(hit))) << (16 * i);
  }
  return mask;
#else
  return SeparatorMask64Scalar(p);
#endif
}

#if defined(TRAINTL_CSV_SSE41)
// DecimalSse41's shuffles: for a field of `len` bytes (1..16) with its point at `dot`
// (len: none), the pshufb control that puts its digits (the bytes but the point) at the
// end of 16 bytes, in order, and zeros before them.
struct DigitShuffles {
  alignas(16) unsigned char at[17][17][16];
  constexpr DigitShuffles() : at() {
    for (int len = 0; len <= 16; ++len) {
      for (int dot = 0; dot <= 16; ++dot) {
        int src[16] = {};
        int n = 0;
        for (int i = 0; i < len; ++i) {
          if (i != dot) src[n++] = i;
        }
        for (int j = 0; j < 16; ++j) at[len][dot][j] = 0x80;
        for (int t = 0; t < n; ++t) at[len][dot][16 - n + t] = static_cast<unsigned char>(src[t]);
      }
    }
  }
};
inline constexpr DigitShuffles kDigitShuffles{};

inline constexpr double kPow10x16[] = {1e0, 1e1, 1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                       1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};

// The field [b, e) (its separator at e; 16 bytes readable from b) when it is
// "[-]digits[.digits]" with 1..15 digits in all ("[-]digits" for an integer T), at most 8
// after the point for float and at most 9 digits for int32: its value, exactly as
// strtod / strtof / from_chars give it. The digits are gathered by one shuffle and
// converted 16 at a time (pmaddubsw, pmaddwd, packusdw, pmaddwd). Exact: the decimal
// mantissa m < 10^15 < 2^53 and 10^k (k <= 15) are exact doubles, so m / 10^k is the
// correctly rounded double (Clinger); for float, with k <= 8 rounding that double to
// float is correctly rounded, as in FastDecimal (text_numbers.h): the exact quotient is
// never within half a double ulp of a float rounding midpoint without being on it (its
// distance from one is at least 1/m >= 10^-15 relative when the midpoint times 10^k is an
// integer, else at least 2^-25 / 10^k >= 2^-51.6 relative, both over 2^-53). False (*out
// untouched) for anything else.
template <typename T>
__attribute__((target("sse4.1"), always_inline)) inline bool DecimalSse41(const char* b,
                                                                          const char* e, T* out) {
  const bool negative = *b == '-';
  b += negative;
  const ptrdiff_t len = e - b;
  if (len <= 0 || len > 16) return false;
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
  const __m128i d = _mm_sub_epi8(v, _mm_set1_epi8('0'));
  // Digits: d <= 9 unsigned.
  const unsigned digit = static_cast<unsigned>(
      _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_min_epu8(d, _mm_set1_epi8(9)), d)));
  const unsigned in_field = (1u << len) - 1;
  const unsigned other = ~digit & in_field;
  int dot = static_cast<int>(len);  // none
  if (other != 0) {
    if constexpr (std::is_integral<T>::value) return false;
    dot = __builtin_ctz(other);
    if ((other & (other - 1)) != 0 || b[dot] != '.') return false;
  }
  const int n = static_cast<int>(len) - (other != 0);  // digits
  const int k = static_cast<int>(len) - 1 - dot;       // after the point (-1: none)
  if (n == 0 || n > 15) return false;
  if constexpr (std::is_same<T, float>::value) {
    if (k > 8) return false;
  }
  if constexpr (std::is_same<T, int32_t>::value) {
    if (n > 9) return false;
  }
  const __m128i x = _mm_shuffle_epi8(
      d, _mm_load_si128(reinterpret_cast<const __m128i*>(kDigitShuffles.at[len][dot])));
  const __m128i pairs = _mm_maddubs_epi16(x, _mm_set1_epi16(0x010A));       // 10 * d0 + d1
  const __m128i quads = _mm_madd_epi16(pairs, _mm_set1_epi32(0x00010064));  // 100 * p0 + p1
  const __m128i packed = _mm_packus_epi32(quads, quads);
  const __m128i eights = _mm_madd_epi16(packed, _mm_set1_epi32(0x00012710));  // 10^4 * q0 + q1
  const uint64_t hi = static_cast<uint32_t>(_mm_cvtsi128_si32(eights));
  const uint64_t lo = static_cast<uint32_t>(_mm_extract_epi32(eights, 1));
  const uint64_t m = hi * 100000000 + lo;
  if constexpr (std::is_floating_point<T>::value) {
    double value = static_cast<double>(static_cast<int64_t>(m)) / kPow10x16[k < 0 ? 0 : k];
    uint64_t bits;
    std::memcpy(&bits, &value, sizeof value);
    bits |= static_cast<uint64_t>(negative) << 63;
    std::memcpy(&value, &bits, sizeof value);
    *out = static_cast<T>(value);
  } else {
    *out = negative ? static_cast<T>(-static_cast<int64_t>(m)) : static_cast<T>(m);
  }
  return true;
}
#endif  // TRAINTL_CSV_SSE41

// How ParseCsvRows reads whole records of one numeric type: as before the separator
// bitmasks (FastRecord, one field after the other), with them (FastRecordIndexed, SWAR
// conversions), or the fastest the CPU has (the default: FastRecordSse41 where SSE4.1 is
// available, else FastRecordIndexed where SeparatorMask64 is vectorized, else FastRecord).
// For tests, which compare them.
enum class CsvRecordPath { kSequential = 0, kIndexed = 1, kBest = 2 };
std::atomic<CsvRecordPath>& CsvRecordPathForTests();

}  // namespace text_internal
}  // namespace data
}  // namespace traintl
