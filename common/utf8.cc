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

}  // namespace traintl
