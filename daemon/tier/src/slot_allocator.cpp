// SlotAllocator: a free stack plus an allocated bitmap for double-release detection.
#include "kvtier/tier/slot_allocator.hpp"

#include <string>
#include <vector>

namespace kvtier::tier {

SlotAllocator::SlotAllocator(std::uint32_t capacity)
    : capacity_(capacity), allocated_(capacity, false) {
  free_.reserve(capacity);
  for (std::uint32_t slot = capacity; slot > 0; --slot) free_.push_back(slot - 1);
}

std::optional<std::uint32_t> SlotAllocator::allocate() {
  if (free_.empty()) return std::nullopt;
  const std::uint32_t slot = free_.back();
  free_.pop_back();
  allocated_[slot] = true;
  return slot;
}

Status SlotAllocator::release(std::uint32_t slot) {
  if (slot >= capacity_) {
    return make_error(Errc::kInvalidArgument, "release of slot " + std::to_string(slot) +
                                                  " beyond capacity " + std::to_string(capacity_));
  }
  if (!allocated_[slot]) {
    return make_error(Errc::kBadState,
                      "release of slot " + std::to_string(slot) + " which is not allocated");
  }
  allocated_[slot] = false;
  free_.push_back(slot);
  return {};
}

Status SlotAllocator::claim(std::span<const std::uint32_t> slots) {
  std::vector<bool> claimed(capacity_, false);
  for (const std::uint32_t slot : slots) {
    if (slot >= capacity_) {
      return make_error(Errc::kInvalidArgument, "slot " + std::to_string(slot) + " beyond capacity " +
                                                    std::to_string(capacity_));
    }
    if (allocated_[slot] || claimed[slot]) {
      return make_error(Errc::kBadState, "slot " + std::to_string(slot) + " is held twice");
    }
    claimed[slot] = true;
  }
  for (const std::uint32_t slot : slots) allocated_[slot] = true;
  std::erase_if(free_, [&claimed](std::uint32_t slot) { return claimed[slot]; });
  return {};
}

}  // namespace kvtier::tier
