// The parts of the config module that need no TOML parser: enum names, the effective socket
// path, validation and the TOML dump.
#include <arpa/inet.h>

#include <array>
#include <charconv>
#include <utility>

#include "fields.hpp"
#include "kvtier/config/config.hpp"

namespace kvtier::config {
namespace {

constexpr std::array<std::pair<LogLevel, std::string_view>, 7> kLogLevelNames = {{
    {LogLevel::kTrace, "trace"},
    {LogLevel::kDebug, "debug"},
    {LogLevel::kInfo, "info"},
    {LogLevel::kWarn, "warn"},
    {LogLevel::kError, "error"},
    {LogLevel::kCritical, "critical"},
    {LogLevel::kOff, "off"},
}};

constexpr std::array<std::pair<EvictionMode, std::string_view>, 3> kEvictionModeNames = {{
    {EvictionMode::kCumulative, "cumulative"},
    {EvictionMode::kPaperAlgorithm, "paper-algorithm"},
    {EvictionMode::kPaperPrototype, "paper-prototype"},
}};

constexpr std::array<std::string_view, 6> kPolicyNames = {"paper", "h2o", "streaming_llm",
                                                          "random", "vase", "r_kv"};

// Mirrors fields.cpp: sun_path holds 108 bytes including the terminating NUL.
constexpr std::size_t kMaxSocketPathBytes = 107;

}  // namespace

std::string_view log_level_name(LogLevel level) noexcept {
  for (const auto& [value, name] : kLogLevelNames) {
    if (value == level) return name;
  }
  return "invalid";
}

std::optional<LogLevel> parse_log_level(std::string_view name) noexcept {
  for (const auto& [value, text] : kLogLevelNames) {
    if (text == name) return value;
  }
  return std::nullopt;
}

std::string_view eviction_mode_name(EvictionMode mode) noexcept {
  for (const auto& [value, name] : kEvictionModeNames) {
    if (value == mode) return name;
  }
  return "invalid";
}

std::optional<EvictionMode> parse_eviction_mode(std::string_view name) noexcept {
  for (const auto& [value, text] : kEvictionModeNames) {
    if (text == name) return value;
  }
  return std::nullopt;
}

std::span<const std::string_view> policy_names() noexcept { return kPolicyNames; }

std::filesystem::path socket_path(const DaemonConfig& config) {
  if (!config.daemon.socket.empty()) return config.daemon.socket;
  return config.daemon.runtime_dir / kSocketFileName;
}

std::optional<ListenAddress> parse_listen_address(std::string_view text) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::string_view host = text.substr(0, colon);
  const std::string_view port_text = text.substr(colon + 1);
  const bool bracketed = host.size() >= 2 && host.front() == '[' && host.back() == ']';
  if (bracketed) host = host.substr(1, host.size() - 2);
  unsigned port = 0;
  const auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() || port > 65535) {
    return std::nullopt;
  }
  const std::string host_text(host);
  unsigned char address[16];
  if (inet_pton(bracketed ? AF_INET6 : AF_INET, host_text.c_str(), address) != 1) return std::nullopt;
  return ListenAddress{host_text, static_cast<std::uint16_t>(port)};
}

Status validate(const DaemonConfig& config) {
  for (const detail::FieldSpec& spec : detail::field_specs()) {
    const detail::FieldRef ref = detail::bind_read(spec, config);
    if (std::string why = detail::check_stored(spec, ref); !why.empty()) {
      return make_error(Errc::kInvalidArgument,
                        detail::invalid_value_message(spec, detail::format_value(ref), why));
    }
  }
  // Cross-field: the derived socket path must fit a sockaddr_un as well.
  if (config.daemon.socket.empty()) {
    const std::string path = socket_path(config).native();
    if (path.size() > kMaxSocketPathBytes) {
      return make_error(Errc::kInvalidArgument,
                        "invalid value for daemon.runtime_dir: " +
                            detail::quote_toml(config.daemon.runtime_dir.native()) +
                            " (the socket path " + detail::quote_toml(path) + " is " +
                            std::to_string(path.size()) +
                            " bytes, a Unix socket address holds 107; shorten "
                            "daemon.runtime_dir or set daemon.socket)");
    }
  }
  return {};
}

std::string to_toml(const DaemonConfig& config) {
  std::string out =
      "# kvtierd configuration: every key with its value. The shipped kvtierd.toml documents\n"
      "# each key in full.\n";
  for (std::string_view table : detail::table_names()) {
    out += "\n[";
    out += table;
    out += "]\n";
    for (const detail::FieldSpec& spec : detail::field_specs()) {
      if (spec.table != table) continue;
      out += "# ";
      out += spec.help;
      out += '\n';
      out += spec.key;
      out += " = ";
      out += detail::format_value(detail::bind_read(spec, config));
      out += '\n';
    }
  }
  return out;
}

}  // namespace kvtier::config
