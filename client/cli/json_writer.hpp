// A minimal streaming JSON writer for kvtierctl --json (objects, arrays, strings, numbers).
// The output is valid JSON whatever the input: strings escape every control character (C0, DEL,
// C1) and write each byte that is not well-formed UTF-8 as U+FFFD; non-finite numbers are null.
// Thread-safety: one instance per thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::cli {

class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view name);
  JsonWriter& value(std::string_view text);
  JsonWriter& value(const char* text) { return value(std::string_view(text)); }
  JsonWriter& value(std::uint64_t number);
  JsonWriter& value(double number);
  JsonWriter& value(bool flag);

  const std::string& str() const { return out_; }

 private:
  void separator();

  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
  bool after_key_ = false;
};

}  // namespace kvtier::cli
