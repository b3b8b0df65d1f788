// The text formats' record layer (text_formats.h): locating messages, the BOM, and
// ScanRecords, which finds complete records (CSV quotes included) and counts rows and lines,
// a vector at a time where it can.
#include <algorithm>
#include <cstring>
#include <string>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "worker/data/text_format_internal.h"
#include "worker/data/text_formats.h"

namespace traintl {
namespace data {

namespace text_internal {

// Longest value quoted in a message.
constexpr size_t kMaxQuoted = 64;

std::string Quote(const char* b, const char* e) {
  std::string s(b, static_cast<size_t>(e - b));
  if (s.size() > kMaxQuoted) s = s.substr(0, kMaxQuoted) + "...";
  return "'" + s + "'";
}

std::string OverrideHint(bool inferred, const std::string& file) {
  if (!inferred) return "";
  return "; the column's type was inferred from the first rows of " + file +
         ": set column_types to read it as another type";
}

}  // namespace text_internal

namespace {

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

}  // namespace data
}  // namespace traintl
