#include "kvtier/protocol/names.hpp"

#include <cstdio>
#include <string>

namespace kvtier::protocol {
namespace {

constexpr std::string_view kRule =
    "names must be well-formed UTF-8 of at most 63 bytes without control characters (C0, DEL, C1)";

struct Decoded {
  std::size_t length = 0;  // 0: the byte at `at` starts no well-formed sequence
  char32_t code_point = 0;
};

// The UTF-8 sequence starting at text[at] (RFC 3629: no overlong forms, no surrogates). kvtierctl
// repeats it to escape what it prints (client/cli/safe_text.cpp).
Decoded decode(std::string_view text, std::size_t at) {
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

// "0x1b" for a byte, "U+001B" for a code point.
std::string hex(unsigned value, bool code_point) {
  char out[16];
  std::snprintf(out, sizeof(out), code_point ? "U+%04X" : "0x%02x", value);
  return out;
}

}  // namespace

Status check_name(std::string_view field, std::string_view name) {
  const auto refuse = [&](const std::string& what) {
    return make_error(Errc::kInvalidArgument, std::string(field) + ": " + what + "; " + std::string(kRule));
  };
  if (name.size() > kMaxNameBytes) return refuse(std::to_string(name.size()) + " bytes is too long");
  for (std::size_t at = 0; at < name.size();) {
    const Decoded c = decode(name, at);
    if (c.length == 0) {
      return refuse("byte " + std::to_string(at) + " (" + hex(static_cast<unsigned char>(name[at]), false) +
                    ") is not well-formed UTF-8");
    }
    if (c.code_point < 0x20 || (c.code_point >= 0x7F && c.code_point <= 0x9F)) {
      return refuse("byte " + std::to_string(at) + " starts control character " + hex(static_cast<unsigned>(c.code_point), true));
    }
    at += c.length;
  }
  return {};
}

}  // namespace kvtier::protocol
