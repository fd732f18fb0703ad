// BlockSlotAllocator: fresh block order, partly used blocks, a block freed only with its last
// row, release errors and exhaustion.
#include <gtest/gtest.h>

#include <vector>

#include "kvtier/tier/block_slot_allocator.hpp"

namespace kvtier::tier {
namespace {

TEST(BlockSlotAllocator, FreshAllocatorHandsOutBlocksInOrder) {
  BlockSlotAllocator alloc(4, 8);
  EXPECT_EQ(alloc.allocate_block(8), 0u);
  EXPECT_EQ(alloc.allocate_block(8), 8u);
  EXPECT_EQ(alloc.allocate_block(8), 16u);
  EXPECT_EQ(alloc.used_slots(), 24u);
  EXPECT_EQ(alloc.used_blocks(), 3u);
  EXPECT_EQ(alloc.available_blocks(), 1u);
  EXPECT_EQ(alloc.capacity_blocks(), 4u);
  EXPECT_EQ(alloc.group(), 8u);
}

TEST(BlockSlotAllocator, PartlyUsedBlockAllocatesOnlyItsFirstRows) {
  BlockSlotAllocator alloc(2, 4);
  EXPECT_EQ(alloc.allocate_block(3), 0u);
  EXPECT_TRUE(alloc.is_allocated(0));
  EXPECT_TRUE(alloc.is_allocated(2));
  EXPECT_FALSE(alloc.is_allocated(3));
  EXPECT_EQ(alloc.used_slots(), 3u);
  EXPECT_EQ(alloc.used_blocks(), 1u);
  // The unused row is not refilled: the next block starts at the next group.
  EXPECT_EQ(alloc.allocate_block(1), 4u);
}

TEST(BlockSlotAllocator, BlockIsFreedOnlyWhenAllItsRowsAreReleased) {
  BlockSlotAllocator alloc(2, 4);
  ASSERT_EQ(alloc.allocate_block(3), 0u);
  ASSERT_TRUE(alloc.release(0).has_value());
  ASSERT_TRUE(alloc.release(2).has_value());
  EXPECT_EQ(alloc.used_blocks(), 1u);
  EXPECT_EQ(alloc.used_slots(), 1u);
  ASSERT_TRUE(alloc.release(1).has_value());
  EXPECT_EQ(alloc.used_blocks(), 0u);
  EXPECT_EQ(alloc.available_blocks(), 2u);
  EXPECT_EQ(alloc.allocate_block(4), 0u);  // the block freed last is reused first
}

TEST(BlockSlotAllocator, DoubleReleaseIsBadStateAndChangesNothing) {
  BlockSlotAllocator alloc(2, 4);
  ASSERT_EQ(alloc.allocate_block(2), 0u);
  ASSERT_TRUE(alloc.release(1).has_value());
  const Status again = alloc.release(1);
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code, Errc::kBadState);
  EXPECT_EQ(alloc.used_slots(), 1u);
  EXPECT_EQ(alloc.used_blocks(), 1u);
}

TEST(BlockSlotAllocator, ReleaseOfAnUnallocatedRowOfALiveBlockIsBadState) {
  BlockSlotAllocator alloc(2, 4);
  ASSERT_EQ(alloc.allocate_block(2), 0u);
  const Status status = alloc.release(3);
  ASSERT_FALSE(status.has_value());
  EXPECT_EQ(status.error().code, Errc::kBadState);
  EXPECT_EQ(alloc.used_slots(), 2u);
}

TEST(BlockSlotAllocator, ReleaseBeyondCapacityIsInvalidArgument) {
  BlockSlotAllocator alloc(2, 4);
  const Status status = alloc.release(8);
  ASSERT_FALSE(status.has_value());
  EXPECT_EQ(status.error().code, Errc::kInvalidArgument);
}

TEST(BlockSlotAllocator, ExhaustionReturnsNulloptEvenWithUnusedRows) {
  BlockSlotAllocator alloc(2, 4);
  ASSERT_EQ(alloc.allocate_block(1), 0u);
  ASSERT_EQ(alloc.allocate_block(1), 4u);
  EXPECT_EQ(alloc.allocate_block(1), std::nullopt);
  EXPECT_EQ(alloc.used_slots(), 2u);
  EXPECT_EQ(alloc.available_blocks(), 0u);
}

TEST(BlockSlotAllocator, ClaimedSlotsHoldTheirBlocksUntilTheirLastRowIsReleased) {
  BlockSlotAllocator alloc(3, 4);  // slots 0..11
  const std::vector<std::uint32_t> held = {5, 6, 1};
  ASSERT_TRUE(alloc.claim(held).has_value());
  EXPECT_EQ(alloc.used_slots(), 3u);
  EXPECT_EQ(alloc.used_blocks(), 2u);
  EXPECT_EQ(alloc.allocate_block(4), 8u);  // the one block left
  EXPECT_FALSE(alloc.allocate_block(1).has_value());
  ASSERT_TRUE(alloc.release(5).has_value());
  ASSERT_TRUE(alloc.release(6).has_value());
  EXPECT_EQ(alloc.allocate_block(2), 4u);  // block 1 came free
  const std::vector<std::uint32_t> taken = {1}, beyond = {12};
  EXPECT_EQ(alloc.claim(taken).error().code, Errc::kBadState);
  EXPECT_EQ(alloc.claim(beyond).error().code, Errc::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::tier
