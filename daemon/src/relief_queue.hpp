// ReliefQueue: the T1 tokens the NodeBudget asked one client to give back (node_budget.hpp,
// BudgetMember::request_relief), held until the client's next free turn and taken one sequence
// at a time, since a relief plan moves the tokens of one sequence.
//
// Thread-safety: data-plane thread only (like the ClientChannel that owns it).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "node_budget.hpp"

namespace kvtier::daemon {

class ReliefQueue {
 public:
  struct Batch {
    std::uint32_t sequence = 0;
    std::vector<std::uint32_t> positions;  // in the order asked
  };

  void add(std::span<const ReliefCandidate> tokens) { tokens_.insert(tokens_.end(), tokens.begin(), tokens.end()); }
  bool empty() const noexcept { return tokens_.empty(); }

  // Removes every queued token of the sequence asked for first and returns them.
  // Precondition (checked): !empty().
  Batch take_sequence();
  // The same for the first sequence asked for that is not in `busy` (sequences with a plan in
  // flight, whose tokens wait for a later turn); nullopt when every queued one is busy.
  std::optional<Batch> take_sequence(std::span<const std::uint32_t> busy);

 private:
  Batch take(std::uint32_t sequence);

  std::vector<ReliefCandidate> tokens_;
};

}  // namespace kvtier::daemon
