#include "common/utf8.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>

namespace traintl {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// The length of the well-formed sequence at s[i] (Unicode table 3-7), or 0 when none
// starts there; *maximal is then how many bytes the ill-formed prefix spans (at least 1).
size_t SequenceAt(std::string_view s, size_t i, size_t* maximal) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  const size_t left = s.size() - i;
  const uint8_t c = b(0);
  *maximal = 1;
  if (c < 0x80) return 1;
  size_t n = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlong forms
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;  // no overlong forms
    if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return 0;  // a continuation byte, C0/C1 or F5..FF
  }
  for (size_t k = 1; k < n; ++k) {
    if (k >= left) return 0;
    const uint8_t lower = k == 1 ? lo : 0x80, upper = k == 1 ? hi : 0xBF;
    if (b(k) < lower || b(k) > upper) return 0;
    *maximal = k + 1;
  }
  return n;
}

}  // namespace

std::string ToValidUtf8(std::string_view bytes) {
  std::string out;
  size_t i = 0;
  // Most text is valid: copy runs, not bytes.
  size_t run = 0;
  while (i < bytes.size()) {
    size_t maximal = 0;
    const size_t n = SequenceAt(bytes, i, &maximal);
    if (n > 0) {
      i += n;
      continue;
    }
    if (out.empty()) out.reserve(bytes.size() + 8);
    out.append(bytes.data() + run, i - run);
    out += kReplacement;
    i += maximal;
    run = i;
  }
  if (run == 0) return std::string(bytes);
  out.append(bytes.data() + run, bytes.size() - run);
  return out;
}

std::string EscapeControls(std::string_view text, bool keep_newlines) {
  const std::string valid = ToValidUtf8(text);
  std::string out;
  out.reserve(valid.size());
  char hex[8];
  for (size_t i = 0; i < valid.size(); ++i) {
    const auto c = static_cast<uint8_t>(valid[i]);
    if ((c < 0x20 && c != '\t' && !(c == '\n' && keep_newlines)) || c == 0x7F) {
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
      continue;
    }
    // Valid UTF-8 from here: C1 controls are C2 80..C2 9F; the bidi controls E2 80 AA..AE
    // (embeddings, overrides), E2 81 A6..A9 (isolates), E2 80 8E..8F and D8 9C (marks).
    const auto next = [&](size_t k) {
      return i + k < valid.size() ? static_cast<uint8_t>(valid[i + k]) : 0;
    };
    uint32_t escaped = 0;
    size_t len = 0;
    if (c == 0xC2 && next(1) >= 0x80 && next(1) <= 0x9F) {
      escaped = next(1);
      len = 2;
    } else if (c == 0xE2 && next(1) == 0x80 &&
               ((next(2) >= 0xAA && next(2) <= 0xAE) || next(2) == 0x8E || next(2) == 0x8F)) {
      escaped = 0x2000 + (next(2) - 0x80);
      len = 3;
    } else if (c == 0xE2 && next(1) == 0x81 && next(2) >= 0xA6 && next(2) <= 0xA9) {
      escaped = 0x2040 + (next(2) - 0x80);
      len = 3;
    } else if (c == 0xD8 && next(1) == 0x9C) {
      escaped = 0x061C;
      len = 2;
    }
    if (len == 0) {
      out.push_back(valid[i]);
      continue;
    }
    if (escaped < 0x100) {
      std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned>(escaped));
    } else {
      std::snprintf(hex, sizeof hex, "\\u%04x", static_cast<unsigned>(escaped));
    }
    out += hex;
    i += len - 1;
  }
  return out;
}

std::string ClipMiddle(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  const auto continuation = [&](size_t i) {
    return i < text.size() && (static_cast<uint8_t>(text[i]) & 0xC0) == 0x80;
  };
  size_t head = max_bytes / 4;
  while (head > 0 && continuation(head)) --head;
  size_t tail_start = text.size() - (max_bytes - max_bytes / 4);
  while (continuation(tail_start)) ++tail_start;
  return std::string(text.substr(0, head)) + "\n... (" + std::to_string(tail_start - head) +
         " bytes left out) ...\n" + std::string(text.substr(tail_start));
}

namespace {

struct Range {
  char32_t first, last;
};

// Sorted, disjoint. From Unicode 15's general category Mn/Me (the common blocks) and the
// default ignorables that terminals draw as nothing.
constexpr Range kZeroWidth[] = {
    {0x0300, 0x036F}, {0x0483, 0x0489}, {0x0591, 0x05BD}, {0x05BF, 0x05BF}, {0x05C1, 0x05C2},
    {0x05C4, 0x05C5}, {0x05C7, 0x05C7}, {0x0610, 0x061A}, {0x064B, 0x065F}, {0x0670, 0x0670},
    {0x06D6, 0x06DC}, {0x06DF, 0x06E4}, {0x06E7, 0x06E8}, {0x06EA, 0x06ED}, {0x0E31, 0x0E31},
    {0x0E34, 0x0E3A}, {0x0E47, 0x0E4E}, {0x1160, 0x11FF}, {0x1AB0, 0x1AFF}, {0x1DC0, 0x1DFF},
    {0x200B, 0x200F}, {0x2060, 0x2064}, {0x20D0, 0x20FF}, {0x302A, 0x302D}, {0x3099, 0x309A},
    {0xD7B0, 0xD7FF}, {0xFE00, 0xFE0F}, {0xFE20, 0xFE2F}, {0xFEFF, 0xFEFF}, {0xE0000, 0xE0FFF},
};

// East Asian Wide (W) and Fullwidth (F) ranges, emoji with Emoji_Presentation included.
constexpr Range kWide[] = {
    {0x1100, 0x115F},   {0x231A, 0x231B},   {0x2329, 0x232A},   {0x23E9, 0x23EC},
    {0x23F0, 0x23F0},   {0x23F3, 0x23F3},   {0x25FD, 0x25FE},   {0x2614, 0x2615},
    {0x2648, 0x2653},   {0x267F, 0x267F},   {0x2693, 0x2693},   {0x26A1, 0x26A1},
    {0x26AA, 0x26AB},   {0x26BD, 0x26BE},   {0x26C4, 0x26C5},   {0x26CE, 0x26CE},
    {0x26D4, 0x26D4},   {0x26EA, 0x26EA},   {0x26F2, 0x26F3},   {0x26F5, 0x26F5},
    {0x26FA, 0x26FA},   {0x26FD, 0x26FD},   {0x2705, 0x2705},   {0x270A, 0x270B},
    {0x2728, 0x2728},   {0x274C, 0x274C},   {0x274E, 0x274E},   {0x2753, 0x2755},
    {0x2757, 0x2757},   {0x2795, 0x2797},   {0x27B0, 0x27B0},   {0x27BF, 0x27BF},
    {0x2B1B, 0x2B1C},   {0x2B50, 0x2B50},   {0x2B55, 0x2B55},   {0x2E80, 0x3029},
    {0x302E, 0x303E},   {0x3041, 0x3098},   {0x309B, 0x33FF},   {0x3400, 0x4DBF},
    {0x4E00, 0x9FFF},   {0xA000, 0xA4CF},   {0xA960, 0xA97F},   {0xAC00, 0xD7A3},
    {0xF900, 0xFAFF},   {0xFE10, 0xFE19},   {0xFE30, 0xFE6F},   {0xFF00, 0xFF60},
    {0xFFE0, 0xFFE6},   {0x16FE0, 0x16FE4}, {0x17000, 0x18CFF}, {0x1B000, 0x1B2FF},
    {0x1F004, 0x1F004}, {0x1F0CF, 0x1F0CF}, {0x1F18E, 0x1F18E}, {0x1F191, 0x1F19A},
    {0x1F200, 0x1F251}, {0x1F300, 0x1F320}, {0x1F32D, 0x1F335}, {0x1F337, 0x1F37C},
    {0x1F37E, 0x1F393}, {0x1F3A0, 0x1F3CA}, {0x1F3CF, 0x1F3D3}, {0x1F3E0, 0x1F3F0},
    {0x1F3F4, 0x1F3F4}, {0x1F3F8, 0x1F3FA}, {0x1F400, 0x1F43E}, {0x1F440, 0x1F440},
    {0x1F442, 0x1F4FC}, {0x1F4FF, 0x1F53D}, {0x1F54B, 0x1F54E}, {0x1F550, 0x1F567},
    {0x1F57A, 0x1F57A}, {0x1F595, 0x1F596}, {0x1F5A4, 0x1F5A4}, {0x1F5FB, 0x1F64F},
    {0x1F680, 0x1F6C5}, {0x1F6CC, 0x1F6CC}, {0x1F6D0, 0x1F6D2}, {0x1F6D5, 0x1F6D7},
    {0x1F6DC, 0x1F6DF}, {0x1F6EB, 0x1F6EC}, {0x1F6F4, 0x1F6FC}, {0x1F7E0, 0x1F7EB},
    {0x1F7F0, 0x1F7F0}, {0x1F90C, 0x1F93A}, {0x1F93C, 0x1F945}, {0x1F947, 0x1F9FF},
    {0x1FA70, 0x1FAFF}, {0x20000, 0x2FFFD}, {0x30000, 0x3FFFD},
};

template <size_t N>
bool InRanges(const Range (&ranges)[N], char32_t c) {
  size_t lo = 0, hi = N;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (c > ranges[mid].last) {
      lo = mid + 1;
    } else if (c < ranges[mid].first) {
      hi = mid;
    } else {
      return true;
    }
  }
  return false;
}

// The code point at text[i] and its length in bytes (an ill-formed byte: itself, 1 byte).
char32_t DecodeAt(std::string_view text, size_t i, size_t* len) {
  size_t maximal = 0;
  const size_t n = SequenceAt(text, i, &maximal);
  const auto b = [&](size_t k) { return static_cast<char32_t>(static_cast<uint8_t>(text[i + k])); };
  *len = n == 0 ? 1 : n;
  switch (n) {
    case 2:
      return (b(0) & 0x1F) << 6 | (b(1) & 0x3F);
    case 3:
      return (b(0) & 0x0F) << 12 | (b(1) & 0x3F) << 6 | (b(2) & 0x3F);
    case 4:
      return (b(0) & 0x07) << 18 | (b(1) & 0x3F) << 12 | (b(2) & 0x3F) << 6 | (b(3) & 0x3F);
    default:
      return b(0);
  }
}

size_t Columns(char32_t c) {
  if (c < 0x300) return 1;
  if (InRanges(kZeroWidth, c)) return 0;
  return InRanges(kWide, c) ? 2 : 1;
}

}  // namespace

size_t TerminalWidth(std::string_view text) {
  size_t width = 0;
  for (size_t i = 0, len = 0; i < text.size(); i += len) width += Columns(DecodeAt(text, i, &len));
  return width;
}

size_t PrefixForColumns(std::string_view text, size_t columns) {
  size_t width = 0, i = 0;
  while (i < text.size()) {
    size_t len = 0;
    const size_t w = Columns(DecodeAt(text, i, &len));
    if (width + w > columns) break;
    width += w;
    i += len;
  }
  return i;
}

}  // namespace traintl
