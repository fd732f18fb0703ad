#include "relief_queue.hpp"

#include "kvtier/protocol/check.hpp"

namespace kvtier::daemon {

ReliefQueue::Batch ReliefQueue::take_sequence() {
  KVTIER_CHECK(!tokens_.empty(), "relief taken from an empty queue");
  Batch batch{tokens_.front().sequence, {}};
  std::erase_if(tokens_, [&](const ReliefCandidate& c) {
    if (c.sequence != batch.sequence) return false;
    batch.positions.push_back(c.position);
    return true;
  });
  return batch;
}

}  // namespace kvtier::daemon
