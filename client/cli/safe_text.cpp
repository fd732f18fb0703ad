#include "safe_text.hpp"

#include <cstdio>

namespace kvtier::cli {

// The decoder of kvtierd's name check (protocol/src/names.cpp), repeated here because kvtierctl
// links only the public client API.
Utf8Char decode_utf8(std::string_view text, std::size_t at) {
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

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  char escape[8];
  for (std::size_t at = 0; at < text.size();) {
    const Utf8Char c = decode_utf8(text, at);
    if (c.length == 0) {
      std::snprintf(escape, sizeof(escape), "\\x%02x", static_cast<unsigned>(static_cast<unsigned char>(text[at])));
      out += escape;
      ++at;
      continue;
    }
    if (c.code_point == '\\') {
      out += "\\\\";
    } else if (is_control(c.code_point)) {
      std::snprintf(escape, sizeof(escape), c.code_point < 0x80 ? "\\x%02x" : "\\u%04x",
                    static_cast<unsigned>(c.code_point));
      out += escape;
    } else {
      out.append(text, at, c.length);
    }
    at += c.length;
  }
  return out;
}

}  // namespace kvtier::cli
