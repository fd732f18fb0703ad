// The UTF-8 decoder of kvtier's name rule (PROTOCOL.md §4 "Names"): kvtierd refuses names with it
// (protocol/src/names.cpp), kvtierctl escapes what it prints with it (client/cli/safe_text.cpp).
// Security-relevant (it decides what untrusted text is), so it exists once.
// Thread-safety: a pure function.
#pragma once

#include <cstddef>
#include <string_view>

namespace kvtier {

struct Utf8Char {
  std::size_t length = 0;  // bytes; 0: text[at] starts no well-formed UTF-8 sequence
  char32_t code_point = 0;
};

// The UTF-8 sequence starting at text[at] (RFC 3629: shortest form, no surrogates, at most
// U+10FFFF). Precondition: at < text.size().
constexpr Utf8Char decode_utf8(std::string_view text, std::size_t at) noexcept {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  if (lead < 0x80) return {1, lead};
  std::size_t length = 0;
  char32_t code_point = 0, smallest = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2, code_point = lead & 0x1Fu, smallest = 0x80;
  } else if ((lead & 0xF0u) == 0xE0u) {
    length = 3, code_point = lead & 0x0Fu, smallest = 0x800;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4, code_point = lead & 0x07u, smallest = 0x10000;
  } else {
    return {};  // a continuation byte, an overlong lead (C0, C1) or beyond U+10FFFF (F5..FF)
  }
  if (text.size() - at < length) return {};
  for (std::size_t i = 1; i < length; ++i) {
    const unsigned char next = byte(at + i);
    if ((next & 0xC0u) != 0x80u) return {};
    code_point = (code_point << 6) | (next & 0x3Fu);
  }
  if (code_point < smallest || code_point > 0x10FFFF || (code_point >= 0xD800 && code_point <= 0xDFFF)) return {};
  return {length, code_point};
}

// C0 (U+0000..U+001F), DEL (U+007F) and C1 (U+0080..U+009F).
constexpr bool is_control(char32_t c) noexcept { return c < 0x20 || (c >= 0x7F && c <= 0x9F); }

}  // namespace kvtier
