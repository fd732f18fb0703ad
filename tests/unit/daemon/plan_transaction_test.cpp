// PlanTransaction: slots for moves into T1, sources out of T1, commit/rollback, backpressure
// trimming, and a property test that no slot is ever referenced twice.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <vector>

#include "kvtier/tier/plan_transaction.hpp"
#include "kvtier/tier/sequence_tiers.hpp"
#include "tier_test_support.hpp"

namespace kvtier::tier {
namespace {

constexpr Tier T0 = Tier::kT0;
constexpr Tier T1 = Tier::kT1;
constexpr Tier T3 = Tier::kT3;

TEST(PlanTransaction, AllocatesDestinationsAndFreesSourcesOnlyOnCommit) {
  SlotAllocator alloc(8);
  SlotMap slots;
  slots.set(3, *alloc.allocate());  // slot 0
  slots.set(4, *alloc.allocate());  // slot 1
  const std::vector<TierMove> moves = {{1, T0, T1}, {3, T1, T0}, {4, T1, T3}, {6, T0, T3}};
  auto plan = PlanTransaction::prepare(moves, slots, alloc);
  ASSERT_TRUE(plan.has_value());
  const std::vector<PlannedMove> expected = {
      {1, T0, T1, kNoSlot, 2}, {3, T1, T0, 0, kNoSlot}, {4, T1, T3, 1, kNoSlot}, {6, T0, T3, kNoSlot, kNoSlot}};
  EXPECT_EQ(std::vector<PlannedMove>(plan->planned().begin(), plan->planned().end()), expected);
  EXPECT_EQ(alloc.used(), 3u);  // sources still held while the plan is in flight
  ASSERT_TRUE(plan->commit(slots).has_value());
  EXPECT_FALSE(plan->open());
  EXPECT_EQ(alloc.used(), 1u);
  EXPECT_EQ(slots.slot_of(1), 2u);
  EXPECT_EQ(slots.slot_of(3), kNoSlot);
  EXPECT_EQ(slots.slot_of(4), kNoSlot);
}

TEST(PlanTransaction, RollbackFreesDestinationsAndKeepsTheSlotMap) {
  SlotAllocator alloc(4);
  SlotMap slots;
  slots.set(2, *alloc.allocate());
  const std::vector<TierMove> moves = {{0, T0, T1}, {1, T0, T1}, {2, T1, T0}};
  auto plan = PlanTransaction::prepare(moves, slots, alloc);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(alloc.used(), 3u);
  ASSERT_TRUE(plan->rollback().has_value());
  EXPECT_EQ(alloc.used(), 1u);
  EXPECT_EQ(slots.slot_of(2), 0u);
  EXPECT_EQ(slots.slotted(), 1u);
}

TEST(PlanTransaction, DestroyingAnOpenPlanRollsItBack) {
  SlotAllocator alloc(4);
  SlotMap slots;
  const std::vector<TierMove> moves = {{0, T0, T1}, {1, T0, T1}};
  {
    auto plan = PlanTransaction::prepare(moves, slots, alloc);
    EXPECT_EQ(alloc.used(), 2u);
  }
  EXPECT_EQ(alloc.used(), 0u);
}

TEST(PlanTransaction, PoolExhaustionTrimsMovesIntoT1AndKeepsThoseTokensInT0) {
  SlotAllocator alloc(2);
  SlotMap slots;
  slots.set(9, *alloc.allocate());  // one slot left
  const std::vector<TierMove> moves = {{1, T0, T1}, {2, T0, T3}, {3, T0, T1}, {9, T1, T0}, {10, T0, T1}};
  auto plan = PlanTransaction::prepare(moves, slots, alloc);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->trimmed(), 2u);
  // The slot freed by 9's promotion is not reused by this same plan (it is still read).
  const std::vector<TierMove> accepted = {{1, T0, T1}, {2, T0, T3}, {9, T1, T0}};
  EXPECT_EQ(std::vector<TierMove>(plan->accepted().begin(), plan->accepted().end()), accepted);
}

TEST(PlanTransaction, MissingSourceSlotIsAnInternalErrorAndAllocatesNothing) {
  SlotAllocator alloc(4);
  SlotMap slots;
  const std::vector<TierMove> moves = {{0, T0, T1}, {5, T1, T0}};
  auto plan = PlanTransaction::prepare(moves, slots, alloc);
  ASSERT_FALSE(plan.has_value());
  EXPECT_EQ(plan.error().code, Errc::kInternal);
  EXPECT_EQ(alloc.used(), 0u);
}

// Every committed T1 token has exactly one slot, no other token has one, and every allocated
// slot is referenced exactly once (by the map or by the plan in flight).
void check_slots(const SequenceTiers& seq, const SlotMap& slots, const SlotAllocator& alloc,
                 const PlanTransaction* in_flight) {
  std::multiset<std::uint32_t> referenced;
  for (std::uint32_t pos = 0; pos < seq.length(); ++pos) {
    const std::uint32_t slot = slots.slot_of(pos);
    ASSERT_EQ(seq.tier_of(pos) == T1, slot != kNoSlot) << "position " << pos;
    if (slot != kNoSlot) referenced.insert(slot);
  }
  if (in_flight != nullptr) {
    for (const PlannedMove& m : in_flight->planned()) {
      if (m.destination_slot != kNoSlot) referenced.insert(m.destination_slot);
    }
  }
  for (std::uint32_t slot : referenced) {
    ASSERT_EQ(referenced.count(slot), 1u) << "slot " << slot << " referenced twice";
    ASSERT_TRUE(alloc.is_allocated(slot)) << "slot " << slot;
  }
  ASSERT_EQ(referenced.size(), alloc.used());
}

TEST(PlanTransaction, NoSlotIsEverReferencedTwiceAcrossRandomDecisionsCommitsAndRollbacks) {
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int trial = 0; trial < 40; ++trial) {
    TierParams p;
    p.sink_tokens = 2;
    p.window_tokens = 8;
    p.interval = 4;
    p.hbm_ratio = 0.3;
    p.evict_ratio = 0.1;
    p.mode = trial % 2 == 0 ? EvictionMode::kPaperAlgorithm : EvictionMode::kCumulative;
    auto seq = *SequenceTiers::create(5, p, 400);
    SlotAllocator alloc(10 + static_cast<std::uint32_t>(rng() % 120));  // often too small
    SlotMap slots;
    for (std::uint32_t t = 0; t < 300; ++t) {
      std::vector<float> row(6 + t);
      for (float& x : row) x = u(rng);
      ASSERT_TRUE(seq.add_scores(0, row).has_value());
      seq.end_step();
      if (!seq.due()) continue;
      const Decision& d = seq.decide();
      auto plan = PlanTransaction::prepare(d.moves, slots, alloc);
      ASSERT_TRUE(plan.has_value());
      check_slots(seq, slots, alloc, &*plan);
      if (rng() % 4 == 0) {  // the client never acknowledged
        ASSERT_TRUE(plan->rollback().has_value());
        seq.rollback();
      } else {
        ASSERT_TRUE(plan->commit(slots).has_value());
        seq.commit(plan->accepted());
      }
      check_slots(seq, slots, alloc, nullptr);
    }
  }
}

}  // namespace
}  // namespace kvtier::tier
