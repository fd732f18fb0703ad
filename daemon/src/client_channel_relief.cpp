// ClientChannel, the NodeBudget's side (node_budget.hpp): what this client holds, its lowest
// T1 tokens, and turning relief the budget asked for into a plan (T1 -> T2 or T1 -> T3).
#include <algorithm>
#include <optional>
#include <vector>

#include "client_channel.hpp"

namespace kvtier::daemon {

std::uint64_t ClientChannel::ddr_bytes_used() const noexcept {
  return allocator_ ? std::uint64_t{allocator_->used()} * bytes_per_slot_ : 0;
}

bool ClientChannel::relief_pending() const noexcept {
  const std::span<const PlanOutbox::Plan> plans = outbox_.in_flight();
  return !relief_.empty() ||
         std::any_of(plans.begin(), plans.end(), [](const PlanOutbox::Plan& p) { return p.kind == PlanKind::kRelief; });
}

bool ClientChannel::can_demote(const Sequence& sequence) const {
  return budget_.rule().demote && int8_allocator_ &&
         int8_allocator_->available_blocks() > 0 && tier::int8_enabled(sequence.tiers.params());
}

std::uint32_t ClientChannel::eviction_room(const Sequence& sequence) const {
  return budget_.rule().evict ? sequence.tiers.eviction_headroom() : 0;
}

void ClientChannel::lowest_t1(std::size_t k, std::vector<ReliefCandidate>& out) const {
  std::vector<tier::ScoredPosition> lowest;
  for (const auto& [id, sequence] : sequences_) {
    // A sequence whose decision is in flight is left alone: its placement is about to change.
    // One that can neither demote nor evict has nothing to give.
    // Nor is one frozen for export or still arriving from another client.
    const bool frozen = sequence.handoff == HandoffState::kExported || sequence.handoff == HandoffState::kReceiving;
    if (frozen || sequence.tiers.has_pending() || (!can_demote(sequence) && eviction_room(sequence) == 0)) continue;
    lowest.clear();
    sequence.tiers.lowest_in_tier(tier::Tier::kT1, k, lowest);
    for (const tier::ScoredPosition& p : lowest) out.push_back(ReliefCandidate{p.score, client_id_, id, p.position});
  }
}

void ClientChannel::request_relief(std::vector<ReliefCandidate> tokens) {
  relief_.add(tokens);
}

Result<bool> ClientChannel::send_relief() {
  // One sequence per plan: take the queued tokens of the first sequence still open whose own
  // plan is not in flight (the others keep theirs queued for a later turn).
  std::vector<std::uint32_t> busy;
  for (const PlanOutbox::Plan& plan : outbox_.in_flight()) busy.push_back(plan.sequence);
  while (!relief_.empty()) {
    std::optional<ReliefQueue::Batch> taken = relief_.take_sequence(busy);
    if (!taken) return false;
    ReliefQueue::Batch& batch = *taken;
    const std::uint32_t sequence_id = batch.sequence;
    std::vector<std::uint32_t>& positions = batch.positions;
    auto it = sequences_.find(sequence_id);
    if (it == sequences_.end() || it->second.handoff == HandoffState::kExported ||
        it->second.handoff == HandoffState::kReceiving) {
      continue;
    }
    Sequence& sequence = it->second;
    if (can_demote(sequence)) {
      // Int8 blocks are written once and never refilled, so a relief of k tokens demotes whole
      // blocks: the sequence's lowest round_up(k, G) T1 tokens (those listed are among them
      // unless they moved since), giving back a little more than asked instead of wasting rows.
      const std::size_t group = int8_allocator_->group();
      std::vector<tier::ScoredPosition> lowest;
      sequence.tiers.lowest_in_tier(tier::Tier::kT1, (positions.size() + group - 1) / group * group, lowest);
      positions.clear();
      for (const tier::ScoredPosition& p : lowest) positions.push_back(p.position);
    }
    std::sort(positions.begin(), positions.end());
    // Demote to int8 while blocks last (only sequences that opted into T2: the others stay
    // exact), then evict within the sequence's eviction budget; tokens that left T1 since they
    // were listed are skipped.
    std::uint64_t t2_room =
        can_demote(sequence) ? std::uint64_t{int8_allocator_->available_blocks()} * int8_allocator_->group() : 0;
    std::uint32_t t3_room = eviction_room(sequence);
    std::vector<tier::TierMove> moves;
    for (std::uint32_t position : positions) {
      if (position >= sequence.tiers.length() || sequence.tiers.tier_of(position) != tier::Tier::kT1 ||
          sequence.tiers.is_protected(position)) {
        continue;
      }
      if (t2_room > 0) {
        --t2_room;
        moves.push_back(tier::TierMove{position, tier::Tier::kT1, tier::Tier::kT2});
      } else if (t3_room > 0) {
        --t3_room;
        moves.push_back(tier::TierMove{position, tier::Tier::kT1, tier::Tier::kT3});
      }
    }
    if (moves.empty()) continue;
    if (auto ok = sequence.tiers.propose(moves); !ok) return tl::unexpected(ok.error());
    auto sent = send_pending(sequence_id, sequence, moves, true);
    if (!sent || *sent) return sent;
  }
  return false;
}

}  // namespace kvtier::daemon
