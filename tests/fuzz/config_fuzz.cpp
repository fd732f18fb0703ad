// Fuzz target: kvtierd's TOML configuration (daemon/config): parse_config over the input as a
// file, and apply_override with each input line as a `--set` argument.
//
// Input: TOML text (any bytes). What it checks beyond "no crash, no sanitizer report": a
// configuration parse_config accepts passes validate() and survives to_toml -> parse_config
// unchanged (the documented round trip of config.hpp), and so does every override sequence
// whose result validates; a refused override leaves the configuration unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "kvtier/config/config.hpp"

namespace {

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "config_fuzz: property violated: %s\n%s\n", what, detail.c_str());
  std::abort();
}

void check_round_trip(const kvtier::config::DaemonConfig& config) {
  const std::string text = kvtier::config::to_toml(config);
  auto again = kvtier::config::parse_config(text, "to_toml");
  if (!again) fail("to_toml output does not parse", again.error().message + "\n" + text);
  if (!(*again == config)) fail("to_toml -> parse_config changed the configuration", text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  if (auto parsed = kvtier::config::parse_config(text, "fuzz.toml")) {
    if (auto valid = kvtier::config::validate(*parsed); !valid) {
      fail("parse_config returned a configuration validate() refuses", valid.error().message);
    }
    check_round_trip(*parsed);
  }

  kvtier::config::DaemonConfig config;
  bool changed = false;
  for (std::size_t begin = 0; begin < text.size();) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(begin, end - begin);
    begin = end + 1;
    const kvtier::config::DaemonConfig before = config;
    if (kvtier::config::apply_override(config, line)) {
      changed = true;
    } else if (!(config == before)) {
      fail("a refused override changed the configuration", std::string(line));
    }
  }
  if (changed && kvtier::config::validate(config)) check_round_trip(config);
  return 0;
}
