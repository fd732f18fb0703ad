#include "tier_params.hpp"

namespace kvtier::daemon {
namespace {

tier::EvictionMode from_config(config::EvictionMode mode) {
  switch (mode) {
    case config::EvictionMode::kCumulative: return tier::EvictionMode::kCumulative;
    case config::EvictionMode::kPaperAlgorithm: return tier::EvictionMode::kPaperAlgorithm;
    case config::EvictionMode::kPaperPrototype: return tier::EvictionMode::kPaperPrototype;
  }
  return tier::EvictionMode::kCumulative;
}

}  // namespace

tier::TierParams tier_defaults(const config::TieringSection& tiering) {
  tier::TierParams params;
  params.sink_tokens = tiering.sink_tokens;
  params.window_tokens = tiering.window_tokens;
  params.interval = tiering.interval;
  params.hbm_ratio = tiering.hbm_ratio;
  params.evict_ratio = tiering.evict_ratio;
  params.hysteresis = tiering.hysteresis;
  params.decay = tiering.decay;
  params.mode = from_config(tiering.eviction_mode);
  return params;
}

Result<tier::TierParams> tier_params_from_wire(wire::TierParams::Reader wire, const config::TieringSection& tiering) {
  if (wire.getUseDefaults()) return tier_defaults(tiering);
  tier::TierParams params;
  params.sink_tokens = wire.getSinkTokens();
  params.window_tokens = wire.getWindowTokens();
  params.interval = wire.getInterval();
  params.hbm_ratio = wire.getHbmRatio();
  params.evict_ratio = wire.getEvictRatio();
  params.hysteresis = wire.getHysteresis();
  params.decay = wire.getDecay();
  params.hbm_tokens = wire.getHbmTokens();
  params.evict_tokens = wire.getEvictTokens();
  switch (wire.getMode()) {
    case wire::EvictionMode::CUMULATIVE: params.mode = tier::EvictionMode::kCumulative; break;
    case wire::EvictionMode::PAPER_ALGORITHM: params.mode = tier::EvictionMode::kPaperAlgorithm; break;
    case wire::EvictionMode::PAPER_PROTOTYPE: params.mode = tier::EvictionMode::kPaperPrototype; break;
    default: return make_error(Errc::kInvalidArgument, "unknown eviction mode");
  }
  if (auto ok = tier::validate(params); !ok) return tl::unexpected(ok.error());
  return params;
}

wire::EvictionMode to_wire(tier::EvictionMode mode) {
  switch (mode) {
    case tier::EvictionMode::kCumulative: return wire::EvictionMode::CUMULATIVE;
    case tier::EvictionMode::kPaperAlgorithm: return wire::EvictionMode::PAPER_ALGORITHM;
    case tier::EvictionMode::kPaperPrototype: return wire::EvictionMode::PAPER_PROTOTYPE;
  }
  return wire::EvictionMode::CUMULATIVE;
}

}  // namespace kvtier::daemon
