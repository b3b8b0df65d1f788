// Vector helpers for the CSV parser (csv_format.cc): where the field separators of a
// 64-byte window are, as a bitmask, so that the fields of a record can be found without
// parsing the ones before them. SSE2 (the x86-64 baseline) where available, else a
// portable loop with the same result. Internal to worker/data.
//
// Thread-safety: pure functions.
#pragma once

#include <atomic>
#include <cstdint>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace traintl {
namespace data {
namespace text_internal {

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
#if defined(__SSE2__)
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

// Whether ParseCsvRows reads whole records of one numeric type with FastRecordIndexed
// (true, the default) or, as before it, FastRecord: for tests, which compare the two.
std::atomic<bool>& CsvIndexedRecords();

}  // namespace text_internal
}  // namespace data
}  // namespace traintl
