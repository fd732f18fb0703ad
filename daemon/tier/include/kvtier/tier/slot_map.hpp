// Per-sequence map from token position to its T1 pool slot (kNoSlot when the token has none).
// It holds the committed placement only; slots of an unacknowledged plan live in the
// PlanTransaction until commit.
//
// Memory: 4 bytes per position up to the highest position that ever had a slot.
// Thread-safety: none; owned with its sequence.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvtier/shm/records.hpp"

namespace kvtier::tier {

// The wire's no-slot sentinel (PlanMove::src_slot / dst_slot), so a map entry goes into a plan
// as it is.
using shm::kNoSlot;

class SlotMap {
 public:
  // kNoSlot for positions without a slot, including any beyond size().
  std::uint32_t slot_of(std::uint32_t position) const noexcept {
    return position < slots_.size() ? slots_[position] : kNoSlot;
  }
  // Grows as needed; set(position, kNoSlot) clears.
  void set(std::uint32_t position, std::uint32_t slot);

  // Positions covered (the highest slotted position + 1, or more).
  std::uint32_t size() const noexcept { return static_cast<std::uint32_t>(slots_.size()); }
  // Number of positions that hold a slot (linear scan; for tests and admin, not the hot path).
  std::uint32_t slotted() const noexcept;
  std::size_t bytes() const noexcept { return slots_.capacity() * sizeof(std::uint32_t); }

 private:
  std::vector<std::uint32_t> slots_;
};

}  // namespace kvtier::tier
