// SequenceTiers' hooks for the node-wide pressure cascade: explicit moves (propose), the eviction
// headroom and victim candidates (lowest_in_tier). See sequence_tiers.hpp for the contracts.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "budget.hpp"
#include "kvtier/tier/sequence_tiers.hpp"

namespace kvtier::tier {
namespace {

Status bad_move(std::size_t index, const TierMove& move, std::string_view why) {
  return make_error(Errc::kInvalidArgument,
                    "proposed move " + std::to_string(index) + " (position " +
                        std::to_string(move.position) + ", " + std::string(tier_name(move.from)) +
                        " -> " + std::string(tier_name(move.to)) + "): " + std::string(why));
}

// The cascade only ever pushes tokens down from the host tiers; promotions and anything touching
// T0 (which the daemon cannot read) belong to decide().
bool cascade_move(const TierMove& move) noexcept {
  return (move.from == Tier::kT1 && (move.to == Tier::kT2 || move.to == Tier::kT3)) ||
         (move.from == Tier::kT2 && move.to == Tier::kT3);
}

// (score, position) ascending.
bool ranks_lower(const ScoredPosition& a, const ScoredPosition& b) noexcept {
  return a.score < b.score || (a.score == b.score && a.position < b.position);
}

}  // namespace

Status SequenceTiers::check_proposal(std::span<const TierMove> moves) const {
  std::uint32_t destroyed = 0;
  for (std::size_t i = 0; i < moves.size(); ++i) {
    const TierMove& move = moves[i];
    if (i > 0 && move.position <= moves[i - 1].position) {
      return bad_move(i, move, "positions must be strictly ascending");
    }
    if (move.position >= length() || is_protected(move.position)) {
      return bad_move(i, move, "not a managed position");
    }
    const Tier now = tiers_[move.position];
    if (now != move.from) {
      return bad_move(i, move, "the token is in " + std::string(tier_name(now)));
    }
    if (!cascade_move(move)) {
      return bad_move(i, move, "only T1 -> T2, T1 -> T3 and T2 -> T3 can be proposed");
    }
    if (move.to == Tier::kT2 && !int8_enabled(params_)) {
      return bad_move(i, move, "T2 is off for this sequence (int8_ratio and int8_tokens are 0)");
    }
    destroyed += move.to == Tier::kT3 ? 1u : 0u;
  }
  const std::uint32_t headroom = eviction_headroom();
  if (destroyed > headroom) {
    return make_error(Errc::kInvalidArgument,
                      "proposal destroys " + std::to_string(destroyed) +
                          " tokens, the eviction headroom is " + std::to_string(headroom));
  }
  return {};
}

Status SequenceTiers::propose(std::span<const TierMove> moves) {
  if (pending_.has_value()) {
    return make_error(Errc::kBadState, "propose() while a decision is pending");
  }
  if (auto status = check_proposal(moves); !status) return status;
  Pending& pending = pending_.emplace();
  pending.moves = allocate_moves(std::max<std::size_t>(moves.size(), 1));
  std::copy(moves.begin(), moves.end(), pending.moves.get());
  Decision& d = pending.decision;
  d.moves = {pending.moves.get(), moves.size()};
  d.candidates = static_cast<std::uint32_t>(moves.size());
  d.evict_count = static_cast<std::uint32_t>(std::count_if(
      moves.begin(), moves.end(), [](const TierMove& m) { return m.to == Tier::kT3; }));
  return {};
}

std::uint32_t SequenceTiers::eviction_headroom() const noexcept {
  if (params_.mode == EvictionMode::kCumulative) {
    return detail::cumulative_headroom(params_, managed(), destroyed_);
  }
  const bool prototype = params_.mode == EvictionMode::kPaperPrototype;
  const std::uint32_t n = candidate_count(prototype);
  if (prototype && n < kPrototypeMinCandidates) return 0;  // decide() would skip the round
  return detail::budget_for(params_, n, managed(), destroyed_).evict;
}

std::size_t SequenceTiers::lowest_in_tier(Tier tier, std::size_t k,
                                          std::vector<ScoredPosition>& out) const {
  if (k == 0 || !(tier == Tier::kT0 || tier == Tier::kT1 || tier == Tier::kT2)) return 0;
  // out's tail is a max-heap of the k lowest seen so far: its front is the highest kept, the one
  // a lower token replaces. Positions arrive ascending, so a later token with an equal score never
  // displaces an earlier one.
  const std::size_t base = out.size();
  const auto heap = [&out, base] { return out.begin() + static_cast<std::ptrdiff_t>(base); };
  const std::uint32_t last = managed_last();
  for (std::uint32_t pos = managed_first(); pos < last; ++pos) {
    if (tiers_[pos] != tier) continue;
    const ScoredPosition item{scores_[pos], pos};
    if (out.size() - base < k) {
      out.push_back(item);
      std::push_heap(heap(), out.end(), ranks_lower);
    } else if (ranks_lower(item, out[base])) {
      std::pop_heap(heap(), out.end(), ranks_lower);
      out.back() = item;
      std::push_heap(heap(), out.end(), ranks_lower);
    }
  }
  std::sort_heap(heap(), out.end(), ranks_lower);
  return out.size() - base;
}

}  // namespace kvtier::tier
