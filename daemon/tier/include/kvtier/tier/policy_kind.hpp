// The selection policies the tier engine can rank tokens by (research/seed-algorithms.md §8,
// DESIGN.md §5), their names and their static traits: which per-token features each needs, what
// it protects by default and how many bytes of state it keeps per token.
//
// Every policy here places whole tokens (all layers and KV heads together, DESIGN.md §1). The
// originals of h2o, random, vase and r_kv select per (layer, KV head); kvtier reduces their inputs
// to one value per token on the client (scores: mean over query heads and layers; value ranges
// and key digests: see sequence_tiers.hpp) and makes one decision per token. Each policy's doc in
// policy.hpp says what that reduction is.
//
// The numeric values travel in config and on the wire: append only, never renumber.
// Thread-safety: plain values and pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kvtier/base/error.hpp"

namespace kvtier::tier {

enum class PolicyKind : std::uint8_t {
  kPaper = 0,         // cumulative attention (the default)
  kH2o = 1,           // canonical H2O: accumulated attention, heavy hitters + recent window
  kStreamingLlm = 2,  // attention sinks + recent window; every other token ranks by recency only
  kRandom = 3,        // Random Attention: prompt kept, uniform random over the rest
  kVase = 4,          // value-range protection + sampling ∝ recent attention
  kRKv = 5,           // R-KV: λ·importance − (1 − λ)·key redundancy
};

inline constexpr std::array<PolicyKind, 6> kAllPolicies = {
    PolicyKind::kPaper, PolicyKind::kH2o,  PolicyKind::kStreamingLlm,
    PolicyKind::kRandom, PolicyKind::kVase, PolicyKind::kRKv};

struct PolicyTraits {
  bool protects_prompt = true;       // default of TierParams::protect_prompt when unset
  bool uses_recent_attention = false; // keeps an EMA of the per-step scores (4 B/token)
  bool uses_value_ranges = false;    // accepts add_value_ranges (4 B/token)
  bool uses_key_digests = false;     // accepts add_key_digests (dim + 4 B/token)
  bool supports_hysteresis = false;  // ranking keys are scores, so a relative margin means something
  std::uint32_t default_recent_window = 0;  // EMA time constant in steps when recent_window == 0
};

constexpr PolicyTraits policy_traits(PolicyKind kind) noexcept {
  switch (kind) {
    case PolicyKind::kPaper: return {true, false, false, false, true, 0};
    case PolicyKind::kH2o: return {false, false, false, false, true, 0};
    case PolicyKind::kStreamingLlm: return {false, false, false, false, false, 0};
    case PolicyKind::kRandom: return {true, false, false, false, false, 0};
    case PolicyKind::kVase: return {false, true, true, false, false, 64};
    case PolicyKind::kRKv: return {false, true, false, true, false, 8};
  }
  return {};
}

// Persistent per-token state of a sequence under `kind`: 4 B score + 1 B tier for every policy,
// + 4 B recent attention (vase, r_kv), + 4 B value range (vase), + digest_dim + 4 B key digest
// (r_kv). paper/h2o/streaming_llm/random: 5; vase: 13; r_kv: 13 + digest_dim (45 at dim 32).
// Not counted: the decision scratch of 4 B per managed token (all but paper and h2o) that is
// kept between decisions, and the transient move buffer (sequence_tiers.hpp).
constexpr std::size_t policy_bytes_per_token(PolicyKind kind, std::uint32_t digest_dim) noexcept {
  const PolicyTraits t = policy_traits(kind);
  std::size_t bytes = sizeof(float) + 1;
  if (t.uses_recent_attention) bytes += sizeof(float);
  if (t.uses_value_ranges) bytes += sizeof(float);
  if (t.uses_key_digests) bytes += std::size_t{digest_dim} + sizeof(float);
  return bytes;
}

// "paper", "h2o", "streaming_llm", "random", "vase", "r_kv"; "unknown" outside the enum.
std::string_view policy_name(PolicyKind kind) noexcept;

// Inverse of policy_name (exact, case-sensitive); kInvalidArgument listing the names otherwise.
Result<PolicyKind> parse_policy(std::string_view name);

}  // namespace kvtier::tier
