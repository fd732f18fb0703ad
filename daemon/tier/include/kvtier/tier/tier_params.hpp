// Tier-engine parameters of one sequence (or a node-wide default), their validation and the
// names of the eviction-knob semantics.
//
// Eviction-knob semantics (research/seed-algorithms.md §3.4, §9; DESIGN.md §4.4). U is the set
// of unprotected live tokens at a decision; r = evict_ratio, β = hbm_ratio:
//
//   kCumulative (default)  r is the fraction of the managed chain destroyed so far and is never
//                          exceeded: managed = |U| + destroyed, allowed = ⌊r·managed⌋,
//                          n_evict = max(0, allowed − destroyed); then of the remaining m
//                          tokens the top ⌊β·m⌋ are T0 and the rest T1.
//   kPaperAlgorithm        Algorithm 1 as written: n_evict = ⌊r·|U|⌋ every round (compounds:
//                          r = 3% destroys ~31% of a 2,047-token chain), n_hbm = ⌊β·(|U| − n_evict)⌋.
//   kPaperPrototype        the authors' offloader: candidates are the unprotected T0 tokens only
//                          (n of them); n_evict = ⌊r·n⌋, n_keep = ⌊β·n⌋ (sic: n, not n − n_evict;
//                          clamped to n − n_evict), the middle goes to T1. T1 tokens are immune:
//                          never re-ranked, promoted or evicted. A round with fewer than 10
//                          candidates is skipped, as in the prototype.
//
// Absolute budgets replace the ratio products where non-zero: hbm_tokens replaces β·m (β·n in
// the prototype); evict_tokens is the total cap of destroyed tokens in kCumulative and the
// per-round count in the two paper modes. Every ⌊x⌋ is taken with a 1e-9 tolerance so that
// 0.29·100 gives 29, not 28.
//
// int8 tier T2 (off by default: int8_ratio = 0 and int8_tokens = 0). Of the m1 = m − n_hbm
// survivors the plain split does not keep in T0, the lowest-ranked n_t2 go to T2 (int8, lossy)
// and the rest to T1: n_t2 = min(int8_tokens, m1) when int8_tokens != 0, else ⌊int8_ratio·m1⌋.
// T2 is filled from T1 only and a quantized token never returns to T1 (sequence_tiers.hpp).
// Not available in kPaperPrototype, which never re-ranks T1 tokens.
//
// Policy (policy_kind.hpp, policy.hpp): which ranking orders U. The eviction mode and the budgets
// above apply unchanged to every policy, so budgets are matched across policies. The protected
// set is the prompt (when protected), the sink_tokens positions after it (the first sink_tokens
// positions of the sequence when the prompt is not protected) and the newest window_tokens.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "kvtier/base/error.hpp"
#include "kvtier/protocol/tier_param_table.hpp"
#include "kvtier/tier/policy_kind.hpp"

namespace kvtier::tier {

enum class EvictionMode : std::uint8_t {
  kCumulative = 0,       // r = fraction of the managed chain destroyed so far, never exceeded
  kPaperAlgorithm = 1,   // r applied per round to all unprotected tokens (compounds)
  kPaperPrototype = 2,   // r and β on GPU-resident unprotected tokens only; T1 immune
};

// The client-settable fields take their defaults (and validate() their ranges) from the tier
// parameter table, protocol/tier_param_table.hpp.
namespace defaults = protocol::tier_defaults;

struct TierParams {
  std::uint32_t sink_tokens = defaults::sink_tokens;  // k_s: first generated positions [P, P+k_s), always T0
  std::uint32_t window_tokens = defaults::window_tokens;  // k_w: newest positions, always T0
  std::uint32_t interval = defaults::interval;  // Δ: decode steps between decisions (due())
  double hbm_ratio = defaults::hbm_ratio;  // β: share of the surviving unprotected tokens kept in T0
  double evict_ratio = defaults::evict_ratio;  // r: see the mode semantics above
  // Relative margin before a token flips T0<->T1 (kCumulative, kPaperAlgorithm; no effect in
  // kPaperPrototype). See SequenceTiers::decide() for the rule and the budget deviation it allows.
  double hysteresis = defaults::hysteresis;
  // 1 = no decay. Below 1, end_step() multiplies every score by decay, so a score is the EMA-like
  // sum s = Σ_j decay^(t−j+1)·x_j over the steps j ≤ t seen so far (per-interval sums add
  // Σ_j decay^(t−j)·x_j over the interval before its last end_step; interval_scores.hpp).
  double decay = defaults::decay;
  std::uint32_t hbm_tokens = defaults::hbm_tokens;  // absolute T0 budget for unprotected tokens; 0 = hbm_ratio
  std::uint32_t evict_tokens = defaults::evict_tokens;  // absolute destroyed-token budget; 0 = evict_ratio
  double int8_ratio = defaults::int8_ratio;  // share of the non-T0 survivors placed in T2; 0 = T2 off
  std::uint32_t int8_tokens = defaults::int8_tokens;  // absolute T2 budget; 0 = int8_ratio
  EvictionMode mode = EvictionMode::kCumulative;

  // --- policy (policy.hpp documents each one) ---
  PolicyKind policy = PolicyKind::kPaper;
  // Whether the prompt [0, P) is protected; unset: the policy's default
  // (policy_traits(policy).protects_prompt: paper and random yes, the others no).
  std::optional<bool> protect_prompt;
  // random, vase: randomness is a pure function of (seed, decision step, position). The daemon
  // should derive it per sequence (e.g. config seed ^ sequence id) so sequences differ.
  std::uint64_t seed = defaults::seed;
  // vase, r_kv: time constant (steps) of the recent-attention EMA; 0 = the policy's default
  // (vase 64 = VaSE's R, r_kv 8 = R-KV's α).
  std::uint32_t recent_window = defaults::recent_window;
  // vase: the largest value ranges reserved in T0, as a share of the T0 budget n_hbm (VaSE's
  // "faithful" n_large = B/4), or an absolute count when value_protect_tokens != 0 (clamped to
  // n_hbm either way).
  double value_protect_ratio = defaults::value_protect_ratio;
  std::uint32_t value_protect_tokens = defaults::value_protect_tokens;
  // r_kv: Z = λ·I − (1 − λ)·R with λ = rkv_lambda; keys with cosine > rkv_threshold are near
  // duplicates; a row's newest near duplicate is searched among the redundancy_horizon newest
  // candidates (0: no sparing).
  double rkv_lambda = defaults::rkv_lambda;
  double rkv_threshold = 0.5;
  std::uint32_t redundancy_horizon = 128;
};

// protect_prompt, or the policy's default when unset.
constexpr bool protects_prompt(const TierParams& params) noexcept {
  return params.protect_prompt.value_or(policy_traits(params.policy).protects_prompt);
}

// recent_window, or the policy's default when 0.
constexpr std::uint32_t effective_recent_window(const TierParams& params) noexcept {
  return params.recent_window != 0 ? params.recent_window
                                   : policy_traits(params.policy).default_recent_window;
}

// What a client needs to accumulate a sequence's scores between decisions exactly as kvtierd's
// per-step path does (kernels/interval_scores.hpp; sent in SequenceOpened, SequenceAdopted and
// Reattached): the interval, the IntervalSum factor of the attention sums (the score decay as a
// float; 1 = none) and, when the policy keeps recent attention (vase, r_kv), that of the
// recent-attention sums (ρ = 1 − 1/R as TokenFeatures computes it).
struct ScoreShipping {
  std::uint32_t interval = 64;
  float score_factor = 1.0f;
  bool recent = false;  // the policy takes recent-attention sums
  float recent_factor = 0.0f;
};
constexpr ScoreShipping score_shipping(const TierParams& params) noexcept {
  const std::uint32_t window = effective_recent_window(params);
  return {params.interval, params.decay < 1.0 ? static_cast<float>(params.decay) : 1.0f,
          policy_traits(params.policy).uses_recent_attention,
          window > 0 ? static_cast<float>(1.0 - 1.0 / static_cast<double>(window)) : 0.0f};
}

// True when the params give T2 a budget (int8_ratio > 0 or int8_tokens != 0).
constexpr bool int8_enabled(const TierParams& params) noexcept {
  return params.int8_ratio > 0.0 || params.int8_tokens != 0;
}

// kInvalidArgument naming the first offending field and its value, e.g.
// "tier params: hbm_ratio must be in [0, 1], got 1.5". Checks: every number of the tier
// parameter table in its range (ratios in [0, 1], hysteresis in [0, 1), decay in (0, 1],
// interval >= 1), mode and policy known enumerators, int8_ratio and int8_tokens 0 in
// kPaperPrototype, hysteresis 0 unless the policy supports it (paper, h2o), rkv_threshold in
// [-1, 1).
Status validate(const TierParams& params);

// "cumulative", "paper-algorithm", "paper-prototype"; "unknown" outside the enum.
std::string_view eviction_mode_name(EvictionMode mode) noexcept;

// Inverse of eviction_mode_name (exact, case-sensitive); kInvalidArgument listing the valid
// names otherwise.
Result<EvictionMode> parse_eviction_mode(std::string_view name);

// `params` with its token counts in positions of `tokens_per_position` tokens each (an engine
// that tiers whole blocks; PROTOCOL.md §4, TierParams.tokensPerPosition): sink_tokens,
// window_tokens, hbm_tokens and value_protect_tokens rounded up (they keep tokens in T0),
// evict_tokens and int8_tokens rounded down (they never take more than asked). kInvalidArgument
// for tokens_per_position 0, or for a nonzero evict_tokens or int8_tokens below one position
// (rounded to 0 it would mean "use the ratio"). Steps (interval, recent_window) stay as they are.
Result<TierParams> in_positions(TierParams params, std::uint32_t tokens_per_position);

// ⌊ratio·count⌋ with the 1e-9 tolerance described above, clamped to [0, count].
std::uint32_t floor_share(double ratio, std::uint32_t count) noexcept;

}  // namespace kvtier::tier
