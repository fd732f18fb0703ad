// Two-phase commit of one decision's moves against a client's T1 pool (DESIGN.md §4.1: a pool
// slot is never reused while a plan that reads it is unacknowledged).
//
//   prepare   every move into T1 gets a fresh destination slot; every move out of T1 names the
//             source slot from the committed SlotMap (nothing is freed yet). When the pool runs
//             out, the remaining moves into T1 are trimmed from the plan: those tokens keep their
//             old tier (a T0 token stays in HBM: backpressure, counted in trimmed()), never lost.
//             Slots freed by this same plan are not reused by it: they are still being read.
//   commit    the client acknowledged: the slot map takes the destinations, source slots return
//             to the allocator. Then call SequenceTiers::commit(accepted()).
//   rollback  no acknowledgement: destination slots return to the allocator; the slot map and the
//             sequence (SequenceTiers::rollback()) keep the old placement.
// Destroying an open transaction rolls it back.
//
// Only the T1 (DDR) pool is handled; T2 slots come with a T2 policy.
// Thread-safety: none. The allocator must outlive the transaction.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvtier/protocol/error.hpp"
#include "kvtier/tier/slot_allocator.hpp"
#include "kvtier/tier/slot_map.hpp"
#include "kvtier/tier/tier_move.hpp"

namespace kvtier::tier {

struct PlannedMove {
  std::uint32_t position = 0;
  Tier from = Tier::kT0;
  Tier to = Tier::kT0;
  std::uint32_t source_slot = kNoSlot;       // pool slot read (from == T1)
  std::uint32_t destination_slot = kNoSlot;  // pool slot written (to == T1)
  friend bool operator==(const PlannedMove&, const PlannedMove&) = default;
};

class PlanTransaction {
 public:
  // kInternal (and nothing allocated) if a move out of T1 has no slot in `slots`, which means
  // the slot map and the sequence disagree: a daemon bug.
  static Result<PlanTransaction> prepare(std::span<const TierMove> moves, const SlotMap& slots,
                                         SlotAllocator& allocator);

  PlanTransaction(PlanTransaction&& other) noexcept;
  PlanTransaction& operator=(PlanTransaction&& other) noexcept;
  PlanTransaction(const PlanTransaction&) = delete;
  PlanTransaction& operator=(const PlanTransaction&) = delete;
  ~PlanTransaction();

  // The plan to send: accepted moves with their slots, in the input (position) order.
  std::span<const PlannedMove> planned() const noexcept { return planned_; }
  // The same moves without slots, for SequenceTiers::commit(accepted).
  std::span<const TierMove> accepted() const noexcept { return accepted_; }
  // Moves into T1 dropped for lack of a slot.
  std::uint32_t trimmed() const noexcept { return trimmed_; }
  // True until commit() or rollback().
  bool open() const noexcept { return allocator_ != nullptr; }

  // Precondition (abort): open(). Returns the first slot-release error, if any (a daemon bug);
  // the transaction is closed either way.
  Status commit(SlotMap& slots);
  Status rollback();

 private:
  explicit PlanTransaction(SlotAllocator& allocator) : allocator_(&allocator) {}

  SlotAllocator* allocator_;  // not owned; nullptr once closed
  std::vector<PlannedMove> planned_;
  std::vector<TierMove> accepted_;
  std::uint32_t trimmed_ = 0;
};

}  // namespace kvtier::tier
