#include "node_budget.hpp"

#include <algorithm>
#include <string_view>
#include <vector>


namespace kvtier::daemon {
namespace {

// The config accepts only the four names (demote-evict, demote, evict, backpressure).
PressureRule parse_pressure_rule(std::string_view name) noexcept {
  return {name == "demote-evict" || name == "demote", name == "demote-evict" || name == "evict"};
}

}  // namespace


NodeBudget::NodeBudget(const config::PoolsSection& pools, std::function<void(std::uint32_t)> kick)
    : pools_(pools), rule_(parse_pressure_rule(pools.pressure)), kick_(std::move(kick)) {}

void NodeBudget::join(BudgetMember& member) { members_[member.client_id()] = &member; }

void NodeBudget::leave(std::uint32_t client_id) {
  members_.erase(client_id);
  waiting_.erase(client_id);
}

std::uint64_t NodeBudget::total_weight() const {
  std::uint64_t sum = 0;
  for (const auto& [id, channel] : members_) sum += channel->has_pool() ? channel->weight() : 0;
  return sum;
}

std::uint64_t NodeBudget::share_bytes(const BudgetMember& client) const {
  return share_of(client, total_weight());
}

std::uint64_t NodeBudget::share_of(const BudgetMember& client, std::uint64_t weights) const {
  const std::uint64_t total = pools_.ddr_bytes_total;
  if (total == 0 || weights == 0 || !client.has_pool()) return 0;
  // total·weight can exceed 64 bits (2^50 · 2^16); split total into quotient and remainder.
  const std::uint64_t w = client.weight();
  return total / weights * w + total % weights * w / weights;
}

Admission NodeBudget::admit(const BudgetMember& client, std::uint32_t wanted) {
  const std::uint64_t total = pools_.ddr_bytes_total;
  if (total == 0 || wanted == 0) return {wanted, shm::BackpressureReason::kNone};
  std::uint64_t used = 0;
  for (const auto& [id, channel] : members_) used += channel->ddr_bytes_used();
  const std::uint64_t per_row = client.bytes_per_slot();
  std::uint64_t fit = used >= total ? 0 : (total - used) / per_row;
  const std::uint64_t weights = total_weight();
  const std::uint64_t share = share_of(client, weights);
  const std::uint64_t held = client.ddr_bytes_used();
  ++admissions_;
  const std::uint64_t horizon = 8 * std::uint64_t{members_.size()};
  std::erase_if(waiting_, [&](const auto& entry) {
    auto it = members_.find(entry.first);
    return it == members_.end() || entry.second + horizon < admissions_ ||
           it->second->ddr_bytes_used() >= share_of(*it->second, weights);
  });
  const bool others_waiting = std::any_of(waiting_.begin(), waiting_.end(), [&](const auto& entry) {
    return entry.first != client.client_id();
  });
  if (others_waiting && held + std::uint64_t{wanted} * per_row > share) {
    fit = std::min(fit, held >= share ? 0 : (share - held) / per_row);
  }
  const std::uint32_t id = client.client_id();
  if (fit >= wanted) {
    waiting_.erase(id);
    return {wanted, shm::BackpressureReason::kNone};
  }
  if (held < share) waiting_[id] = admissions_;
  relieve(client, (wanted - fit) * per_row, weights);
  return {static_cast<std::uint32_t>(fit), shm::BackpressureReason::kNodeBudget};
}

void NodeBudget::relieve(const BudgetMember& requester, std::uint64_t missing_bytes, std::uint64_t weights) {
  if (!rule_.demote && !rule_.evict) return;
  // The part of the missing rows within the requester's share comes from the clients over theirs
  // (each giving at most what it holds above its share); the part beyond its share, from itself.
  const std::uint64_t held = requester.ddr_bytes_used();
  const std::uint64_t own_share = share_of(requester, weights);
  std::uint64_t from_others = std::min(missing_bytes, held < own_share ? own_share - held : 0);
  const std::uint64_t from_self = missing_bytes - from_others;
  std::map<std::uint32_t, std::uint64_t> give;
  for (const auto& [id, channel] : members_) {
    if (!channel->has_pool() || channel->relief_pending()) continue;
    const std::uint64_t used = channel->ddr_bytes_used();
    const std::uint64_t share = share_of(*channel, weights);
    const std::uint64_t excess = channel == &requester ? from_self : from_others == 0 ? 0 : used > share ? used - share : 0;
    if (excess >= channel->bytes_per_slot()) give[id] = excess;
  }
  if (give.empty()) return;

  // The lowest scores node-wide: each victim lists its lowest T1 tokens in the sequences that
  // can give under the rule (no more than it could give), then one ordering over all of them.
  std::vector<ReliefCandidate> candidates;
  for (const auto& [id, bytes] : give) {
    const BudgetMember& victim = *members_.at(id);
    victim.lowest_t1(static_cast<std::size_t>(std::min(bytes, missing_bytes) / victim.bytes_per_slot() + 1),
                     candidates);
  }
  std::sort(candidates.begin(), candidates.end(), [](const ReliefCandidate& a, const ReliefCandidate& b) {
    return a.score != b.score ? a.score < b.score : a.client_id < b.client_id;
  });
  std::map<std::uint32_t, std::vector<ReliefCandidate>> chosen;
  for (const ReliefCandidate& c : candidates) {
    if (missing_bytes == 0) break;
    const std::uint64_t per_row = members_.at(c.client_id)->bytes_per_slot();
    std::uint64_t& left = give[c.client_id];
    const bool other = c.client_id != requester.client_id();
    if (left < per_row || (other && from_others < per_row)) continue;
    left -= per_row;
    if (other) from_others -= per_row;
    missing_bytes -= std::min(missing_bytes, per_row);
    chosen[c.client_id].push_back(c);
  }
  for (auto& [id, tokens] : chosen) {
    members_.at(id)->request_relief(std::move(tokens));
    // The requester is inside its own turn: it sends its relief on its next free one.
    if (id != requester.client_id()) kick_(id);
  }
}

}  // namespace kvtier::daemon
