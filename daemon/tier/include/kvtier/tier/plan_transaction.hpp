// Two-phase commit of one decision's moves against a client's host pools, T1 (DDR) and T2 (int8)
// (DESIGN.md §4.1: a pool slot is never reused while a plan that reads it is unacknowledged).
//
//   prepare   every move into T1 gets a fresh T1 slot, every move into T2 a fresh T2 slot; every
//             move out of T1 or T2 names its source slot from that tier's committed SlotMap
//             (nothing is freed yet). Moves into T2 are packed, in move order, into fresh blocks
//             of group() rows (BlockSlotAllocator), the plan's last block partly used; the daemon
//             quantizes each block's T1 source rows into it (t2_blocks()) before sending the plan.
//             When a pool runs out (or the plan reaches t1_limit new T1 slots), the remaining
//             moves into that tier are trimmed from the plan: those tokens keep their old tier
//             (a T0 token stays in HBM, a T1 token in DDR: backpressure, counted in trimmed() and
//             trimmed_t2()), never lost. Slots freed by this same plan are not reused by it: they
//             are still being read.
//   commit    the client acknowledged: the slot maps take the destinations, source slots return
//             to their allocators. Then call SequenceTiers::commit(accepted()).
//   rollback  no acknowledgement: destination slots return to their allocators; the slot maps
//             and the sequence (SequenceTiers::rollback()) keep the old placement.
// Destroying an open transaction rolls it back.
//
// Thread-safety: none. The allocators must outlive the transaction.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvtier/base/error.hpp"
#include "kvtier/tier/block_slot_allocator.hpp"
#include "kvtier/tier/slot_allocator.hpp"
#include "kvtier/tier/slot_map.hpp"
#include "kvtier/tier/tier_move.hpp"

namespace kvtier::tier {

struct PlannedMove {
  std::uint32_t position = 0;
  Tier from = Tier::kT0;
  Tier to = Tier::kT0;
  std::uint32_t source_slot = kNoSlot;       // slot read in the `from` tier's pool (T1 or T2)
  std::uint32_t destination_slot = kNoSlot;  // slot written in the `to` tier's pool (T1 or T2)
  friend bool operator==(const PlannedMove&, const PlannedMove&) = default;
};

// The pools one plan draws on. The maps hold the committed placement of the plan's sequence.
struct PoolSlots {
  const SlotMap& t1_map;
  SlotAllocator& t1;
  const SlotMap* t2_map = nullptr;  // needed when a move leaves T2
  BlockSlotAllocator* t2 = nullptr;  // none: every move into T2 is trimmed
  // Most new T1 slots this plan may take (the daemon's node-wide share); moves into T1 beyond it
  // are trimmed as if the pool were full.
  std::uint32_t t1_limit = 0xFFFFFFFFu;
};

// One T2 block the plan fills: slots [first_slot, first_slot + rows), written by the `rows`
// moves into T2 that start at planned()[first_move] (consecutive among the plan's moves into T2;
// other moves may lie between them in planned()), row r by the r-th of them.
struct T2Block {
  std::uint32_t first_slot = 0;
  std::uint32_t rows = 0;
  std::uint32_t first_move = 0;
  friend bool operator==(const T2Block&, const T2Block&) = default;
};

class PlanTransaction {
 public:
  // kInternal (and nothing allocated) when the plan and the committed state disagree, a daemon
  // bug: a move out of T1 or T2 whose token has no slot in that tier's map (or no T2 map or
  // allocator was given), a move into T2 from anywhere but T1, or a move from T2 to T1.
  static Result<PlanTransaction> prepare(std::span<const TierMove> moves, const PoolSlots& pools);
  // T1 only: prepare(moves, PoolSlots{slots, allocator}). Moves into T2 are trimmed.
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
  // The T2 blocks this plan fills, in move order.
  std::span<const T2Block> t2_blocks() const noexcept { return t2_blocks_; }
  // Moves into T1 dropped for lack of a slot or beyond t1_limit.
  std::uint32_t trimmed() const noexcept { return trimmed_; }
  // Moves into T2 dropped for lack of a free block.
  std::uint32_t trimmed_t2() const noexcept { return trimmed_t2_; }
  // True until commit() or rollback().
  bool open() const noexcept { return t1_ != nullptr; }

  // Precondition (abort): open(), and t2_map != nullptr if a planned move leaves or enters T2.
  // Returns the first slot-release error, if any (a daemon bug); the transaction is closed either
  // way.
  Status commit(SlotMap& t1_map, SlotMap* t2_map);
  // commit(slots, nullptr), for plans without T2.
  Status commit(SlotMap& slots);
  Status rollback();

 private:
  PlanTransaction(SlotAllocator& t1, BlockSlotAllocator* t2) : t1_(&t1), t2_(t2) {}

  SlotAllocator* t1_;       // not owned; nullptr once closed
  BlockSlotAllocator* t2_;  // not owned; may be nullptr
  std::vector<PlannedMove> planned_;
  std::vector<TierMove> accepted_;
  std::vector<T2Block> t2_blocks_;
  std::uint32_t trimmed_ = 0;
  std::uint32_t trimmed_t2_ = 0;
  bool touches_t2_ = false;  // a planned move leaves or enters T2
};

}  // namespace kvtier::tier
