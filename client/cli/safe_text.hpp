// Text from kvtierd (client and model names, versions, error messages) made safe to print.
// kvtierd refuses control characters and ill-formed UTF-8 in the names it accepts
// (protocol/PROTOCOL.md §4 "Names"), but kvtierctl does not rely on that: an older or broken
// daemon must not be able to move the cursor, forge output lines or break --json.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvtier::cli {

struct Utf8Char {
  std::size_t length = 0;  // bytes; 0: text[at] starts no well-formed UTF-8 sequence
  char32_t code_point = 0;
};

// The UTF-8 sequence starting at text[at] (RFC 3629: shortest form, no surrogates, at most
// U+10FFFF). Precondition: at < text.size().
Utf8Char decode_utf8(std::string_view text, std::size_t at);

// C0 (U+0000..U+001F), DEL (U+007F) and C1 (U+0080..U+009F).
constexpr bool is_control(char32_t c) { return c < 0x20 || (c >= 0x7F && c <= 0x9F); }

// `text` for a terminal: a backslash as "\\", C0 and DEL as "\x1b", C1 as "\u0085", a byte
// that is not well-formed UTF-8 as "\xff"; everything else as it is.
std::string printable(std::string_view text);

}  // namespace kvtier::cli
