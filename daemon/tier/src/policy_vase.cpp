// vase: value-range reservation + weighted sampling without replacement ∝ recent attention
// (policy.hpp documents the definition).
#include <algorithm>
#include <limits>

#include "kvtier/base/check.hpp"
#include "kvtier/tier/cut_selector.hpp"
#include "policies.hpp"
#include "race_keys.hpp"

namespace kvtier::tier::detail {
namespace {

// n_large: the reserved share of the T0 budget, never above it.
std::uint32_t reserved_count(const RankingContext& ctx) {
  const TierParams& p = *ctx.params;
  const std::uint32_t wanted = p.value_protect_tokens != 0
                                   ? p.value_protect_tokens
                                   : floor_share(p.value_protect_ratio, ctx.hbm_budget);
  return std::min(wanted, ctx.hbm_budget);
}

}  // namespace

std::span<const float> VasePolicy::rank(const RankingContext& ctx,
                                        std::vector<float>& scratch) const {
  const std::size_t size = ctx.tiers.size();
  KVTIER_CHECK(ctx.recent.size() == size && ctx.value_ranges.size() == size,
          "vase: features missing from the ranking context");
  scratch.resize(size);

  // The n_large candidates with the largest value range (ties: the newer one) are reserved: the
  // lowest of them is the cut at rank candidates - n_large.
  const std::uint32_t reserved = reserved_count(ctx);
  CutPoint cut;  // rank == n: nothing reserved
  if (reserved > 0) {
    CutSelector selector;
    const std::uint32_t n = selector.count(ctx.value_ranges, tier_bytes(ctx.tiers),
                                           ctx.candidate_mask);
    KVTIER_CHECK(n == ctx.candidates, "vase: candidate count mismatch");
    const std::uint32_t rank = n - reserved;
    selector.cuts({&rank, 1}, {&cut, 1});
  }

  // Exponential races (race_keys.hpp): E ~ Exp(1); a token with weight a wins at time E / a, so
  // a / E ranks the sampling order (a = 0 never wins: key 0). Reserved tokens get +inf instead,
  // in the same pass.
  default_race_loops().keys(draw_prefix(ctx.params->seed, ctx.step), ctx.first_position,
                            ctx.recent.data(), reserved > 0 ? ctx.value_ranges.data() : nullptr,
                            cut, scratch.data(), size);
  return scratch;
}

}  // namespace kvtier::tier::detail
