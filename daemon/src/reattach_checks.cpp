#include "reattach_checks.hpp"

#include <algorithm>
#include <set>
#include <string>
#include <utility>

namespace kvtier::daemon {
namespace {

// Appends (position, tier) of `positions` to `out`, checking the list pair, each position
// against `length` (before a slot map grows to it) and each slot.
Status collect(capnp::List<std::uint32_t>::Reader positions, capnp::List<std::uint32_t>::Reader slots,
               tier::Tier tier, std::uint32_t length, std::uint32_t slot_count, std::vector<bool>& held,
               tier::SlotMap* map, std::vector<std::pair<std::uint32_t, tier::Tier>>& out) {
  const std::string name = std::string(tier::tier_name(tier));
  if (map != nullptr && positions.size() != slots.size()) {
    return make_error(Errc::kInvalidArgument, name + " lists " + std::to_string(positions.size()) + " positions and " +
                                                  std::to_string(slots.size()) + " slots");
  }
  for (unsigned i = 0; i < positions.size(); ++i) {
    const std::uint32_t position = positions[i];
    if (i > 0 && position <= positions[i - 1]) {
      return make_error(Errc::kInvalidArgument, name + " positions are not ascending at " + std::to_string(position));
    }
    if (position >= length) {
      return make_error(Errc::kInvalidArgument, name + " position " + std::to_string(position) +
                                                    " is beyond the sequence's " + std::to_string(length) + " tokens");
    }
    out.emplace_back(position, tier);
    if (map == nullptr) continue;
    const std::uint32_t slot = slots[i];
    if (slot >= slot_count) {
      return make_error(Errc::kInvalidArgument, name + " slot " + std::to_string(slot) + " of position " +
                                                    std::to_string(position) + " is beyond the pool's " +
                                                    std::to_string(slot_count) + " slots");
    }
    if (held[slot]) {
      return make_error(Errc::kInvalidArgument, name + " slot " + std::to_string(slot) + " is held twice");
    }
    held[slot] = true;
    map->set(position, slot);
  }
  return {};
}

Result<RestoredSequence> restore_one(wire::ReattachedSequence::Reader s, const PoolRequest& pools,
                                     const config::DaemonConfig& config, std::uint32_t client_id,
                                     std::vector<bool>& t1_held, std::vector<bool>& t2_held) {
  const std::uint32_t id = s.getSequenceId();
  auto open = open_request_from_wire(s.getPromptLength(), s.getTiering(), config, pools.int8.has_value(),
                                     (std::uint64_t{client_id} << 32) | id);
  if (!open) return tl::unexpected(open.error());
  const std::uint32_t length = s.getLength();
  if (length > config.limits.max_tokens_per_sequence) {
    return make_error(Errc::kInvalidArgument, "length " + std::to_string(length) +
                                                  " exceeds limits.max_tokens_per_sequence=" +
                                                  std::to_string(config.limits.max_tokens_per_sequence));
  }
  tier::SlotMap t1, t2;
  std::vector<std::pair<std::uint32_t, tier::Tier>> placed;
  const std::uint32_t int8_slots = pools.int8 ? pools.int8->slots() : 0;
  if (auto ok = collect(s.getT1Positions(), s.getT1Slots(), tier::Tier::kT1, length, pools.ddr.slots, t1_held, &t1, placed);
      !ok) {
    return tl::unexpected(ok.error());
  }
  if (auto ok = collect(s.getT2Positions(), s.getT2Slots(), tier::Tier::kT2, length, int8_slots, t2_held, &t2, placed);
      !ok) {
    return tl::unexpected(ok.error());
  }
  if (auto ok = collect(s.getT3Positions(), {}, tier::Tier::kT3, length, 0, t2_held, nullptr, placed); !ok) {
    return tl::unexpected(ok.error());
  }
  std::sort(placed.begin(), placed.end());
  auto tiers = tier::SequenceTiers::restore(open->prompt_length, open->params, config.limits.max_tokens_per_sequence,
                                            length, placed);
  if (!tiers) return tl::unexpected(tiers.error());
  return RestoredSequence{id, std::move(*tiers), std::move(t1), std::move(t2), open->digest_dim};
}

}  // namespace

Result<std::vector<RestoredSequence>> restore_sequences(wire::Reattach::Reader request, const PoolRequest& pools,
                                                        const config::DaemonConfig& config, std::uint32_t client_id) {
  const auto sequences = request.getSequences();
  if (sequences.size() > config.limits.max_sequences_per_client) {
    return make_error(Errc::kLimitExceeded, "Reattach lists " + std::to_string(sequences.size()) +
                                                " sequences, limit limits.max_sequences_per_client=" +
                                                std::to_string(config.limits.max_sequences_per_client));
  }
  std::vector<bool> t1_held(pools.ddr.slots, false);
  std::vector<bool> t2_held(pools.int8 ? pools.int8->slots() : 0, false);
  std::set<std::uint32_t> ids;
  std::vector<RestoredSequence> out;
  for (const auto s : sequences) {
    const std::uint32_t id = s.getSequenceId();
    if (id == 0 || !ids.insert(id).second) {
      return make_error(Errc::kInvalidArgument, "Reattach lists sequence id " + std::to_string(id) +
                                                    (id == 0 ? " (ids start at 1)" : " twice"));
    }
    auto restored = restore_one(s, pools, config, client_id, t1_held, t2_held);
    if (!restored) {
      return make_error(restored.error().code,
                        "Reattach sequence " + std::to_string(id) + ": " + restored.error().message);
    }
    out.push_back(std::move(*restored));
  }
  return out;
}

}  // namespace kvtier::daemon
