#include "json_writer.hpp"

#include <cmath>
#include <cstdio>

#include "safe_text.hpp"

namespace kvtier::cli {

void JsonWriter::separator() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ',';
    first_.back() = false;
  }
}

JsonWriter& JsonWriter::begin_object() {
  separator();
  out_ += '{';
  first_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  out_ += '}';
  first_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::begin_array() {
  separator();
  out_ += '[';
  first_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  out_ += ']';
  first_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::key(std::string_view name) {
  value(name);
  out_ += ':';
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view text) {
  separator();
  out_ += '"';
  char escape[8];
  for (std::size_t at = 0; at < text.size();) {
    const Utf8Char c = decode_utf8(text, at);
    if (c.length == 0) {
      out_ += "\\ufffd";  // JSON text is UTF-8: a byte that is not becomes U+FFFD REPLACEMENT CHARACTER
      ++at;
      continue;
    }
    switch (c.code_point) {
      case '"': out_ += "\\\""; break;
      case '\\': out_ += "\\\\"; break;
      case '\n': out_ += "\\n"; break;
      case '\t': out_ += "\\t"; break;
      case '\r': out_ += "\\r"; break;
      default:
        if (is_control(c.code_point)) {  // C0 must be escaped; DEL and C1 are, so no terminal acts on them
          std::snprintf(escape, sizeof(escape), "\\u%04x", static_cast<unsigned>(c.code_point));
          out_ += escape;
        } else {
          out_.append(text, at, c.length);
        }
    }
    at += c.length;
  }
  out_ += '"';
  return *this;
}

JsonWriter& JsonWriter::value(std::uint64_t number) {
  separator();
  out_ += std::to_string(number);
  return *this;
}

JsonWriter& JsonWriter::value(double number) {
  separator();
  if (!std::isfinite(number)) {
    out_ += "null";  // JSON has no NaN or infinity
    return *this;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", number);
  out_ += buf;
  return *this;
}

JsonWriter& JsonWriter::value(bool flag) {
  separator();
  out_ += flag ? "true" : "false";
  return *this;
}

}  // namespace kvtier::cli
