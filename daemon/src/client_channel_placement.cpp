// ClientChannel, the admin's view of one sequence: its committed placement as runs of positions
// in one tier, a page at a time (PlacementRequest, PROTOCOL.md §4 "Events and placement").
#include "client_channel.hpp"

namespace kvtier::daemon {

Result<PlacementPage> ClientChannel::placement(std::uint32_t sequence_id, std::uint32_t first_position,
                                               std::uint32_t max_runs) const {
  auto it = sequences_.find(sequence_id);
  if (it == sequences_.end()) {
    if (lent_.contains(sequence_id)) {
      return make_error(Errc::kBadState, "sequence " + std::to_string(sequence_id) + " of client " +
                                             std::to_string(client_id_) +
                                             " was exported: its placement is the adopter's sequence's");
    }
    return make_error(Errc::kNotFound, "client " + std::to_string(client_id_) + " has no sequence " +
                                           std::to_string(sequence_id));
  }
  const tier::SequenceTiers& tiers = it->second.tiers;
  PlacementPage page;
  page.length = tiers.length();
  page.first_position = first_position;
  if (first_position > page.length) {
    return make_error(Errc::kInvalidArgument, "PlacementRequest.firstPosition=" + std::to_string(first_position) +
                                                  " is beyond the sequence's length " + std::to_string(page.length));
  }
  // One pass over the page's positions: the request's cost is bounded by the sequence's length
  // (1M tokens at most), and the reply by max_runs. Runs end at a tier change or the end, so a
  // page never splits a run.
  std::uint32_t position = first_position;
  while (position < page.length && page.runs.size() < max_runs) {
    const tier::Tier tier = tiers.tier_of(position);
    std::uint32_t end = position + 1;
    while (end < page.length && tiers.tier_of(end) == tier) ++end;
    page.runs.push_back(TierRun{tier, end - position});
    position = end;
  }
  page.next_position = position;
  return page;
}

}  // namespace kvtier::daemon
