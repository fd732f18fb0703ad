#include "relief_queue.hpp"

#include <algorithm>

#include "kvtier/base/check.hpp"

namespace kvtier::daemon {

ReliefQueue::Batch ReliefQueue::take_sequence() {
  KVTIER_CHECK(!tokens_.empty(), "relief taken from an empty queue");
  return take(tokens_.front().sequence);
}

std::optional<ReliefQueue::Batch> ReliefQueue::take_sequence(std::span<const std::uint32_t> busy) {
  const auto it = std::find_if(tokens_.begin(), tokens_.end(), [&](const ReliefCandidate& c) {
    return std::find(busy.begin(), busy.end(), c.sequence) == busy.end();
  });
  if (it == tokens_.end()) return std::nullopt;
  return take(it->sequence);
}

ReliefQueue::Batch ReliefQueue::take(std::uint32_t sequence) {
  Batch batch{sequence, {}};
  std::erase_if(tokens_, [&](const ReliefCandidate& c) {
    if (c.sequence != batch.sequence) return false;
    batch.positions.push_back(c.position);
    return true;
  });
  return batch;
}

}  // namespace kvtier::daemon
