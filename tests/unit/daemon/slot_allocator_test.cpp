// SlotAllocator: allocation order, exhaustion, release errors.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "kvtier/tier/slot_allocator.hpp"
#include "kvtier/tier/slot_map.hpp"

namespace kvtier::tier {
namespace {

TEST(SlotAllocator, HandsOutLowestSlotsFirstAndReusesTheLastReleased) {
  SlotAllocator alloc(4);
  EXPECT_EQ(alloc.allocate(), 0u);
  EXPECT_EQ(alloc.allocate(), 1u);
  EXPECT_EQ(alloc.allocate(), 2u);
  ASSERT_TRUE(alloc.release(1).has_value());
  EXPECT_EQ(alloc.allocate(), 1u);
  EXPECT_EQ(alloc.used(), 3u);
  EXPECT_EQ(alloc.available(), 1u);
}

TEST(SlotAllocator, ReturnsNothingWhenExhausted) {
  SlotAllocator alloc(2);
  EXPECT_TRUE(alloc.allocate().has_value());
  EXPECT_TRUE(alloc.allocate().has_value());
  EXPECT_FALSE(alloc.allocate().has_value());
  EXPECT_EQ(alloc.used(), alloc.capacity());
  SlotAllocator empty(0);
  EXPECT_FALSE(empty.allocate().has_value());
}

TEST(SlotAllocator, DoubleReleaseIsAnErrorAndChangesNothing) {
  SlotAllocator alloc(3);
  const auto slot = alloc.allocate();
  ASSERT_TRUE(alloc.release(*slot).has_value());
  const Status again = alloc.release(*slot);
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code, Errc::kBadState);
  EXPECT_EQ(alloc.used(), 0u);
  // The slot is handed out once, not twice.
  std::set<std::uint32_t> seen;
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(seen.insert(*alloc.allocate()).second);
  EXPECT_FALSE(alloc.allocate().has_value());
}

TEST(SlotAllocator, ReleaseOutOfRangeIsAnError) {
  SlotAllocator alloc(3);
  const Status status = alloc.release(3);
  ASSERT_FALSE(status.has_value());
  EXPECT_EQ(status.error().code, Errc::kInvalidArgument);
  EXPECT_FALSE(alloc.release(kNoSlot).has_value());
}

TEST(SlotMap, UnsetPositionsHaveNoSlot) {
  SlotMap map;
  EXPECT_EQ(map.slot_of(5), kNoSlot);
  map.set(5, 7);
  EXPECT_EQ(map.slot_of(5), 7u);
  EXPECT_EQ(map.slot_of(4), kNoSlot);
  EXPECT_EQ(map.slotted(), 1u);
  map.set(5, kNoSlot);
  EXPECT_EQ(map.slotted(), 0u);
  map.set(100, kNoSlot);  // clearing beyond the end does not grow
  EXPECT_EQ(map.size(), 6u);
}

TEST(SlotAllocator, ClaimedSlotsAreHeldAndTheRestAreHandedOutInOrder) {
  SlotAllocator alloc(5);
  const std::vector<std::uint32_t> held = {3, 0};
  ASSERT_TRUE(alloc.claim(held).has_value());
  EXPECT_EQ(alloc.used(), 2u);
  EXPECT_TRUE(alloc.is_allocated(3));
  EXPECT_EQ(alloc.allocate(), 1u);
  EXPECT_EQ(alloc.allocate(), 2u);
  EXPECT_EQ(alloc.allocate(), 4u);
  EXPECT_FALSE(alloc.allocate().has_value());
  ASSERT_TRUE(alloc.release(3).has_value());
  EXPECT_EQ(alloc.allocate(), 3u);
}

TEST(SlotAllocator, AClaimOfATakenOrTwiceListedOrForeignSlotChangesNothing) {
  SlotAllocator alloc(4);
  ASSERT_EQ(alloc.allocate(), 0u);
  const std::vector<std::uint32_t> taken = {1, 0}, twice = {2, 2}, beyond = {1, 4};
  EXPECT_EQ(alloc.claim(taken).error().code, Errc::kBadState);
  EXPECT_EQ(alloc.claim(twice).error().code, Errc::kBadState);
  EXPECT_EQ(alloc.claim(beyond).error().code, Errc::kInvalidArgument);
  EXPECT_EQ(alloc.used(), 1u);
  EXPECT_EQ(alloc.allocate(), 1u);
}

}  // namespace
}  // namespace kvtier::tier
