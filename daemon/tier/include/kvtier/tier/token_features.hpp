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
// Thread-safety: none (owned by one SequenceTiers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvtier/protocol/error.hpp"
#include "kvtier/tier/policy.hpp"
#include "kvtier/tier/tier_params.hpp"

namespace kvtier::tier {

class TokenFeatures {
 public:
  static constexpr std::uint32_t kMaxDigestDim = 256;

  explicit TokenFeatures(const TierParams& params);

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
  Status set_key_digests(std::uint32_t first, std::span<const float> keys, std::uint32_t dim);
  // Input validation only, so a caller can check before extending the sequence.
  Status check_value_ranges(std::uint32_t first, std::span<const float> ranges) const;
  Status check_key_digests(std::uint32_t first, std::span<const float> keys,
                           std::uint32_t dim) const;

  // A token was destroyed: its features become 0.
  void clear(std::uint32_t position) noexcept;

  // Views over [first, first + size) for a RankingContext (empty for disabled features).
  std::span<const float> recent(std::uint32_t first, std::uint32_t size) const noexcept;
  std::span<const float> value_ranges(std::uint32_t first, std::uint32_t size) const noexcept;
  KeyDigestView digests(std::uint32_t first, std::uint32_t size) const noexcept;

  std::uint32_t digest_dim() const noexcept { return digest_dim_; }
  // Heap bytes held (capacity).
  std::size_t bytes() const noexcept;

 private:
  void apply_pending_decay() noexcept;

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
};

}  // namespace kvtier::tier
