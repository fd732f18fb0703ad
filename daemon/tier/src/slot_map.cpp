// SlotMap: a dense position-indexed vector.
#include "kvtier/tier/slot_map.hpp"

#include <algorithm>

namespace kvtier::tier {

void SlotMap::set(std::uint32_t position, std::uint32_t slot) {
  if (position >= slots_.size()) {
    if (slot == kNoSlot) return;
    slots_.resize(std::size_t{position} + 1, kNoSlot);
  }
  slots_[position] = slot;
}

std::uint32_t SlotMap::slotted() const noexcept {
  return static_cast<std::uint32_t>(
      std::count_if(slots_.begin(), slots_.end(), [](std::uint32_t s) { return s != kNoSlot; }));
}

}  // namespace kvtier::tier
