// BlockSlotAllocator: a free-block stack, a live-row count per block and a per-slot bitmap for
// double-release detection.
#include "kvtier/tier/block_slot_allocator.hpp"

#include <string>
#include <vector>

#include "kvtier/base/check.hpp"

namespace kvtier::tier {

BlockSlotAllocator::BlockSlotAllocator(std::uint32_t blocks, std::uint32_t group)
    : blocks_(blocks), group_(group) {
  KVTIER_CHECK(group >= 1, "BlockSlotAllocator: group must be >= 1");
  KVTIER_CHECK(std::uint64_t{blocks} * group < 0xFFFFFFFFull,
                  "BlockSlotAllocator: blocks * group must be below 2^32 - 1");
  free_.reserve(blocks);
  for (std::uint32_t block = blocks; block > 0; --block) free_.push_back(block - 1);
  live_rows_.assign(blocks, 0);
  allocated_.assign(std::size_t{blocks} * group, false);
}

std::optional<std::uint32_t> BlockSlotAllocator::allocate_block(std::uint32_t rows) {
  KVTIER_CHECK(rows >= 1 && rows <= group_, "allocate_block(): rows outside [1, group]");
  if (free_.empty()) return std::nullopt;
  const std::uint32_t block = free_.back();
  free_.pop_back();
  const std::uint32_t first = block * group_;
  for (std::uint32_t row = 0; row < rows; ++row) allocated_[first + row] = true;
  live_rows_[block] = rows;
  used_slots_ += rows;
  return first;
}

Status BlockSlotAllocator::release(std::uint32_t slot) {
  if (slot >= allocated_.size()) {
    return make_error(Errc::kInvalidArgument,
                      "release of T2 slot " + std::to_string(slot) + " beyond capacity " +
                          std::to_string(allocated_.size()));
  }
  if (!allocated_[slot]) {
    return make_error(Errc::kBadState,
                      "release of T2 slot " + std::to_string(slot) + " which is not allocated");
  }
  allocated_[slot] = false;
  --used_slots_;
  const std::uint32_t block = slot / group_;
  if (--live_rows_[block] == 0) free_.push_back(block);
  return {};
}

Status BlockSlotAllocator::claim(std::span<const std::uint32_t> slots) {
  std::vector<bool> claimed(allocated_.size(), false);
  for (const std::uint32_t slot : slots) {
    if (slot >= allocated_.size()) {
      return make_error(Errc::kInvalidArgument, "T2 slot " + std::to_string(slot) + " beyond capacity " +
                                                    std::to_string(allocated_.size()));
    }
    if (allocated_[slot] || claimed[slot]) {
      return make_error(Errc::kBadState, "T2 slot " + std::to_string(slot) + " is held twice");
    }
    claimed[slot] = true;
  }
  for (const std::uint32_t slot : slots) {
    allocated_[slot] = true;
    ++live_rows_[slot / group_];
    ++used_slots_;
  }
  std::erase_if(free_, [this](std::uint32_t block) { return live_rows_[block] != 0; });
  return {};
}

}  // namespace kvtier::tier
