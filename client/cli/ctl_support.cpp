#include "ctl_support.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>

#include "safe_text.hpp"

namespace kvtier::cli {

void print_json(const Json& document) {
  std::printf("%s\n", document.dump(-1, ' ', true, Json::error_handler_t::replace).c_str());
}

int exit_code_for(kvtier_status status) {
  switch (status) {
    case KVTIER_OK: return kExitOk;
    case KVTIER_E_UNAVAILABLE: return kExitUnreachable;
    case KVTIER_E_VERSION_MISMATCH: return kExitVersionMismatch;
    default: return kExitFailed;
  }
}

int report(kvtier_status status, const Client& client) {
  const std::string why = printable(client ? client.last_error() : std::string(kvtier_client_last_error(nullptr)));
  std::fprintf(stderr, "kvtierctl: %s: %s\n", kvtier_status_string(status), why.c_str());
  return exit_code_for(status);
}

int usage_error(std::string_view command, const std::string& message) {
  std::fprintf(stderr, "kvtierctl %.*s: %s (kvtierctl --help lists the arguments)\n", static_cast<int>(command.size()),
               command.data(), message.c_str());
  return kExitUsage;
}

kvtier_status connect_admin(const GlobalOptions& options, Client& client) {
  return client.connect(options.socket_path, "kvtierctl", KVTIER_ROLE_ADMIN);
}

std::optional<std::uint32_t> parse_u32(std::string_view text) {
  std::uint32_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

unsigned long long ull(std::uint64_t v) { return static_cast<unsigned long long>(v); }

const char* backpressure_name(kvtier_backpressure reason) {
  switch (reason) {
    case KVTIER_BACKPRESSURE_NONE: return "none";
    case KVTIER_BACKPRESSURE_POOL_FULL: return "pool_full";
    case KVTIER_BACKPRESSURE_NODE_BUDGET: return "node_budget";
  }
  return "?";
}

const char* tier_name(kvtier_tier tier) {
  switch (tier) {
    case KVTIER_T0: return "t0";
    case KVTIER_T1: return "t1";
    case KVTIER_T2: return "t2";
    case KVTIER_T3: return "t3";
    default: return "?";
  }
}

TerminalSize terminal_size() {
  winsize ws{};
  if (::isatty(STDOUT_FILENO) == 0 || ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0) return {};
  return {ws.ws_col, ws.ws_row};
}

}  // namespace kvtier::cli
