// Optional per-token features of one sequence, kept only for the policies that read them
// (policy_kind.hpp): recent attention (vase, r_kv), value ranges (vase), key digests (r_kv).
// SequenceTiers owns one and validates positions against its own length and max_tokens; this
// class validates values.
//
// Recent attention is an exponential moving average of the per-step scores with time constant
// R = effective_recent_window: after step t (before the next step's first add) it holds
// Σ_j ρ^(t−j)·x_j with ρ = 1 − 1/R, x_j the scores added during step j (the latest step has weight
// 1; prefill column sums count as step 0). The decay of a finished step is applied lazily, once,
// before the next add, so a decision taken between steps sees the undecayed latest step; no
// policy depends on that common factor.
//
// Key digests are stored as int8 (scaled so the largest magnitude of each row is 127) plus the
// inverse norm of the int8 row: dim + 4 bytes per token. The dimension is fixed by the first
// add_key_digests call.
//
// Digest sum (r_kv's column sums, policy.hpp): an exact fixed-point Σ of the normalized digests
// k̂_p over the "counted" positions p >= sum_first whose tier is in the candidate mask of
// SequenceTiers::decide() (T0/T1/T2; T0 only in kPaperPrototype). Row p adds
// code[d]·w_p to component d, w_p = round(inv_norm_p·2^shift), shift = 62 − bit_width(max_tokens)
// (so |Σ| < 2^63 even with every position counted). Integers make the sum order-independent:
// it is kept up to date by every digest write, tier move and destruction in O(dim) each, and is
// bit-identical to a sum rebuilt from the current digests and tiers (a restored sequence starts
// with no digests and a zero sum, so it needs no rebuild). decide() reads it in O(window·dim).
//
// Thread-safety: none (owned by one SequenceTiers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvtier/base/error.hpp"
#include "kvtier/tier/policy.hpp"
#include "kvtier/tier/tier_params.hpp"

namespace kvtier::tier {

class TokenFeatures {
 public:
  static constexpr std::uint32_t kMaxDigestDim = 256;

  // sum_first: the first position that can ever be a candidate (the protected prefix ends there);
  // max_tokens: the sequence's bound, which sizes the digest sum's fixed point.
  TokenFeatures(const TierParams& params, std::uint32_t sum_first, std::uint32_t max_tokens);

  // Grows every enabled feature to `length` tokens (new entries 0).
  void resize(std::uint32_t length);

  // Recent attention: adds values[i] to position first + i unless tiers[first + i] is T3.
  // No-op when the policy keeps no recent attention. Preconditions: values validated and in
  // range (SequenceTiers::add_scores does both).
  void add_recent(std::uint32_t first, std::span<const float> values, std::span<const Tier> tiers);
  // One step finished: its decay is applied before the next add_recent.
  void end_step() noexcept;

  // kBadState if the policy does not use the feature; kInvalidArgument naming the position for a
  // NaN, infinite or negative range (or a non-finite key component, or dim outside
  // [1, kMaxDigestDim], keys.size() not a multiple of dim, dim differing from the first call's).
  // Nothing is stored on error. Precondition: the positions are < the resized length.
  Status set_value_ranges(std::uint32_t first, std::span<const float> ranges);
  // tiers: the sequence's committed tiers (they decide which rows the digest sum counts).
  Status set_key_digests(std::uint32_t first, std::span<const float> keys, std::uint32_t dim,
                         std::span<const Tier> tiers);
  // Input validation only, so a caller can check before extending the sequence.
  Status check_value_ranges(std::uint32_t first, std::span<const float> ranges) const;
  Status check_key_digests(std::uint32_t first, std::span<const float> keys,
                           std::uint32_t dim) const;

  // A committed tier change. To T3 (destroyed): every feature of the token becomes 0. The digest
  // sum drops or takes the row where the move changes whether the tier is counted.
  void moved(std::uint32_t position, Tier from, Tier to) noexcept;

  // Views over [first, first + size) for a RankingContext (empty for disabled features).
  std::span<const float> recent(std::uint32_t first, std::uint32_t size) const noexcept;
  std::span<const float> value_ranges(std::uint32_t first, std::uint32_t size) const noexcept;
  KeyDigestView digests(std::uint32_t first, std::uint32_t size) const noexcept;
  // digests(first, last − first) plus the digest sum over the candidates of a decision: the
  // counted rows minus those of the protected window [last, length) (all T0). The sum lives in
  // this object until the next call. Precondition: first >= sum_first or first == last.
  KeyDigestView ranked_digests(std::uint32_t first, std::uint32_t last, std::uint32_t length);

  std::uint32_t digest_dim() const noexcept { return digest_dim_; }
  // Heap bytes held (capacity).
  std::size_t bytes() const noexcept;

 private:
  void apply_pending_decay() noexcept;
  bool counted(std::uint32_t position, Tier tier) const noexcept {
    return position >= sum_first_ && ((count_mask_ >> tier_index(tier)) & 1u) != 0;
  }
  // Adds (sign +1) or removes (-1) row `position` from `sum`.
  void add_row(std::vector<std::int64_t>& sum, std::uint32_t position, std::int64_t sign) const;

  bool use_recent_;
  bool use_ranges_;
  bool use_digests_;
  PolicyKind policy_;
  float rho_ = 0.0f;               // EMA factor 1 − 1/R
  std::uint32_t pending_steps_ = 0;  // finished steps whose decay is not applied yet
  std::uint32_t length_ = 0;
  std::uint32_t digest_dim_ = 0;
  std::vector<float> recent_;
  std::vector<float> ranges_;
  std::vector<std::int8_t> digest_codes_;
  std::vector<float> digest_inv_norms_;
  std::uint32_t sum_first_;
  std::uint8_t count_mask_;  // tiers the digest sum counts (decide()'s candidate mask)
  int sum_shift_;
  std::vector<std::int64_t> digest_sum_;     // dim components once digests exist
  std::vector<std::int64_t> candidate_sum_;  // ranked_digests()' result
};

}  // namespace kvtier::tier
