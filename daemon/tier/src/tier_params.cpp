// Validation and names for TierParams / EvictionMode.
#include "kvtier/tier/tier_params.hpp"

#include <cmath>
#include <cstdio>
#include <string>

namespace kvtier::tier {
namespace {

std::string fmt(double value) {
  // Shortest round-trip text is overkill here; %g is what a config author typed.
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", value);
  return buf;
}

Status bad(std::string_view field, std::string_view range, double value) {
  return make_error(Errc::kInvalidArgument, "tier params: " + std::string(field) +
                                                " must be in " + std::string(range) + ", got " +
                                                fmt(value));
}

}  // namespace

Status validate(const TierParams& params) {
  // Each number's range from the tier parameter table; written as !(in range) so NaN fails.
#define KVTIER_CHECK_RANGE(name, Wire, Type, value, range, help)                                 \
  if (!protocol::in_range(static_cast<double>(params.name), protocol::tier_ranges::name)) {       \
    return bad(#name, protocol::tier_ranges::name.text, static_cast<double>(params.name));       \
  }
  KVTIER_TIER_NUMBERS(KVTIER_CHECK_RANGE)
#undef KVTIER_CHECK_RANGE
  switch (params.mode) {
    case EvictionMode::kCumulative:
    case EvictionMode::kPaperAlgorithm:
    case EvictionMode::kPaperPrototype:
      break;
    default:
      return make_error(Errc::kInvalidArgument,
                        "tier params: mode has unknown value " +
                            std::to_string(static_cast<unsigned>(params.mode)));
  }
  if (params.mode == EvictionMode::kPaperPrototype && int8_enabled(params)) {
    // The prototype never re-ranks T1 tokens, and T2 is reached only from T1.
    return make_error(Errc::kInvalidArgument,
                      "tier params: int8_ratio and int8_tokens must be 0 in mode paper-prototype "
                      "(it never re-ranks T1, and T2 is filled from T1), got int8_ratio " +
                          fmt(params.int8_ratio) + ", int8_tokens " +
                          std::to_string(params.int8_tokens));
  }
  if (policy_name(params.policy) == "unknown") {
    return make_error(Errc::kInvalidArgument,
                      "tier params: policy has unknown value " +
                          std::to_string(static_cast<unsigned>(params.policy)));
  }
  if (params.hysteresis > 0.0 && !policy_traits(params.policy).supports_hysteresis) {
    return make_error(Errc::kInvalidArgument,
                      "tier params: hysteresis must be 0 with policy " +
                          std::string(policy_name(params.policy)) + " (paper and h2o only), got " +
                          fmt(params.hysteresis));
  }
  if (!(params.rkv_threshold >= -1.0 && params.rkv_threshold < 1.0)) {
    return bad("rkv_threshold", "[-1, 1)", params.rkv_threshold);
  }
  return {};
}

std::string_view eviction_mode_name(EvictionMode mode) noexcept {
  switch (mode) {
    case EvictionMode::kCumulative: return "cumulative";
    case EvictionMode::kPaperAlgorithm: return "paper-algorithm";
    case EvictionMode::kPaperPrototype: return "paper-prototype";
  }
  return "unknown";
}

Result<EvictionMode> parse_eviction_mode(std::string_view name) {
  for (EvictionMode mode : {EvictionMode::kCumulative, EvictionMode::kPaperAlgorithm,
                            EvictionMode::kPaperPrototype}) {
    if (name == eviction_mode_name(mode)) return mode;
  }
  return make_error(Errc::kInvalidArgument,
                    "unknown eviction mode '" + std::string(name) +
                        "' (expected cumulative, paper-algorithm or paper-prototype)");
}

Result<TierParams> in_positions(TierParams params, std::uint32_t tokens_per_position) {
  const std::uint32_t n = tokens_per_position;
  if (n == 0) return make_error(Errc::kInvalidArgument, "tier params: tokens_per_position must be at least 1");
  const auto up = [n](std::uint32_t& tokens) { tokens = tokens / n + (tokens % n != 0 ? 1 : 0); };
  const auto down = [n](std::uint32_t& tokens, const char* name) -> Status {
    if (tokens != 0 && tokens < n) {
      return make_error(Errc::kInvalidArgument, std::string("tier params: ") + name + " " + std::to_string(tokens) +
                                                    " is less than one position of " + std::to_string(n) + " tokens");
    }
    tokens /= n;
    return {};
  };
  up(params.sink_tokens);
  up(params.window_tokens);
  up(params.hbm_tokens);
  up(params.value_protect_tokens);
  if (auto ok = down(params.evict_tokens, "evict_tokens"); !ok) return tl::unexpected(ok.error());
  if (auto ok = down(params.int8_tokens, "int8_tokens"); !ok) return tl::unexpected(ok.error());
  return params;
}

std::uint32_t floor_share(double ratio, std::uint32_t count) noexcept {
  if (!(ratio > 0.0) || count == 0) return 0;
  if (ratio >= 1.0) return count;
  const double share = std::floor(ratio * static_cast<double>(count) + 1e-9);
  if (share >= static_cast<double>(count)) return count;
  return static_cast<std::uint32_t>(share);
}

}  // namespace kvtier::tier
