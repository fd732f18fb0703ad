// ClientChannel's side of a sequence hand-off (handoff.hpp): freezing an export, lending the
// tier state, adopting it into this client's pools, and resolving the hand-off plan.
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "client_channel.hpp"
#include "handoff_checks.hpp"

namespace kvtier::daemon {
namespace {

std::string name(std::uint32_t sequence_id) { return "sequence " + std::to_string(sequence_id); }

}  // namespace

Status ClientChannel::freeze(std::uint32_t sequence_id, std::span<const std::pair<std::uint32_t, std::uint32_t>> t0) {
  service();  // acknowledgements already published count
  auto it = sequences_.find(sequence_id);
  if (it == sequences_.end()) {
    const bool lent = lent_.contains(sequence_id);
    return make_error(lent ? Errc::kBadState : Errc::kNotFound,
                      lent ? name(sequence_id) + " is already exported" : "no open " + name(sequence_id));
  }
  Sequence& sequence = it->second;
  if (sequence.handoff == HandoffState::kExported || sequence.handoff == HandoffState::kReceiving) {
    return make_error(Errc::kBadState, name(sequence_id) + (sequence.handoff == HandoffState::kExported
                                                                 ? " is already exported"
                                                                 : " is still being handed to this client"));
  }
  if (const PlanOutbox::Plan* plan = outbox_.in_flight(sequence_id)) {
    return make_error(Errc::kBadState, "plan epoch " + std::to_string(plan->epoch) + " of " + name(sequence_id) +
                                           " is in flight: execute and acknowledge it, then export again");
  }
  if (auto ok = check_t0_matches(sequence.tiers, t0); !ok) return ok;
  const tier::SequenceTiers& tiers = sequence.tiers;
  for (const auto& [position, slot] : t0) sequence.cache_slots.set(position, slot);
  sequence.handoff = HandoffState::kExported;
  std::erase(owed_, sequence_id);
  log_.info("event=sequence_exported client_id={} sequence={} t0={} t1={} t2={}", client_id_, sequence_id, t0.size(),
            tiers.count(tier::Tier::kT1), tiers.count(tier::Tier::kT2));
  return {};
}

Result<HandoffNeeds> ClientChannel::needs(std::uint32_t sequence_id) const {
  auto it = sequences_.find(sequence_id);
  if (it == sequences_.end() || it->second.handoff != HandoffState::kExported) {
    return make_error(Errc::kNotFound, name(sequence_id) + " of client " + std::to_string(client_id_) +
                                           " is not waiting for an adopter");
  }
  const Sequence& sequence = it->second;
  HandoffNeeds needs;
  needs.live_tokens = sequence.tiers.length() - sequence.tiers.count(tier::Tier::kT3);
  needs.t1_rows = sequence.tiers.count(tier::Tier::kT1);
  needs.row_bytes = pool_view_->geometry().row_bytes();
  if (int8_allocator_) {
    needs.int8_group = int8_allocator_->group();
    std::set<std::uint32_t> blocks;
    for (std::uint32_t position = 0; position < sequence.t2_slots.size(); ++position) {
      const std::uint32_t slot = sequence.t2_slots.slot_of(position);
      if (slot != tier::kNoSlot) blocks.insert(slot / needs.int8_group);
    }
    needs.t2_blocks = static_cast<std::uint32_t>(blocks.size());
  }
  return needs;
}

Status ClientChannel::can_adopt(const HandoffNeeds& needs) const {
  if (!allocator_) return make_error(Errc::kBadState, "AdoptSequence before RegisterModel");
  AdopterRoom room;
  room.row_bytes = pool_view_->geometry().row_bytes();
  room.plan_ring_records = outbox_.capacity();
  room.free_rows = allocator_->available();
  if (int8_allocator_) {
    room.int8_group = int8_allocator_->group();
    room.free_int8_blocks = int8_allocator_->available_blocks();
  }
  return check_adopt_room(needs, room);
}

HandoffLoan ClientChannel::lend(std::uint32_t sequence_id, const HandoffOrigin& origin) {
  auto node = sequences_.extract(sequence_id);
  Sequence& sequence = node.mapped();
  Lent& lent = lent_[sequence_id];
  lent = Lent{HandoffState::kLent,         std::move(sequence.slots), std::move(sequence.t2_slots),
              std::move(sequence.cache_slots), sequence.last_step,    sequence.digest_dim,
              sequence.tiers.prompt_length()};
  return HandoffLoan{origin,
                     std::move(sequence.tiers),
                     lent.last_step,
                     lent.digest_dim,
                     &lent.slots,
                     &lent.t2_slots,
                     &lent.cache_slots,
                     &*pool_view_,
                     int8_view_ ? &*int8_view_ : nullptr,
                     int8_allocator_ ? int8_allocator_->group() : 0};
}

AdoptedSequence ClientChannel::adopt(std::uint32_t sequence_id, HandoffLoan loan) {
  Sequence sequence{std::move(loan.tiers), {}, {}, loan.last_step, loan.digest_dim, HandoffState::kReceiving, {}};
  const std::uint32_t layers = pool_view_->geometry().num_layers;
  // T2: one block here per exporter block, the sequence's rows packed in position order. A row
  // is self-contained given its block's key parameters, so copying those and the rows gives
  // bit-identical dequantized values without quantizing again.
  if (loan.int8 != nullptr) {
    std::map<std::uint32_t, std::vector<std::uint32_t>> by_block;  // exporter block -> positions
    for (std::uint32_t position = 0; position < loan.t2->size(); ++position) {
      const std::uint32_t slot = loan.t2->slot_of(position);
      if (slot != tier::kNoSlot) by_block[slot / loan.int8_group].push_back(position);
    }
    const std::size_t params = int8_geometry_.key_params_bytes(), row = int8_geometry_.int8_row_bytes();
    for (const auto& [block, positions] : by_block) {
      const std::uint32_t first = *int8_allocator_->allocate_block(static_cast<std::uint32_t>(positions.size()));
      for (std::uint32_t layer = 0; layer < layers; ++layer) {
        const std::span<const std::byte> src = loan.int8->block(layer, block);
        const std::span<std::byte> dst = int8_view_->block(layer, first / loan.int8_group);
        std::memcpy(dst.data(), src.data(), params);
        for (std::size_t i = 0; i < positions.size(); ++i) {
          const std::uint32_t from_row = loan.t2->slot_of(positions[i]) % loan.int8_group;
          std::memcpy(dst.data() + params + i * row, src.data() + params + from_row * row, row);
        }
      }
      for (std::size_t i = 0; i < positions.size(); ++i) {
        sequence.t2_slots.set(positions[i], first + static_cast<std::uint32_t>(i));
      }
    }
  }
  const std::size_t row_bytes = pool_view_->geometry().row_bytes();
  for (std::uint32_t position = 0; position < loan.t1->size(); ++position) {
    const std::uint32_t from = loan.t1->slot_of(position);
    if (from == tier::kNoSlot) continue;
    const std::uint32_t to = *allocator_->allocate();
    for (std::uint32_t layer = 0; layer < layers; ++layer) {
      std::memcpy(pool_view_->row(layer, to).data(), loan.pool->row(layer, from).data(), row_bytes);
    }
    sequence.slots.set(position, to);
  }
  // The hand-off plan: every live token from the exporter, in position order.
  Incoming incoming{sequence_id, loan.origin, {}};
  const tier::SequenceTiers& tiers = sequence.tiers;
  for (std::uint32_t position = 0; position < tiers.length(); ++position) {
    switch (tiers.tier_of(position)) {
      case tier::Tier::kT0:
        incoming.moves.push_back({position, shm::kTierPeer, shm::kTierHbm, 0, loan.cache_slots->slot_of(position),
                                  shm::kNoSlot});
        break;
      case tier::Tier::kT1:
        incoming.moves.push_back(
            {position, shm::kTierPeer, shm::kTierDdr, 0, shm::kNoSlot, sequence.slots.slot_of(position)});
        break;
      case tier::Tier::kT2:
        incoming.moves.push_back(
            {position, shm::kTierPeer, shm::kTierInt8, 0, shm::kNoSlot, sequence.t2_slots.slot_of(position)});
        break;
      case tier::Tier::kT3: break;
    }
  }
  const AdoptedSequence adopted{tiers.prompt_length(), tiers.length(), sequence.digest_dim, tiers.params().policy,
                                tiers.params(), tiers.step()};
  log_.info("event=sequence_adopting client_id={} sequence={} from_client={} from_sequence={} moves={}", client_id_,
            sequence_id, loan.origin.exporter, loan.origin.sequence, incoming.moves.size());
  sequences_.emplace(sequence_id, std::move(sequence));
  incoming_.push_back(std::move(incoming));
  service();
  return adopted;
}

bool ClientChannel::send_handoff() {
  Incoming& incoming = incoming_.front();
  if (incoming.moves.empty()) {  // nothing live to move: done without a plan
    const Incoming done = std::move(incoming);
    resolve_handoff(done.sequence, done.origin, true);
    return true;
  }
  if (!outbox_.send_handoff(incoming.sequence, incoming.origin, incoming.moves)) return false;
  incoming_.pop_front();
  return true;
}

void ClientChannel::resolve_handoff(std::uint32_t sequence_id, const HandoffOrigin& origin, bool applied) {
  std::erase_if(incoming_, [sequence_id](const Incoming& in) { return in.sequence == sequence_id; });
  auto it = sequences_.find(sequence_id);
  if (it == sequences_.end()) return;
  log_.info("event=handoff_resolved client_id={} sequence={} from_client={} from_sequence={} applied={}", client_id_,
            sequence_id, origin.exporter, origin.sequence, applied);
  if (applied) {
    it->second.handoff = HandoffState::kAdopted;
    if (it->second.tiers.due()) owed_.push_back(sequence_id);
    on_handoff_(origin, std::nullopt);
    return;
  }
  release_slots(it->second.slots, it->second.t2_slots);
  std::optional<tier::SequenceTiers> returned(std::move(it->second.tiers));
  sequences_.erase(it);
  dropped_.insert(sequence_id);
  on_handoff_(origin, std::move(returned));
}

void ClientChannel::finish_loan(std::uint32_t sequence_id, std::optional<tier::SequenceTiers> returned) {
  auto it = lent_.find(sequence_id);
  if (it == lent_.end() || it->second.state != HandoffState::kLent) return;  // closed meanwhile
  Lent& lent = it->second;
  if (!returned) {
    release_slots(lent.slots, lent.t2_slots);
    lent.slots = {};
    lent.t2_slots = {};
    lent.cache_slots = {};
    lent.state = HandoffState::kHandedOff;
    return;
  }
  sequences_.emplace(sequence_id, Sequence{std::move(*returned), std::move(lent.slots), std::move(lent.t2_slots),
                                           lent.last_step, lent.digest_dim, HandoffState::kExported,
                                           std::move(lent.cache_slots)});
  lent_.erase(it);
}

void ClientChannel::abandon_handoff(std::uint32_t sequence_id) {
  std::optional<HandoffOrigin> origin;
  if (const PlanOutbox::Plan* plan = outbox_.in_flight(sequence_id); plan && plan->kind == PlanKind::kHandoff) {
    origin = plan->origin;
    (void)outbox_.take(sequence_id);
  }
  for (const Incoming& in : incoming_) {
    if (in.sequence == sequence_id) origin = in.origin;
  }
  if (origin) resolve_handoff(sequence_id, *origin, false);  // the exporter gets its sequence back
}

void ClientChannel::abandon_handoffs() {
  std::vector<std::uint32_t> sending;
  for (const PlanOutbox::Plan& plan : outbox_.in_flight()) {
    if (plan.kind == PlanKind::kHandoff) sending.push_back(plan.sequence);
  }
  for (const std::uint32_t sequence_id : sending) abandon_handoff(sequence_id);
  while (!incoming_.empty()) abandon_handoff(incoming_.front().sequence);
}

}  // namespace kvtier::daemon
