#include "safe_text.hpp"

#include <cstdio>

#include "kvtier/base/utf8.hpp"

namespace kvtier::cli {

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
