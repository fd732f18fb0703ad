#include "tier_params.hpp"

#include <algorithm>
#include <string>

#include "kvtier/protocol/defaults.hpp"
#include "kvtier/protocol/tier_param_table.hpp"
#include "kvtier/tier/policy_kind.hpp"

namespace kvtier::daemon {
namespace {

// The wire's Policy enumerants index kAllPolicies (tier_params_from_wire, to_wire).
static_assert(tier::kAllPolicies.size() == 6 && static_cast<std::size_t>(wire::Policy::R_KV) == 5);
static_assert(tier::kAllPolicies[static_cast<std::size_t>(wire::Policy::PAPER)] == tier::PolicyKind::kPaper);
static_assert(tier::kAllPolicies[static_cast<std::size_t>(wire::Policy::H2O)] == tier::PolicyKind::kH2o);
static_assert(tier::kAllPolicies[static_cast<std::size_t>(wire::Policy::STREAMING_LLM)] ==
              tier::PolicyKind::kStreamingLlm);
static_assert(tier::kAllPolicies[static_cast<std::size_t>(wire::Policy::RANDOM)] == tier::PolicyKind::kRandom);
static_assert(tier::kAllPolicies[static_cast<std::size_t>(wire::Policy::VASE)] == tier::PolicyKind::kVase);
static_assert(tier::kAllPolicies[static_cast<std::size_t>(wire::Policy::R_KV)] == tier::PolicyKind::kRKv);

tier::EvictionMode from_config(config::EvictionMode mode) {
  switch (mode) {
    case config::EvictionMode::kCumulative: return tier::EvictionMode::kCumulative;
    case config::EvictionMode::kPaperAlgorithm: return tier::EvictionMode::kPaperAlgorithm;
    case config::EvictionMode::kPaperPrototype: return tier::EvictionMode::kPaperPrototype;
  }
  return tier::EvictionMode::kCumulative;
}

}  // namespace

Result<tier::TierParams> tier_defaults(const config::TieringSection& tiering, std::uint64_t sequence_salt) {
  tier::TierParams params;
  const Result<tier::PolicyKind> policy = tier::parse_policy(tiering.policy);
  if (!policy) return make_error(policy.error().code, "tiering.policy: " + policy.error().message);
  params.policy = *policy;
  params.seed = tiering.seed ^ (sequence_salt * 0x9E3779B97F4A7C15ull);
  params.sink_tokens = tiering.sink_tokens;
  params.window_tokens = tiering.window_tokens;
  params.interval = tiering.interval;
  params.hbm_ratio = tiering.hbm_ratio;
  params.evict_ratio = tiering.evict_ratio;
  params.hysteresis = tiering.hysteresis;
  params.decay = tiering.decay;
  params.mode = from_config(tiering.eviction_mode);
  params.int8_ratio = tiering.int8_ratio;
  return params;
}

namespace {

// The client's own parameters (useDefaults false), in tokens as sent: the table's numbers, then
// the choices (KVTIER_TIER_CHOICES) one by one.
Result<tier::TierParams> sent_params(wire::TierParams::Reader wire) {
  tier::TierParams params;
#define KVTIER_FROM_WIRE(name, Wire, Type, value, range, help) params.name = wire.get##Wire();
  KVTIER_TIER_NUMBERS(KVTIER_FROM_WIRE)
#undef KVTIER_FROM_WIRE
  switch (wire.getMode()) {
    case wire::EvictionMode::CUMULATIVE: params.mode = tier::EvictionMode::kCumulative; break;
    case wire::EvictionMode::PAPER_ALGORITHM: params.mode = tier::EvictionMode::kPaperAlgorithm; break;
    case wire::EvictionMode::PAPER_PROTOTYPE: params.mode = tier::EvictionMode::kPaperPrototype; break;
    default: return make_error(Errc::kInvalidArgument, "unknown eviction mode");
  }
  const auto policy = static_cast<std::size_t>(wire.getPolicy());
  if (policy >= tier::kAllPolicies.size()) {
    return make_error(Errc::kInvalidArgument, "tiering.policy: unknown policy " + std::to_string(policy) +
                                                  " (expected 0.." + std::to_string(tier::kAllPolicies.size() - 1) +
                                                  ", paper to r_kv)");
  }
  params.policy = tier::kAllPolicies[policy];  // wire enumerants follow PolicyKind's order
  switch (wire.getProtectPrompt()) {
    case wire::PromptProtection::POLICY_DEFAULT: break;
    case wire::PromptProtection::PROTECT: params.protect_prompt = true; break;
    case wire::PromptProtection::UNPROTECTED: params.protect_prompt = false; break;
    default: return make_error(Errc::kInvalidArgument, "unknown prompt protection");
  }
  if (auto ok = tier::validate(params); !ok) return tl::unexpected(ok.error());
  return params;
}

}  // namespace

Result<tier::TierParams> tier_params_from_wire(wire::TierParams::Reader wire, const config::TieringSection& tiering,
                                               std::uint64_t sequence_salt) {
  const std::uint32_t per_position = wire.getTokensPerPosition();
  if (per_position > protocol::kMaxTokensPerPosition) {
    return make_error(Errc::kInvalidArgument, "tokensPerPosition " + std::to_string(per_position) + " exceeds " +
                                                  std::to_string(protocol::kMaxTokensPerPosition));
  }
  auto params = wire.getUseDefaults() ? tier_defaults(tiering, sequence_salt) : sent_params(wire);
  if (!params) return params;
  return tier::in_positions(*params, std::max<std::uint32_t>(per_position, 1));
}

wire::EvictionMode to_wire(tier::EvictionMode mode) {
  switch (mode) {
    case tier::EvictionMode::kCumulative: return wire::EvictionMode::CUMULATIVE;
    case tier::EvictionMode::kPaperAlgorithm: return wire::EvictionMode::PAPER_ALGORITHM;
    case tier::EvictionMode::kPaperPrototype: return wire::EvictionMode::PAPER_PROTOTYPE;
  }
  return wire::EvictionMode::CUMULATIVE;
}

wire::Policy to_wire(tier::PolicyKind policy) {
  for (std::size_t i = 0; i < tier::kAllPolicies.size(); ++i) {
    if (tier::kAllPolicies[i] == policy) return static_cast<wire::Policy>(i);
  }
  return wire::Policy::PAPER;
}

void set_shipping(wire::ScoreShipping::Builder out, const tier::TierParams& params, std::uint64_t steps_done) {
  const tier::ScoreShipping shipping = tier::score_shipping(params);
  out.setInterval(shipping.interval);
  out.setStepsDone(steps_done);
  out.setScoreFactor(shipping.score_factor);
  out.setRecentSums(shipping.recent);
  out.setRecentFactor(shipping.recent_factor);
}

}  // namespace kvtier::daemon
