// One interface for every selection policy: a policy turns the managed range of a sequence into
// one ranking key per candidate token (higher = more important). SequenceTiers::decide() then
// applies the same budgets and the same radix cut selection to those keys for every policy: the
// lowest n_evict candidates go to T3, the highest n_hbm to T0, the rest to T1. Ties rank by
// position (an older token ranks lower). Extra protection (vase's value ranges) is a key of +inf,
// which the policy grants to at most n_hbm tokens, so it never overrides a budget.
//
// Per-token placement everywhere (policy_kind.hpp): each "Original" line below says what the
// published method selects per (layer, KV head) and what kvtier does instead.
//
//   paper          key = cumulative score s_i (research/seed-algorithms.md §2, §9).
//                  Original: one score per token already (mean over heads, summed over layers).
//   h2o            key = accumulated attention A_i = Σ_t α_t[i], the same running sum as paper
//                  (no decay unless TierParams::decay < 1); heavy hitters = the top of U, recent
//                  = the protected window. The prompt is NOT protected unless protect_prompt is
//                  set (canonical H2O has no prompt protection). Canonical H2O has no sinks
//                  either: set sink_tokens = 0 for it (default 4 keeps StreamingLLM's sinks).
//                  Original: per (layer, head) scores, greedy argmin eviction every step; here
//                  head/layer-mean scores, a batch decision every Δ. The authors' repo variant
//                  (§8.4: single-step score, budget counting the prompt, every step) is a
//                  reproduction mode only and is not implemented.
//   streaming_llm  key = position: nothing but recency matters. The protected set is StreamingLLM's
//                  cache (sinks = the first sink_tokens positions, since the prompt is not
//                  protected by default, + the newest window_tokens); of U, the newest n_hbm are
//                  T0 (a larger window), the oldest n_evict go to T3. Original: per token.
//   random         key = u(seed, step, position), uniform (random_draw below). The prompt is
//                  protected (Random Attention "_pp"). Every decision re-draws over all
//                  candidates (earlier survivors included), as the original does every round.
//                  Original: independent draws per (layer, KV head); here one draw per token.
//   vase           value range m_i (client: max over layers and KV heads of max_d v − min_d v)
//                  reserves the n_large = value_protect share of n_hbm largest-m candidates (key
//                  +inf); the others are sampled without replacement ∝ recent attention a_i (EMA
//                  of the per-step scores, time constant recent_window = 64 = VaSE's R) by
//                  exponential races: key = a_i / E_i, E_i = −ln u(seed, step, position)
//                  (Efraimidis–Spirakis: the top k of a/E are a weighted sample of size k without
//                  replacement, and the order continues the sampling order, so T0 = sampled
//                  first, T3 = never sampled). a_i = 0 ranks lowest. Sinks: the protected set.
//                  Prompt not protected by default (the "_pp" variant sets protect_prompt).
//                  Original: per (layer, KV head) ranges and GQA-group attention from the last 64
//                  queries, optional width-5 smoothing (not done here).
//                  Evaluation: key = float(min(a / E, FLT_MAX)) with a / E in double and E =
//                  −std::log(u), exactly; SIMD loops compute ln by a polynomial and keep a key
//                  only when every value within 2^-40 of their quotient rounds to the same float
//                  (else they call the scalar definition), so every CPU writes the same keys. The
//                  reservation's +inf is written in the same pass.
//   r_kv           Z_j = λ·I_j − (1 − λ)·R_j over the candidates U (in position order), λ = 0.1:
//                    a_j = recent attention (EMA, time constant recent_window = 8 = R-KV's α);
//                    p_j = max of a over the candidates c−3..c+3 around j (width-7 max pool);
//                    I_j = p_j / Σ_U p (0 if the sum is 0);
//                    k̂_j = the token's key digest, normalized (zero if none was sent);
//                    S_ij = k̂_i·k̂_j for i ≠ j, S_jj = 0;
//                    sparing: for each row i, the newest j among the redundancy_horizon newest
//                    candidates with S_ij > rkv_threshold (0.5) gets S_ij := 0 (the newest
//                    near-duplicate is spared); rows with no such j in the horizon spare nothing;
//                    m_j = (1/|U|)·Σ_i S_ij (column mean);  R_j = softmax over U of m;
//                    key = Z_j − min_U Z (a shift that keeps the order and makes keys >= 0).
//                  Evaluation: Σ_i S_ij = k̂_j·Σ_U k̂ − |k̂_j|², with Σ_U k̂ kept exactly (integer
//                  fixed point, 2^-(62 − bit_width(max_tokens)) per unit) by the sequence as
//                  digests, tiers and evictions change (token_features.hpp), so a decision
//                  reads it in O(window·dim) instead of summing |U| rows; the dot k̂_j·Σ is
//                  exact in integers, m and Z are then rounded to float, e^m is a float
//                  polynomial within 3 ulp. Sparing: with |U| <= 2048 every row searches (the
//                  definition exactly); above, 2048 rows drawn uniformly with replacement from U
//                  (hash of seed and step) each stand for |U|/2048 rows. Only the horizon's
//                  columns are corrected, so only their m is estimated: each is a mean of
//                  2048 i.i.d. terms in [min(0, rkv_threshold), 1], hence by Hoeffding
//                  |m̂_j − m_j| <= ε = w·sqrt(ln(2/δ)/4096) with probability >= 1 − δ per column
//                  (w = 1 − min(0, rkv_threshold); δ = 1e-6: ε = 0.06·w; the standard deviation
//                  is at most 0.011·w). If every horizon column is within ε, e^m̂ is within a
//                  factor e^±ε of e^m for every j, Σe too, so R̂_j / R_j ∈ [e^-2ε, e^2ε] and
//                  |Ẑ_j − Z_j| <= (1 − λ)·R_j·(e^2ε − 1); the other columns' m are exact.
//                  Cost per decision: one pass over the |U| digests (dim bytes each) for the
//                  dots, at most min(|U|, 2048)·horizon digest dot products for the sparing
//                  (newest 16 first, so rows whose near-duplicate is recent stop early), and
//                  three streaming passes over 8 B per candidate; memory: 4 B per candidate
//                  kept between decisions (the workspace) + horizon·(2·dim + 12) B transient.
//                  Differences
//                  from the R-KV code: rows and columns are U only (not the window), GQA-max
//                  logits are the client's score reduction, no near-duplicate means nothing is
//                  spared (the code's argmax-of-zeros zeroes column 0), the search is bounded by
//                  the horizon. Original: per (layer, KV head) keys; here one digest per token
//                  (client: e.g. the head-mean post-RoPE key of one middle layer, optionally
//                  randomly projected to 32 dims; cosine is scale-free).
//
// Thread-safety: policies are stateless and const; rank() may run concurrently on distinct
// contexts.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kvtier/tier/policy_kind.hpp"
#include "kvtier/tier/tier.hpp"
#include "kvtier/tier/tier_params.hpp"

namespace kvtier::tier {

// Per-token key digests of a range: row i is codes[i·dim, (i+1)·dim) (int8, scaled so the largest
// magnitude is 127) and inv_norms[i] = 1 / |row i| (0 for a zero row or a token with no digest).
// sum, when not empty, is Σ over the candidates of k̂ = code·inv_norm as exact fixed point (dim
// components in units of 2^-sum_shift; token_features.hpp); empty: rank() sums the rows itself.
struct KeyDigestView {
  KeyDigestView() = default;
  // Rows only (no sum).
  KeyDigestView(std::span<const std::int8_t> c, std::span<const float> norms, std::uint32_t d)
      : codes(c), inv_norms(norms), dim(d) {}

  std::span<const std::int8_t> codes;
  std::span<const float> inv_norms;
  std::uint32_t dim = 0;  // 0: no digests at all
  std::span<const std::int64_t> sum;
  int sum_shift = 0;
};

// Everything a policy may read, over the managed range [first_position, first_position + size).
struct RankingContext {
  std::span<const float> scores;        // cumulative scores (all policies)
  std::span<const Tier> tiers;          // committed tiers; defines size
  std::span<const float> recent;        // recent attention (uses_recent_attention), else empty
  std::span<const float> value_ranges;  // vase, else empty
  KeyDigestView digests;                // r_kv, else empty
  std::uint32_t first_position = 0;
  std::uint8_t candidate_mask = 0;  // bit t set: a token in tier t is a candidate
  std::uint32_t candidates = 0;     // number of candidates in the range
  std::uint32_t hbm_budget = 0;     // n_hbm: candidates the decision puts in T0
  std::uint32_t evict_budget = 0;   // n_evict
  std::uint64_t step = 0;           // decode step of the decision (seeds the randomness)
  const TierParams* params = nullptr;
  // A buffer the sequence keeps between decisions for a policy's temporaries (r_kv: 4 B per
  // candidate), so large decisions do not fault in fresh pages each time; null: rank() allocates.
  std::vector<float>* workspace = nullptr;

  bool is_candidate(std::size_t i) const noexcept {
    return ((candidate_mask >> tier_index(tiers[i])) & 1u) != 0;
  }
};

class RankingPolicy {
 public:
  virtual ~RankingPolicy() = default;
  virtual PolicyKind kind() const noexcept = 0;
  // Ranking keys aligned with ctx.tiers: either ctx.scores itself or `scratch`, resized to the
  // range. Keys of candidates are +0, positive or +inf (never NaN or negative); entries of
  // non-candidates are unspecified. The returned span stays valid while ctx and scratch do.
  virtual std::span<const float> rank(const RankingContext& ctx,
                                      std::vector<float>& scratch) const = 0;
};

// The policy object for `kind`. Precondition (aborts): a known enumerator.
std::unique_ptr<const RankingPolicy> make_policy(PolicyKind kind);

// The uniform draw behind random and vase: a splitmix64 hash of (seed, step, position) mapped to
// (0, 1) as ((h >> 11) + 0.5) / 2^53, where h = mix(mix(mix(seed) ^ step) ^ position) and
// mix is the splitmix64 finalizer applied to x + 0x9E3779B97F4A7C15.
double random_draw(std::uint64_t seed, std::uint64_t step, std::uint32_t position) noexcept;

}  // namespace kvtier::tier
