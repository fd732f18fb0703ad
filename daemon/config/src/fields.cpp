#include "fields.hpp"

#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <type_traits>

namespace kvtier::config::detail {
namespace {

// [tiering]'s real keys take their ranges from the tier parameter table, so a node default is
// never one a sequence would refuse.
namespace ranges = protocol::tier_ranges;

constexpr std::uint64_t kKiB = 1024;
constexpr std::uint64_t kMiB = kKiB * 1024;
constexpr std::uint64_t kPiB = kMiB * kMiB * 1024;
// sizeof(sockaddr_un::sun_path) is 108 on Linux, one byte of which is the terminating NUL.
constexpr std::size_t kMaxSocketPathBytes = 107;

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
// Spelled out for clang before 17, which lacks C++20's deduction guides for aggregates.
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

std::string power_of_two_rule(std::uint64_t value) {
  // Ring indices are masked, not divided, so capacities must be powers of two.
  return std::has_single_bit(value) ? std::string() : "must be a power of two";
}

std::string absolute_path_rule(std::string_view text) {
  if (text.empty() || text.front() != '/' || text.find('\0') != std::string_view::npos) {
    return "must be an absolute path";
  }
  return {};
}

std::string socket_rule(std::string_view text) {
  if (text.empty()) return {};
  if (!absolute_path_rule(text).empty() || text.size() > kMaxSocketPathBytes) {
    return "must be empty or an absolute path of at most 107 bytes";
  }
  return {};
}

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '_' || c == '-';
}

std::string shm_prefix_rule(std::string_view text) {
  // The prefix becomes part of "/kvtier.<prefix>-<epoch>..." shm names: no '/', nothing shell-hostile.
  bool ok = !text.empty() && text.size() <= 32;
  for (char c : text) ok = ok && is_name_char(c);
  return ok ? std::string() : "must be 1 to 32 characters from [A-Za-z0-9_-]";
}

std::string group_rule(std::string_view text) {
  if (text.empty()) return {};
  // The portable user/group name rule systemd-sysusers also applies.
  bool ok = text.size() <= 32 && (text.front() == '_' || (text.front() >= 'a' &&
                                                          text.front() <= 'z') ||
                                  (text.front() >= 'A' && text.front() <= 'Z'));
  for (char c : text) ok = ok && (is_name_char(c) || c == '.');
  return ok ? std::string()
            : "must be empty or a group name: [A-Za-z_][A-Za-z0-9_.-]*, at most 32 characters";
}

std::string log_level_rule(std::string_view text) {
  return parse_log_level(text) ? std::string()
                               : "must be one of trace, debug, info, warn, error, critical, off";
}

std::string policy_rule(std::string_view text) {
  // The tier engine owns the policies; policy_names() repeats their names so that the
  // configuration stays independent of it (daemon/src/tier_params.cpp maps them;
  // tests/unit/daemon/policy_names_test.cpp, PolicyNames.*, checks that both sides agree).
  std::string names;
  for (std::string_view name : policy_names()) {
    if (text == name) return {};
    names += (names.empty() ? "" : ", ") + std::string(name);
  }
  return "must be one of " + names;
}

std::string pressure_rule(std::string_view text) {
  for (std::string_view name : {"demote-evict", "demote", "evict", "backpressure"}) {
    if (text == name) return {};
  }
  return "must be demote-evict, demote, evict or backpressure";
}

std::string eviction_mode_rule(std::string_view text) {
  return parse_eviction_mode(text)
             ? std::string()
             : "must be one of cumulative, paper-algorithm, paper-prototype";
}

std::string listen_rule(std::string_view text) {
  // HOST:PORT with a numeric IPv4 address or a bracketed IPv6 one: no name lookup at start-up.
  if (text.empty()) return {};
  return parse_listen_address(text) ? std::string()
                                    : "must be empty or ADDRESS:PORT (127.0.0.1:9464, [::1]:9464; port 0 = any free port)";
}

constexpr std::array<std::string_view, 5> kTables = {"daemon", "limits", "tiering", "pools", "metrics"};

// clang-format off
const std::array<FieldSpec, 35> kFields = {{
  {.table = "daemon", .key = "runtime_dir",
   .help = "directory of the socket and lock file (systemd RuntimeDirectory=)",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.daemon.runtime_dir; },
   .text_rule = absolute_path_rule},
  {.table = "daemon", .key = "socket",
   .help = "control socket path; empty = <runtime_dir>/kvtierd.sock",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.daemon.socket; },
   .text_rule = socket_rule},
  {.table = "daemon", .key = "shm_prefix",
   .help = "shared-memory segments are named /kvtier.<shm_prefix>-<epoch>...; one daemon per prefix",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.daemon.shm_prefix; },
   .text_rule = shm_prefix_rule},
  {.table = "daemon", .key = "admin_group",
   .help = "group allowed admin requests; empty = only root and the daemon's own user",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.daemon.admin_group; },
   .text_rule = group_rule},
  {.table = "daemon", .key = "log_level",
   .help = "trace, debug, info, warn, error, critical or off",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.daemon.log_level; },
   .text_rule = log_level_rule},
  {.table = "daemon", .key = "watchdog",
   .help = "feed the systemd watchdog when the unit sets WatchdogSec=",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.daemon.watchdog; }},

  {.table = "limits", .key = "max_clients", .help = "connected client processes",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.limits.max_clients; },
   .int_min = 1, .int_max = 65536},
  {.table = "limits", .key = "max_sequences_per_client", .help = "open sequences per client",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.limits.max_sequences_per_client; },
   .int_min = 1, .int_max = std::uint64_t{1} << 20},
  {.table = "limits", .key = "max_pool_bytes_per_client", .help = "host pool bytes per client",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.limits.max_pool_bytes_per_client; },
   .int_min = 4 * kKiB, .int_max = kPiB},
  {.table = "limits", .key = "max_frame_bytes", .help = "largest control message",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.limits.max_frame_bytes; },
   .int_min = 4 * kKiB, .int_max = 64 * kMiB},
  {.table = "limits", .key = "max_tokens_per_sequence", .help = "token positions per sequence",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.limits.max_tokens_per_sequence; },
   .int_min = 1, .int_max = std::uint64_t{1} << 26},
  {.table = "limits", .key = "score_ring_records",
   .help = "score ring capacity in records (power of two)",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.limits.score_ring_records; },
   .int_min = 16, .int_max = std::uint64_t{1} << 20, .int_rule = power_of_two_rule},
  {.table = "limits", .key = "plan_ring_records",
   .help = "plan ring capacity in records (power of two)",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.limits.plan_ring_records; },
   .int_min = 16, .int_max = std::uint64_t{1} << 20, .int_rule = power_of_two_rule},
  {.table = "limits", .key = "plans_in_flight",
   .help = "plans of one client (each of another sequence) awaiting acknowledgement at once",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.limits.plans_in_flight; },
   .int_min = 1, .int_max = 64},
  {.table = "limits", .key = "hello_timeout_ms",
   .help = "milliseconds a new connection has to send Hello before it is closed",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.limits.hello_timeout_ms; },
   .int_min = 1, .int_max = 3600000},
  {.table = "limits", .key = "max_pending_connections",
   .help = "connections that have not sent Hello yet, at once",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.limits.max_pending_connections; },
   .int_min = 1, .int_max = 65536},
  {.table = "limits", .key = "drain_timeout_ms",
   .help = "milliseconds a stopping daemon waits for outstanding plan acknowledgements",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.limits.drain_timeout_ms; },
   .int_min = 0, .int_max = 600000},
  {.table = "limits", .key = "orphan_grace_ms",
   .help = "milliseconds a predecessor's pool segments wait for their client before removal",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.limits.orphan_grace_ms; },
   .int_min = 0, .int_max = 86400000},

  {.table = "tiering", .key = "sink_tokens", .help = "first generated tokens always in T0",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.tiering.sink_tokens; },
   .int_min = 0, .int_max = std::uint64_t{1} << 20},
  {.table = "tiering", .key = "window_tokens", .help = "newest tokens always in T0",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.tiering.window_tokens; },
   .int_min = 0, .int_max = std::uint64_t{1} << 20},
  {.table = "tiering", .key = "interval", .help = "decode steps between tier decisions",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.tiering.interval; },
   .int_min = 1, .int_max = std::uint64_t{1} << 20},
  {.table = "tiering", .key = "hbm_ratio",
   .help = "share of surviving unprotected tokens kept in T0, 0..1",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.tiering.hbm_ratio; },
   .real = ranges::hbm_ratio},
  {.table = "tiering", .key = "evict_ratio",
   .help = "fraction of unprotected tokens destroyed (T3), read per eviction_mode, 0..1",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.tiering.evict_ratio; },
   .real = ranges::evict_ratio},
  {.table = "tiering", .key = "hysteresis",
   .help = "relative score margin before a token changes tier, [0, 1); 0 = none",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.tiering.hysteresis; },
   .real = ranges::hysteresis},
  {.table = "tiering", .key = "decay", .help = "per-step score multiplier, (0, 1]; 1 = none",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.tiering.decay; },
   .real = ranges::decay},
  {.table = "tiering", .key = "eviction_mode",
   .help = "cumulative, paper-algorithm or paper-prototype",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.tiering.eviction_mode; },
   .text_rule = eviction_mode_rule},
  {.table = "tiering", .key = "policy",
   .help = "paper, h2o, streaming_llm, random, vase or r_kv",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.tiering.policy; },
   .text_rule = policy_rule},
  {.table = "tiering", .key = "seed", .help = "seed of the random and vase policies",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.tiering.seed; },
   .int_min = 0, .int_max = ~std::uint64_t{0}},
  {.table = "tiering", .key = "int8_ratio",
   .help = "share of the tokens not kept in T0 quantized to int8 (T2), 0..1; 0 = off",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.tiering.int8_ratio; },
   .real = ranges::int8_ratio},

  {.table = "pools", .key = "ddr_bytes_total",
   .help = "node-wide DDR row bytes in use; 0 = min(/dev/shm size, half the memory), derived at start",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.pools.ddr_bytes_total; },
   .int_min = 0, .int_max = kPiB},
  {.table = "pools", .key = "int8_bytes_total",
   .help = "node-wide int8 pool bytes; 0 = only the per-client cap",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.pools.int8_bytes_total; },
   .int_min = 0, .int_max = kPiB},
  {.table = "pools", .key = "int8_group_tokens", .help = "tokens quantized together per int8 block",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.pools.int8_group_tokens; },
   .int_min = 1, .int_max = 1024},
  {.table = "pools", .key = "max_client_weight", .help = "largest weight a client may claim",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.pools.max_client_weight; },
   .int_min = 1, .int_max = 1u << 16},
  {.table = "pools", .key = "pressure",
   .help = "what a full node DDR budget does: demote-evict, demote, evict or backpressure",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.pools.pressure; },
   .text_rule = pressure_rule},

  {.table = "metrics", .key = "listen",
   .help = "Prometheus metrics over HTTP at HOST:PORT/metrics (port 0: any free port); empty = off",
   .bind = [](DaemonConfig& c) -> FieldRef { return &c.metrics.listen; },
   .text_rule = listen_rule},
}};
// clang-format on

std::string int_range_text(const FieldSpec& spec) {
  return "must be between " + std::to_string(spec.int_min) + " and " +
         std::to_string(spec.int_max);
}

}  // namespace

std::span<const std::string_view> table_names() noexcept { return kTables; }
std::span<const FieldSpec> field_specs() noexcept { return kFields; }

bool is_known_table(std::string_view table) noexcept {
  for (std::string_view name : kTables) {
    if (name == table) return true;
  }
  return false;
}

const FieldSpec* find_field(std::string_view table, std::string_view key) noexcept {
  for (const FieldSpec& spec : kFields) {
    if (spec.table == table && spec.key == key) return &spec;
  }
  return nullptr;
}

FieldRef bind_read(const FieldSpec& spec, const DaemonConfig& config) {
  // bind() only takes addresses; callers of bind_read only read through them.
  return spec.bind(const_cast<DaemonConfig&>(config));
}

std::string qualified_name(const FieldSpec& spec) {
  std::string name(spec.table);
  name += '.';
  name += spec.key;
  return name;
}

std::string check_int(const FieldSpec& spec, std::int64_t value) {
  if (value < 0) return int_range_text(spec);
  return check_uint(spec, static_cast<std::uint64_t>(value));
}

std::string check_uint(const FieldSpec& spec, std::uint64_t value) {
  if (value < spec.int_min || value > spec.int_max) return int_range_text(spec);
  return spec.int_rule != nullptr ? spec.int_rule(value) : std::string();
}

std::string check_real(const FieldSpec& spec, double value) {
  const protocol::ParamRange& r = spec.real;
  if (protocol::in_range(value, r)) return {};  // false for NaN
  return std::string("must be in ") + (r.min_open ? "(" : "[") + format_real(r.min) + ", " + format_real(r.max) +
         (r.max_open ? ")" : "]");
}

std::string check_text(const FieldSpec& spec, std::string_view value) {
  return spec.text_rule != nullptr ? spec.text_rule(value) : std::string();
}

std::string check_stored(const FieldSpec& spec, const FieldRef& ref) {
  return std::visit(
      Overloaded{
          [](bool*) { return std::string(); },
          [&](std::uint32_t* v) { return check_uint(spec, *v); },
          [&](std::uint64_t* v) { return check_uint(spec, *v); },
          [&](double* v) { return check_real(spec, *v); },
          [&](std::filesystem::path* v) { return check_text(spec, v->native()); },
          [&](std::string* v) { return check_text(spec, *v); },
          [&](LogLevel* v) { return check_text(spec, log_level_name(*v)); },
          [&](EvictionMode* v) { return check_text(spec, eviction_mode_name(*v)); },
      },
      ref);
}

std::string quote_toml(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned char>(c));
          out += escaped;
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

std::string format_real(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[64];
  // Shortest text that reads back to the same double.
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  std::string out(buffer, end);
  if (out.find_first_of(".eEn") == std::string::npos) out += ".0";  // keep it a TOML float
  return out;
}

std::string format_value(const FieldRef& ref) {
  return std::visit(
      Overloaded{
          [](bool* v) { return std::string(*v ? "true" : "false"); },
          [](std::uint32_t* v) { return std::to_string(*v); },
          [](std::uint64_t* v) { return std::to_string(*v); },
          [](double* v) { return format_real(*v); },
          [](std::filesystem::path* v) { return quote_toml(v->native()); },
          [](std::string* v) { return quote_toml(*v); },
          [](LogLevel* v) { return quote_toml(log_level_name(*v)); },
          [](EvictionMode* v) { return quote_toml(eviction_mode_name(*v)); },
      },
      ref);
}

std::string invalid_value_message(const FieldSpec& spec, std::string_view value,
                                  std::string_view why) {
  std::string out = "invalid value for " + qualified_name(spec) + ": ";
  out += value;
  out += " (";
  out += why;
  out += ')';
  return out;
}

}  // namespace kvtier::config::detail
