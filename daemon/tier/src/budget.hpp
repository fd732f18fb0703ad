// Internal: the per-decision budgets of tier_params.hpp, shared by decide() and the pressure
// hooks (eviction_headroom) so both read the same formulas.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kvtier/tier/tier_params.hpp"

namespace kvtier::tier::detail {

struct Budget {
  std::uint32_t evict = 0;  // lowest-ranked candidates → T3
  std::uint32_t hbm = 0;    // highest-ranked survivors → T0
  std::uint32_t int8 = 0;   // lowest-ranked survivors not kept in T0 → T2
};

// hbm_tokens replaces the β·x product when set.
inline std::uint32_t hbm_share(const TierParams& p, std::uint32_t base) {
  return p.hbm_tokens != 0 ? std::min(p.hbm_tokens, base) : floor_share(p.hbm_ratio, base);
}

// kCumulative: tokens that may still be destroyed, max(0, allowed − destroyed), not clamped to
// the live candidates.
inline std::uint32_t cumulative_headroom(const TierParams& p, std::uint32_t managed,
                                         std::uint32_t destroyed) {
  const std::uint32_t allowed =
      p.evict_tokens != 0 ? p.evict_tokens : floor_share(p.evict_ratio, managed);
  return allowed > destroyed ? allowed - destroyed : 0;
}

// Budgets for n candidates out of `managed` managed positions, `destroyed` of them destroyed.
inline Budget budget_for(const TierParams& p, std::uint32_t n, std::uint32_t managed,
                         std::uint32_t destroyed) {
  Budget b;
  switch (p.mode) {
    case EvictionMode::kCumulative:
      // Non-compounding: the total destroyed never exceeds r of the managed chain.
      b.evict = std::min(cumulative_headroom(p, managed, destroyed), n);
      b.hbm = hbm_share(p, n - b.evict);
      break;
    case EvictionMode::kPaperAlgorithm:
      b.evict = p.evict_tokens != 0 ? std::min(p.evict_tokens, n) : floor_share(p.evict_ratio, n);
      b.hbm = hbm_share(p, n - b.evict);
      break;
    case EvictionMode::kPaperPrototype:
      b.evict = p.evict_tokens != 0 ? std::min(p.evict_tokens, n) : floor_share(p.evict_ratio, n);
      // The authors' n_keep = ⌊β·n⌋ uses n, not n − n_evict; it cannot exceed the survivors.
      b.hbm = std::min(hbm_share(p, n), n - b.evict);
      break;
  }
  // T2 takes the lowest of the survivors the plain split leaves outside T0 (validate() keeps
  // the int8 budget 0 in kPaperPrototype).
  const std::uint32_t below_t0 = n - b.evict - b.hbm;
  b.int8 = p.int8_tokens != 0 ? std::min(p.int8_tokens, below_t0)
                              : floor_share(p.int8_ratio, below_t0);
  return b;
}

}  // namespace kvtier::tier::detail
