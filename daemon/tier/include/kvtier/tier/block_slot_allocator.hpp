// Pool-slot allocator of one client's int8 tier (T2), in blocks. The int8 format quantizes keys
// per channel over a block of up to `group` rows written once (kernels/include/kvtier/kernels/
// quantize.hpp: "quantize once"), so T2 slots are handed out a block at a time and a partly used
// block is never refilled: its unused rows stay empty until the whole block is free again.
//
//   slot = block · group + row,  0 <= block < capacity_blocks(), 0 <= row < group()
//
// Free blocks form a stack like SlotAllocator's: a fresh allocator hands out blocks 0, 1, 2, ...
// and the last block freed is the next one reused. A block returns to the free stack when its
// last allocated row is released. Releasing a slot that is not allocated returns an error and
// changes nothing (a daemon bug; see slot_allocator.hpp for why it is not an abort).
//
// Memory: 4 bytes per block + 1 bit per slot. Thread-safety: none; owned by the client's session.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kvtier/base/error.hpp"

namespace kvtier::tier {

class BlockSlotAllocator {
 public:
  // Preconditions (abort): group >= 1 and blocks · group < 2^32 − 1 (slots fit below kNoSlot).
  BlockSlotAllocator(std::uint32_t blocks, std::uint32_t group);

  // The first slot of a free block whose first `rows` slots become allocated (the rest of the
  // block stays unusable until it is freed), or nullopt when every block is in use.
  // Precondition (abort): 1 <= rows <= group().
  std::optional<std::uint32_t> allocate_block(std::uint32_t rows);

  // kInvalidArgument if slot >= capacity_blocks() · group(); kBadState if it is not allocated.
  Status release(std::uint32_t slot);
  // Marks `slots` allocated (adoption after a daemon restart); every block holding one is in
  // use until its last allocated row is released. Errors as SlotAllocator::claim.
  Status claim(std::span<const std::uint32_t> slots);

  bool is_allocated(std::uint32_t slot) const noexcept {
    return slot < allocated_.size() && allocated_[slot];
  }
  std::uint32_t used_slots() const noexcept { return used_slots_; }
  std::uint32_t used_blocks() const noexcept { return blocks_ - available_blocks(); }
  std::uint32_t available_blocks() const noexcept {
    return static_cast<std::uint32_t>(free_.size());
  }
  std::uint32_t capacity_blocks() const noexcept { return blocks_; }
  std::uint32_t group() const noexcept { return group_; }

 private:
  std::uint32_t blocks_;
  std::uint32_t group_;
  std::uint32_t used_slots_ = 0;
  std::vector<std::uint32_t> free_;       // stack of free blocks; back() is handed out next
  std::vector<std::uint32_t> live_rows_;  // allocated slots per block
  std::vector<bool> allocated_;           // per slot
};

}  // namespace kvtier::tier
