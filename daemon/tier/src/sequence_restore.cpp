// SequenceTiers::restore: a sequence rebuilt from its client's record after a daemon restart.
#include <string>

#include "kvtier/tier/sequence_tiers.hpp"

namespace kvtier::tier {

Result<SequenceTiers> SequenceTiers::restore(std::uint32_t prompt_length, const TierParams& params,
                                             std::uint32_t max_tokens, std::uint32_t length,
                                             std::span<const std::pair<std::uint32_t, Tier>> placed) {
  auto made = create(prompt_length, params, max_tokens);
  if (!made) return made;
  if (length < prompt_length || length > max_tokens) {
    return make_error(Errc::kInvalidArgument, "restored sequence of " + std::to_string(length) +
                                                  " tokens: need prompt_length " + std::to_string(prompt_length) +
                                                  " <= length <= max_tokens " + std::to_string(max_tokens));
  }
  SequenceTiers& tiers = *made;
  tiers.extend_to(length);
  std::int64_t previous = -1;
  for (const auto& [position, tier] : placed) {
    const std::string where = "restored position " + std::to_string(position);
    if (position >= length || static_cast<std::int64_t>(position) <= previous) {
      return make_error(Errc::kInvalidArgument, where + ": beyond the sequence's " + std::to_string(length) +
                                                    " tokens or not ascending");
    }
    previous = position;
    if (tier == Tier::kT0 || tier_index(tier) >= kTierCount) {
      return make_error(Errc::kInvalidArgument, where + ": not a host or evicted tier");
    }
    if (tiers.is_protected(position)) {
      return make_error(Errc::kInvalidArgument, where + ": protected tokens are always T0");
    }
    if (tier == Tier::kT2 && !int8_enabled(params)) {
      return make_error(Errc::kInvalidArgument, where + ": T2 under parameters without the int8 tier");
    }
    tiers.tiers_[position] = tier;
    --tiers.counts_[tier_index(Tier::kT0)];
    ++tiers.counts_[tier_index(tier)];
    if (tier == Tier::kT3) ++tiers.destroyed_;
  }
  return made;
}

}  // namespace kvtier::tier
