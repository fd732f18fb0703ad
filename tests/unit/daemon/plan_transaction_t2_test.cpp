// PlanTransaction with the int8 pool: block packing, trimming for lack of blocks or beyond
// t1_limit, commit and rollback against the right pool, disagreements as kInternal, and a
// property test over decisions and pressure proposals that every slot is referenced once.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "kvtier/tier/plan_transaction.hpp"
#include "kvtier/tier/sequence_tiers.hpp"

namespace kvtier::tier {
namespace {

constexpr Tier T0 = Tier::kT0;
constexpr Tier T1 = Tier::kT1;
constexpr Tier T2 = Tier::kT2;
constexpr Tier T3 = Tier::kT3;

template <typename T>
std::vector<T> vec(std::span<const T> s) {
  return {s.begin(), s.end()};
}

TEST(PlanTransactionT2, PacksMovesIntoT2IntoFreshBlocksInMoveOrder) {
  SlotAllocator t1(16);
  BlockSlotAllocator t2(3, 4);
  SlotMap t1_map;
  SlotMap t2_map;
  for (std::uint32_t pos : {10u, 11u, 13u, 14u, 15u, 16u}) t1_map.set(pos, *t1.allocate());
  const std::vector<TierMove> moves = {{10, T1, T2}, {11, T1, T2}, {12, T0, T1}, {13, T1, T2},
                                       {14, T1, T2}, {15, T1, T2}, {16, T1, T2}};
  auto plan = PlanTransaction::prepare(moves, PoolSlots{t1_map, t1, &t2_map, &t2});
  ASSERT_TRUE(plan.has_value());
  const std::vector<PlannedMove> expected = {
      {10, T1, T2, 0, 0}, {11, T1, T2, 1, 1}, {12, T0, T1, kNoSlot, 6}, {13, T1, T2, 2, 2},
      {14, T1, T2, 3, 3}, {15, T1, T2, 4, 4}, {16, T1, T2, 5, 5}};
  EXPECT_EQ(vec(plan->planned()), expected);
  // Block 0: four rows from planned()[0] (10, 11, 13, 14); block 1: two from planned()[5].
  const std::vector<T2Block> blocks = {{0, 4, 0}, {4, 2, 5}};
  EXPECT_EQ(vec(plan->t2_blocks()), blocks);
  EXPECT_EQ(t2.used_slots(), 6u);
  EXPECT_EQ(t2.used_blocks(), 2u);
}

TEST(PlanTransactionT2, TrimsMovesIntoT2WhenNoBlockIsFree) {
  SlotAllocator t1(8);
  BlockSlotAllocator t2(1, 2);
  SlotMap t1_map;
  SlotMap t2_map;
  for (std::uint32_t pos : {10u, 11u, 13u}) t1_map.set(pos, *t1.allocate());
  const std::vector<TierMove> moves = {{10, T1, T2}, {11, T1, T2}, {13, T1, T2}};
  auto plan = PlanTransaction::prepare(moves, PoolSlots{t1_map, t1, &t2_map, &t2});
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->trimmed_t2(), 1u);
  EXPECT_EQ(plan->trimmed(), 0u);
  const std::vector<TierMove> accepted = {{10, T1, T2}, {11, T1, T2}};  // 13 stays in T1
  EXPECT_EQ(vec(plan->accepted()), accepted);
}

TEST(PlanTransactionT2, WithoutAT2PoolEveryMoveIntoT2IsTrimmed) {
  SlotAllocator t1(8);
  SlotMap t1_map;
  t1_map.set(10, *t1.allocate());
  const std::vector<TierMove> moves = {{4, T0, T1}, {10, T1, T2}};
  auto plan = PlanTransaction::prepare(moves, t1_map, t1);  // the T1-only overload
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->trimmed_t2(), 1u);
  const std::vector<TierMove> accepted = {{4, T0, T1}};
  EXPECT_EQ(vec(plan->accepted()), accepted);
}

TEST(PlanTransactionT2, T1LimitTrimsMovesIntoT1BeyondIt) {
  SlotAllocator t1(8);
  SlotMap t1_map;
  const std::vector<TierMove> moves = {{0, T0, T1}, {1, T0, T1}, {2, T0, T3}, {3, T0, T1}};
  PoolSlots pools{t1_map, t1};
  pools.t1_limit = 2;
  auto plan = PlanTransaction::prepare(moves, pools);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->trimmed(), 1u);
  const std::vector<TierMove> accepted = {{0, T0, T1}, {1, T0, T1}, {2, T0, T3}};
  EXPECT_EQ(vec(plan->accepted()), accepted);
  EXPECT_EQ(t1.used(), 2u);
}

// 10 in T1 (slot 0); 20 and 21 in T2 (block 0, slots 0 and 1; group 2).
struct Pools {
  SlotAllocator t1{4};
  BlockSlotAllocator t2{3, 2};
  SlotMap t1_map;
  SlotMap t2_map;
  Pools() {
    t1_map.set(10, *t1.allocate());
    const std::uint32_t first = *t2.allocate_block(2);
    t2_map.set(20, first);
    t2_map.set(21, first + 1);
  }
  PoolSlots slots() { return PoolSlots{t1_map, t1, &t2_map, &t2}; }
};

TEST(PlanTransactionT2, CommitFreesEachSourceInItsOwnPool) {
  Pools pools;
  const std::vector<TierMove> moves = {{10, T1, T2}, {20, T2, T0}, {21, T2, T3}};
  auto plan = PlanTransaction::prepare(moves, pools.slots());
  ASSERT_TRUE(plan.has_value());
  const std::vector<PlannedMove> expected = {
      {10, T1, T2, 0, 2}, {20, T2, T0, 0, kNoSlot}, {21, T2, T3, 1, kNoSlot}};
  EXPECT_EQ(vec(plan->planned()), expected);
  ASSERT_TRUE(plan->commit(pools.t1_map, &pools.t2_map).has_value());
  EXPECT_EQ(pools.t1.used(), 0u);
  EXPECT_EQ(pools.t1_map.slot_of(10), kNoSlot);
  EXPECT_EQ(pools.t2_map.slot_of(10), 2u);
  EXPECT_EQ(pools.t2_map.slot_of(20), kNoSlot);
  EXPECT_EQ(pools.t2_map.slot_of(21), kNoSlot);
  EXPECT_EQ(pools.t2.used_slots(), 1u);
  EXPECT_EQ(pools.t2.used_blocks(), 1u);  // block 0 went back with its last row
}

TEST(PlanTransactionT2, RollbackReleasesEachDestinationToItsOwnPool) {
  Pools pools;
  const std::vector<TierMove> moves = {{5, T0, T1}, {10, T1, T2}};
  auto plan = PlanTransaction::prepare(moves, pools.slots());
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(pools.t1.used(), 2u);
  EXPECT_EQ(pools.t2.used_blocks(), 2u);
  ASSERT_TRUE(plan->rollback().has_value());
  EXPECT_EQ(pools.t1.used(), 1u);
  EXPECT_EQ(pools.t2.used_slots(), 2u);
  EXPECT_EQ(pools.t2.used_blocks(), 1u);
  EXPECT_EQ(pools.t1_map.slot_of(10), 0u);
  EXPECT_EQ(pools.t2_map.slot_of(10), kNoSlot);
}

TEST(PlanTransactionT2, MissingT2SourceSlotIsInternalAndAllocatesNothing) {
  Pools pools;
  const std::vector<TierMove> moves = {{5, T0, T1}, {10, T1, T2}, {22, T2, T3}};
  auto plan = PlanTransaction::prepare(moves, pools.slots());
  ASSERT_FALSE(plan.has_value());
  EXPECT_EQ(plan.error().code, Errc::kInternal);
  EXPECT_EQ(pools.t1.used(), 1u);
  EXPECT_EQ(pools.t2.used_slots(), 2u);
}

TEST(PlanTransactionT2, MoveOutOfT2WithoutAT2PoolIsInternal) {
  Pools pools;
  const std::vector<TierMove> moves = {{20, T2, T3}};
  auto plan = PlanTransaction::prepare(moves, pools.t1_map, pools.t1);
  ASSERT_FALSE(plan.has_value());
  EXPECT_EQ(plan.error().code, Errc::kInternal);
}

TEST(PlanTransactionT2, MoveIntoT2FromT0IsInternal) {
  Pools pools;
  const std::vector<TierMove> moves = {{5, T0, T2}};
  auto plan = PlanTransaction::prepare(moves, pools.slots());
  ASSERT_FALSE(plan.has_value());
  EXPECT_EQ(plan.error().code, Errc::kInternal);
}

TEST(PlanTransactionT2, MoveFromT2BackToT1IsInternal) {
  Pools pools;
  const std::vector<TierMove> moves = {{20, T2, T1}};
  auto plan = PlanTransaction::prepare(moves, pools.slots());
  ASSERT_FALSE(plan.has_value());
  EXPECT_EQ(plan.error().code, Errc::kInternal);
}

// Every committed T1/T2 token has exactly one slot in its tier's map and no other token has one;
// every allocated slot of either pool is referenced exactly once (map or plan in flight).
void check_pools(const SequenceTiers& seq, const SlotMap& t1_map, const SlotAllocator& t1,
                 const SlotMap& t2_map, const BlockSlotAllocator& t2,
                 const PlanTransaction* in_flight) {
  std::multiset<std::uint32_t> ref1;
  std::multiset<std::uint32_t> ref2;
  for (std::uint32_t pos = 0; pos < seq.length(); ++pos) {
    const Tier tier = seq.tier_of(pos);
    ASSERT_EQ(tier == T1, t1_map.slot_of(pos) != kNoSlot) << "position " << pos;
    ASSERT_EQ(tier == T2, t2_map.slot_of(pos) != kNoSlot) << "position " << pos;
    if (tier == T1) ref1.insert(t1_map.slot_of(pos));
    if (tier == T2) ref2.insert(t2_map.slot_of(pos));
  }
  if (in_flight != nullptr) {
    for (const PlannedMove& m : in_flight->planned()) {
      if (m.to == T1) ref1.insert(m.destination_slot);
      if (m.to == T2) ref2.insert(m.destination_slot);
    }
  }
  for (std::uint32_t slot : ref1) ASSERT_EQ(ref1.count(slot), 1u) << "T1 slot " << slot;
  for (std::uint32_t slot : ref2) ASSERT_EQ(ref2.count(slot), 1u) << "T2 slot " << slot;
  for (std::uint32_t slot : ref2) ASSERT_TRUE(t2.is_allocated(slot)) << "T2 slot " << slot;
  ASSERT_EQ(ref1.size(), t1.used());
  ASSERT_EQ(ref2.size(), t2.used_slots());
}

TEST(PlanTransactionT2, NoSlotIsEverReferencedTwiceAcrossDecisionsAndPressureProposals) {
  std::mt19937_64 rng(23);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::size_t into_t2 = 0;
  for (int trial = 0; trial < 30; ++trial) {
    TierParams p;
    p.sink_tokens = 2;
    p.window_tokens = 8;
    p.interval = 4;
    p.hbm_ratio = 0.3;
    p.evict_ratio = 0.1;
    p.int8_ratio = 0.5;
    p.mode = trial % 2 == 0 ? EvictionMode::kPaperAlgorithm : EvictionMode::kCumulative;
    auto seq = *SequenceTiers::create(5, p, 400);
    SlotAllocator t1(10 + static_cast<std::uint32_t>(rng() % 80));  // often too small
    BlockSlotAllocator t2(1 + static_cast<std::uint32_t>(rng() % 12), 4);
    SlotMap t1_map;
    SlotMap t2_map;
    for (std::uint32_t t = 0; t < 300; ++t) {
      std::vector<float> row(6 + t);
      for (float& x : row) x = u(rng);
      ASSERT_TRUE(seq.add_scores(0, row).has_value());
      seq.end_step();
      if (!seq.due()) continue;
      std::vector<TierMove> proposal;
      const bool pressure = rng() % 3 == 0;
      if (pressure) {  // push the lowest T1 tokens down to T2
        std::vector<ScoredPosition> victims;
        seq.lowest_in_tier(T1, 5, victims);
        for (const ScoredPosition& v : victims) proposal.push_back({v.position, T1, T2});
        std::sort(proposal.begin(), proposal.end(),
                  [](const TierMove& a, const TierMove& b) { return a.position < b.position; });
        ASSERT_TRUE(seq.propose(proposal).has_value());
      }
      const std::span<const TierMove> moves =
          pressure ? std::span<const TierMove>(proposal) : seq.decide().moves;
      auto plan = PlanTransaction::prepare(moves, PoolSlots{t1_map, t1, &t2_map, &t2});
      ASSERT_TRUE(plan.has_value());
      check_pools(seq, t1_map, t1, t2_map, t2, &*plan);
      for (const PlannedMove& m : plan->planned()) into_t2 += m.to == T2 ? 1u : 0u;
      if (rng() % 4 == 0) {
        ASSERT_TRUE(plan->rollback().has_value());
        seq.rollback();
      } else {
        ASSERT_TRUE(plan->commit(t1_map, &t2_map).has_value());
        seq.commit(plan->accepted());
      }
      check_pools(seq, t1_map, t1, t2_map, t2, nullptr);
    }
  }
  EXPECT_GT(into_t2, 0u);
}

}  // namespace
}  // namespace kvtier::tier
