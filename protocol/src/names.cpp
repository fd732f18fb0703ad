#include "kvtier/protocol/names.hpp"

#include <cstdio>
#include <string>

#include "kvtier/base/utf8.hpp"

namespace kvtier::protocol {
namespace {

constexpr std::string_view kRule =
    "names must be well-formed UTF-8 of at most 63 bytes without control characters (C0, DEL, C1)";

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
    const Utf8Char c = decode_utf8(name, at);
    if (c.length == 0) {
      return refuse("byte " + std::to_string(at) + " (" + hex(static_cast<unsigned char>(name[at]), false) +
                    ") is not well-formed UTF-8");
    }
    if (is_control(c.code_point)) {
      return refuse("byte " + std::to_string(at) + " starts control character " + hex(static_cast<unsigned>(c.code_point), true));
    }
    at += c.length;
  }
  return {};
}

}  // namespace kvtier::protocol
