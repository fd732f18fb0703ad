// The tier parameters a client may set per sequence, defined once (PROTOCOL.md §4 "Tier
// parameters"). Everything that spells a parameter is derived from these two lists: the C
// defaults (kvtier_sequence_options_init), the client's wire setters (set_tiering), the daemon's
// wire reader, tier::TierParams's defaults, the per-field range checks (tier::validate), kvtierd's
// [tiering] defaults and limits, and the Python keywords of Client.open_sequence. A capnp field of
// TierParams that is in neither list fails tier_param_table_test, which also carries every
// parameter from the C struct over the wire into the daemon's TierParams.
//
// KVTIER_TIER_NUMBERS(X): one X(name, Wire, Type, default, range, help) per numeric parameter,
//   name     the member of kvtier_sequence_options and of tier::TierParams, the Python keyword,
//            the [tiering] key where kvtierd has one;
//   Wire     the TierParams field in control.capnp, as its accessors spell it (get<Wire>, set<Wire>);
//   Type     the C type, which is also the wire's and the daemon's;
//   default  kvtier_sequence_options_init's value and tier::TierParams{}'s;
//   range    the ParamRange below every value must lie in (checked by tier::validate);
//   help     one line for `kvtierd --help-config` and the docs.
// KVTIER_TIER_CHOICES(X): one X(name, Wire) per enumerated parameter; its values and their
//   conversions differ by language (C enum, wire enum, tier enum, Python enum) and are written
//   next to each conversion.
// Token counts are in tokens (tokensPerPosition converts them, tier::in_positions); interval and
// recent_window count steps.
// Thread-safety: constants.
#pragma once

#include <cstdint>
#include <limits>

namespace kvtier::protocol {

// A closed or half-open interval of real values; counts use it too (exact below 2^53).
struct ParamRange {
  double min;
  double max;
  bool min_open;
  bool max_open;
  const char* text;  // as error messages and docs write it
};

inline constexpr ParamRange kCount{0.0, double{std::numeric_limits<std::uint32_t>::max()}, false, false,
                                   "[0, 2^32)"};
inline constexpr ParamRange kPositiveCount{1.0, double{std::numeric_limits<std::uint32_t>::max()}, false,
                                           false, "[1, 2^32)"};
inline constexpr ParamRange kAnyWord{0.0, static_cast<double>(std::numeric_limits<std::uint64_t>::max()), false,
                                     false, "[0, 2^64)"};
inline constexpr ParamRange kShare{0.0, 1.0, false, false, "[0, 1]"};
inline constexpr ParamRange kShareBelowOne{0.0, 1.0, false, true, "[0, 1)"};
inline constexpr ParamRange kShareAboveZero{0.0, 1.0, true, false, "(0, 1]"};

// False for NaN.
constexpr bool in_range(double value, const ParamRange& range) noexcept {
  const bool above = range.min_open ? value > range.min : value >= range.min;
  const bool below = range.max_open ? value < range.max : value <= range.max;
  return above && below;
}

// clang-format off
#define KVTIER_TIER_NUMBERS(X)                                                                              \
  X(sink_tokens, SinkTokens, std::uint32_t, 4, kCount, "first generated tokens always kept in T0 (k_s)")     \
  X(window_tokens, WindowTokens, std::uint32_t, 128, kCount, "newest tokens always kept in T0 (k_w)")        \
  X(interval, Interval, std::uint32_t, 64, kPositiveCount, "decode steps between tier decisions (Δ)")       \
  X(hbm_ratio, HbmRatio, double, 0.5, kShare, "share of the surviving unprotected tokens kept in T0 (β)")  \
  X(evict_ratio, EvictRatio, double, 0.0, kShare, "share of unprotected tokens destroyed (T3), per mode (r)") \
  X(hysteresis, Hysteresis, double, 0.0, kShareBelowOne, "relative score margin before a token changes tier") \
  X(decay, Decay, double, 1.0, kShareAboveZero, "per-step score multiplier; 1 = no decay")                 \
  X(hbm_tokens, HbmTokens, std::uint32_t, 0, kCount, "absolute T0 budget; 0 = hbm_ratio")                   \
  X(evict_tokens, EvictTokens, std::uint32_t, 0, kCount, "absolute destroyed budget; 0 = evict_ratio")      \
  X(seed, Seed, std::uint64_t, 0, kAnyWord, "random, vase: seed of the policy's draws")                    \
  X(recent_window, RecentWindow, std::uint32_t, 0, kCount, "vase, r_kv: recent-attention steps; 0 = policy's") \
  X(value_protect_ratio, ValueProtectRatio, double, 0.25, kShare, "vase: share of T0 reserved by value range") \
  X(value_protect_tokens, ValueProtectTokens, std::uint32_t, 0, kCount, "vase: absolute count; 0 = the ratio") \
  X(rkv_lambda, RkvLambda, double, 0.1, kShare, "r_kv: importance weight λ")                              \
  X(int8_ratio, Int8Ratio, double, 0.0, kShare, "share of the non-T0 survivors quantized to int8 (T2)")   \
  X(int8_tokens, Int8Tokens, std::uint32_t, 0, kCount, "absolute T2 budget; 0 = int8_ratio")

#define KVTIER_TIER_CHOICES(X) \
  X(mode, Mode)                \
  X(policy, Policy)            \
  X(protect_prompt, ProtectPrompt)
// clang-format on

// The table's defaults by name: tier_defaults::sink_tokens is 4.
namespace tier_defaults {
#define KVTIER_TIER_DEFAULT(name, Wire, Type, value, range, help) inline constexpr Type name = value;
KVTIER_TIER_NUMBERS(KVTIER_TIER_DEFAULT)
#undef KVTIER_TIER_DEFAULT
}  // namespace tier_defaults

// The table's ranges by name: tier_ranges::hbm_ratio is kShare.
namespace tier_ranges {
#define KVTIER_TIER_RANGE(name, Wire, Type, value, range, help) inline constexpr ParamRange name = range;
KVTIER_TIER_NUMBERS(KVTIER_TIER_RANGE)
#undef KVTIER_TIER_RANGE
}  // namespace tier_ranges

}  // namespace kvtier::protocol
