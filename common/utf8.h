// UTF-8 for text that comes from outside as bytes (a worker's log) and goes into JSON,
// whose encoder (nlohmann::json::dump) throws on invalid UTF-8.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

namespace traintl {

// `bytes` as valid UTF-8: every maximal ill-formed subsequence (a stray continuation byte,
// a truncated sequence, an overlong form, a surrogate, a code point above U+10FFFF)
// becomes U+FFFD, as the Unicode standard recommends ("substitution of maximal subparts");
// valid text comes back unchanged.
std::string ToValidUtf8(std::string_view bytes);

// `text` (valid UTF-8) when it has at most `max_bytes`; else its first quarter and its last
// three quarters of `max_bytes`, cut at character boundaries, joined by a line that says
// how many bytes were left out (a traceback's end says most).
std::string ClipMiddle(std::string_view text, size_t max_bytes);

// `text` as valid UTF-8 (ToValidUtf8) with what a terminal would act on made visible, for
// text someone else wrote (a job's name, metrics, failure message) on its way to a
// terminal or a log line: C0 controls but tab (and newline when `keep_newlines`; a
// carriage return always), DEL and the C1 controls U+0080..U+009F as "\xNN", and the
// bidirectional controls (embeddings and overrides U+202A..U+202E, isolates U+2066..U+2069,
// marks U+200E, U+200F, U+061C) as "\uNNNN". No
// escape sequence, title change or overwritten line survives it. Idempotent.
std::string EscapeControls(std::string_view text, bool keep_newlines);

// The columns `text` takes on a terminal, as wcwidth(3) counts them for what tables show:
// 0 for combining marks, zero-width spaces and joiners, variation selectors and Hangul
// medial and final jamo; 2 for East Asian wide and fullwidth characters (CJK ideographs,
// kana, Hangul syllables, fullwidth forms) and emoji shown as pictures; 1 for the rest.
// Made for text after EscapeControls (no controls left); an ill-formed byte counts 1.
size_t TerminalWidth(std::string_view text);

// How many bytes of `text` fit in `columns` (TerminalWidth), cut at a character boundary,
// with the zero-width characters that follow the last one that fits (its combining marks).
size_t PrefixForColumns(std::string_view text, size_t columns);

}  // namespace traintl
