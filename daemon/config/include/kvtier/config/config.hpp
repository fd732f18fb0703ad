// kvtierd configuration: the TOML file (/etc/kvtier/kvtierd.toml), `--set table.key=value`
// command-line overrides, validation, and a dump of the effective configuration.
//
// Every field has a built-in default, so an empty file (or none) is a complete configuration.
// The file is strict: an unknown table or key, a value of the wrong type or out of range is an
// error naming the key, the value and the place ("unknown key 'limits.max_clinets' in
// kvtierd.toml:12"); nothing is silently ignored. Lifecycle in main():
//   load_config_file (or a default DaemonConfig) -> apply_override per --set -> validate.
// load_config_file/parse_config already validate what they return; apply_override checks only
// the one value it sets, so validate() must run after the last override.
//
// Thread-safety: DaemonConfig is a plain value; every function here is reentrant and touches
// nothing but its arguments.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kvtier/base/error.hpp"
#include "kvtier/protocol/tier_param_table.hpp"

namespace kvtier::config {

// Socket file name inside daemon.runtime_dir when daemon.socket is empty.
inline constexpr std::string_view kSocketFileName = "kvtierd.sock";

// Same order and meaning as spdlog::level::level_enum (trace = 0 ... off = 6), so the daemon may
// static_cast between them. TOML names: trace, debug, info, warn, error, critical, off.
enum class LogLevel : std::uint8_t { kTrace, kDebug, kInfo, kWarn, kError, kCritical, kOff };

// How tiering.evict_ratio is read (DESIGN.md §4.4, seed-algorithms.md §3.4, §9.5).
// TOML names: "cumulative" (r = fraction of the managed chain destroyed so far; the default),
// "paper-algorithm" (r re-applied every round, compounding, as Algorithm 1),
// "paper-prototype" (r and hbm_ratio applied to GPU-resident tokens only, as the prototype).
enum class EvictionMode : std::uint8_t { kCumulative, kPaperAlgorithm, kPaperPrototype };

std::string_view log_level_name(LogLevel level) noexcept;
std::optional<LogLevel> parse_log_level(std::string_view name) noexcept;
std::string_view eviction_mode_name(EvictionMode mode) noexcept;
std::optional<EvictionMode> parse_eviction_mode(std::string_view name) noexcept;

// The names tiering.policy accepts ("paper", "h2o", "streaming_llm", "random", "vase", "r_kv").
// The tier engine owns the policies; the names are repeated here so that this module does not
// depend on it. daemon/src/tier_params.cpp maps them (an unknown name is an error there too) and
// tests/unit/daemon/policy_names_test.cpp checks that both sides know exactly the same names.
std::span<const std::string_view> policy_names() noexcept;

// [daemon]
struct DaemonSection {
  std::filesystem::path runtime_dir = "/run/kvtier";  // socket, lock file; absolute
  std::filesystem::path socket;        // empty: runtime_dir / kSocketFileName; else absolute
  std::string shm_prefix = "kvtier";   // shm names "/kvtier.<shm_prefix>-<epoch>..."; [A-Za-z0-9_-]
  std::string admin_group = "kvtier-admin";  // empty: admin only for root and the daemon's uid
  LogLevel log_level = LogLevel::kInfo;
  bool watchdog = true;  // feed systemd's watchdog when WATCHDOG_USEC is set

  bool operator==(const DaemonSection&) const = default;
};

// [limits] Per-client and per-message caps; reaching one is Errc::kLimitExceeded for that client.
struct LimitsSection {
  std::uint32_t max_clients = 64;
  std::uint32_t max_sequences_per_client = 256;
  std::uint64_t max_pool_bytes_per_client = std::uint64_t{1} << 30;  // 1 GiB
  std::uint32_t max_frame_bytes = 1u << 20;                          // 1 MiB control frame
  std::uint32_t max_tokens_per_sequence = 1u << 20;
  std::uint32_t score_ring_records = 4096;  // power of two
  std::uint32_t plan_ring_records = 1024;   // power of two
  std::uint32_t hello_timeout_ms = 10000;      // a connection without Hello by then is closed
  std::uint32_t max_pending_connections = 64;  // connections not past Hello at once
  std::uint32_t drain_timeout_ms = 2000;   // SIGTERM: how long to wait for outstanding acks
  std::uint32_t orphan_grace_ms = 30000;   // a predecessor's pool waits this long for its client
  std::uint32_t plans_in_flight = 16;      // per client, each of another sequence; 1..64 (shm::kPlanAckSlots)

  bool operator==(const LimitsSection&) const = default;
};

// [tiering] Defaults for the tier engine. Plain fields on purpose: the daemon copies them into
// the tier library's own parameter struct, so this module does not depend on it. Their defaults
// and real ranges are the tier parameter table's (protocol/tier_param_table.hpp).
namespace tier_defaults = protocol::tier_defaults;

struct TieringSection {
  // In tokens: a sequence whose positions are blocks (TierParams.tokensPerPosition) gets them
  // rounded up to whole positions.
  std::uint32_t sink_tokens = tier_defaults::sink_tokens;  // first generated tokens always kept in T0
  std::uint32_t window_tokens = tier_defaults::window_tokens;  // newest tokens always kept in T0
  std::uint32_t interval = tier_defaults::interval;  // re-tier every `interval` decode steps (Δ)
  double hbm_ratio = tier_defaults::hbm_ratio;  // β: share of surviving unprotected tokens kept in T0
  double evict_ratio = tier_defaults::evict_ratio;  // r: see EvictionMode; 0 = never destroy a token
  double hysteresis = tier_defaults::hysteresis;  // margin before a token changes tier; 0 = none
  double decay = tier_defaults::decay;  // per-step score multiplier; 1 = no decay (paper)
  EvictionMode eviction_mode = EvictionMode::kCumulative;
  std::string policy = "paper";  // paper, h2o, streaming_llm, random, vase, r_kv
  std::uint64_t seed = 0;        // random, vase: each sequence derives its own seed from it
  double int8_ratio = tier_defaults::int8_ratio;  // share of the non-T0 survivors quantized to T2; 0 = off

  bool operator==(const TieringSection&) const = default;
};

// [pools]
struct PoolsSection {
  // Node-wide cap on DDR (T1) row bytes in use over all clients; 0 = derived by kvtierd at start:
  // min(/dev/shm size, MemTotal / 2).
  // Segments may add up to more (each is reserved whole when created, shm/LAYOUT.md); under
  // pressure each client's weighted share decides who gives rows back (node_budget.hpp).
  std::uint64_t ddr_bytes_total = 0;
  std::uint64_t int8_bytes_total = 0;      // node-wide cap on int8 pool segment bytes; 0 = none
  std::uint32_t int8_group_tokens = 32;    // tokens per int8 block (keys share per-channel scales)
  std::uint32_t max_client_weight = 16;    // a client's requested weight is clamped to this
  std::string pressure = "demote-evict";   // demote-evict, demote, evict or backpressure

  bool operator==(const PoolsSection&) const = default;
};

// [metrics] Prometheus text exposition over HTTP (daemon/src/metrics_server.hpp). Off by default:
// the endpoint shows client names and models, so it is opened only where configured (the
// packaged systemd config serves it on loopback).
struct MetricsSection {
  std::string listen;  // "ADDRESS:PORT" (numeric IPv4, or [IPv6]); port 0 = any free port; empty = off

  bool operator==(const MetricsSection&) const = default;
};

struct ListenAddress {
  std::string host;  // numeric, without brackets
  std::uint16_t port = 0;
};
// "127.0.0.1:9464" or "[::1]:0"; nullopt for anything else (names are not looked up).
std::optional<ListenAddress> parse_listen_address(std::string_view text);

struct DaemonConfig {
  DaemonSection daemon;
  LimitsSection limits;
  TieringSection tiering;
  PoolsSection pools;
  MetricsSection metrics;

  bool operator==(const DaemonConfig&) const = default;
};

// The socket the daemon binds (and kvtierctl connects to): daemon.socket if set, else
// daemon.runtime_dir / kSocketFileName.
std::filesystem::path socket_path(const DaemonConfig& config);

// Reads and parses a TOML file; `path` is the source name in messages.
// Errors: kOsError (cannot open/read, with errno), kInvalidArgument (too large, syntax, unknown
// key, wrong type, out of range, inconsistent), kInternal (unexpected exception).
Result<DaemonConfig> load_config_file(const std::filesystem::path& path);

// Parses TOML text over the built-in defaults and validates the result. `source_name` only
// labels messages ("kvtierd.toml" gives "... in kvtierd.toml:12"). Errors as load_config_file.
Result<DaemonConfig> parse_config(std::string_view toml_text, std::string_view source_name);

// Applies one "table.key=value" override (the argument of --set). The value is TOML
// (8, 0.25, true, "text"); for string-valued keys an unquoted value is taken literally
// (--set daemon.log_level=debug). Checks this value's type and range only; on error `config`
// is unchanged. Errors: kInvalidArgument.
Status apply_override(DaemonConfig& config, std::string_view assignment);

// Checks every value's range and the cross-field rules (e.g. the socket path must fit in a
// sockaddr_un). Errors: kInvalidArgument naming the key and the value.
Status validate(const DaemonConfig& config);

// The configuration as TOML, every key present, in file order, with one comment per key.
// parse_config(to_toml(c), ...) == c for every valid c. Used by `kvtierd --print-config`.
std::string to_toml(const DaemonConfig& config);

}  // namespace kvtier::config
