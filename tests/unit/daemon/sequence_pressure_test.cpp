// SequenceTiers' pressure-cascade hooks: propose() with its checks and commit/rollback,
// eviction_headroom() in each eviction mode, and lowest_in_tier() ordering.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "kvtier/tier/sequence_tiers.hpp"
#include "tier_test_support.hpp"

namespace kvtier::tier {
namespace {

using ::testing::HasSubstr;
using testing::int8_example;
using testing::int8_example_params;

constexpr Tier T0 = Tier::kT0;
constexpr Tier T1 = Tier::kT1;
constexpr Tier T2 = Tier::kT2;
constexpr Tier T3 = Tier::kT3;

// The int8 example (tier_test_support.hpp) with a window of 2 and r = 10% (cumulative): T0
// {2, 4, 6}, T1 {0, 7, 8}, T2 {1, 3, 5}, nothing destroyed. Then tokens 11 and 12 arrive, so 9
// and 10 (T0) leave the window: 11 managed, ⌊0.1·11⌋ = 1 token may be destroyed.
SequenceTiers pressured() {
  TierParams p = int8_example_params();
  p.window_tokens = 2;
  p.evict_ratio = 0.1;
  auto seq = int8_example(p);
  const float newest[] = {2.0f, 2.0f};
  EXPECT_TRUE(seq.add_scores(11, newest).has_value());
  EXPECT_EQ(seq.managed(), 11u);
  return seq;
}

TEST(SequencePressure, ProposeLeavesExactlyTheGivenMovesPendingUntilCommit) {
  SequenceTiers seq = pressured();
  const std::vector<TierMove> moves = {{0, T1, T2}, {3, T2, T3}, {8, T1, T2}};
  ASSERT_TRUE(seq.propose(moves).has_value());
  EXPECT_TRUE(seq.has_pending());
  EXPECT_EQ(seq.tier_of(0), T1);  // nothing applied before commit
  seq.commit();
  EXPECT_EQ(seq.tier_of(0), T2);
  EXPECT_EQ(seq.tier_of(3), T3);
  EXPECT_EQ(seq.tier_of(8), T2);
  EXPECT_EQ(seq.count(T2), 4u);
  EXPECT_EQ(seq.destroyed(), 1u);
}

TEST(SequencePressure, RollbackOfAProposalKeepsTheCommittedTiers) {
  SequenceTiers seq = pressured();
  const std::vector<TierMove> moves = {{0, T1, T2}, {3, T2, T3}};
  ASSERT_TRUE(seq.propose(moves).has_value());
  seq.rollback();
  EXPECT_FALSE(seq.has_pending());
  EXPECT_EQ(seq.tier_of(0), T1);
  EXPECT_EQ(seq.tier_of(3), T2);
  EXPECT_EQ(seq.destroyed(), 0u);
}

TEST(SequencePressure, CommitOfAProposalAppliesAnAcceptedSubsequence) {
  SequenceTiers seq = pressured();
  const std::vector<TierMove> moves = {{0, T1, T2}, {7, T1, T2}};
  ASSERT_TRUE(seq.propose(moves).has_value());
  const std::vector<TierMove> accepted = {{7, T1, T2}};  // 0 got no T2 block
  seq.commit(accepted);
  EXPECT_EQ(seq.tier_of(0), T1);
  EXPECT_EQ(seq.tier_of(7), T2);
}

struct BadProposal {
  const char* why;  // expected in the message
  std::vector<TierMove> moves;
};

TEST(SequencePressure, ProposeRefusesEachInvalidMoveAndLeavesNothingPending) {
  const BadProposal cases[] = {
      {"strictly ascending", {{3, T2, T3}, {0, T1, T2}}},
      {"strictly ascending", {{0, T1, T2}, {0, T1, T2}}},
      {"not a managed position", {{12, T1, T3}}},  // the window
      {"not a managed position", {{40, T1, T3}}},  // beyond length()
      {"the token is in T1", {{0, T2, T3}}},
      {"only T1 -> T2", {{0, T1, T0}}},
      {"only T1 -> T2", {{2, T0, T1}}},
      {"only T1 -> T2", {{2, T0, T3}}},
      {"only T1 -> T2", {{1, T2, T1}}},
      {"only T1 -> T2", {{1, T2, T0}}},
      {"eviction headroom is 1", {{1, T2, T3}, {3, T2, T3}}},
  };
  for (const BadProposal& c : cases) {
    SequenceTiers seq = pressured();
    const Status status = seq.propose(c.moves);
    ASSERT_FALSE(status.has_value()) << c.why;
    EXPECT_EQ(status.error().code, Errc::kInvalidArgument) << c.why;
    EXPECT_THAT(status.error().message, HasSubstr(c.why));
    EXPECT_FALSE(seq.has_pending()) << c.why;
  }
}

TEST(SequencePressure, ProposeWhileADecisionIsPendingIsBadState) {
  SequenceTiers seq = pressured();
  seq.decide();
  const std::vector<TierMove> moves = {{0, T1, T2}};
  const Status status = seq.propose(moves);
  ASSERT_FALSE(status.has_value());
  EXPECT_EQ(status.error().code, Errc::kBadState);
}

TEST(SequencePressure, ProposeRefusesT1ToT2WhenT2IsOff) {
  TierParams p = int8_example_params();
  p.int8_ratio = 0.0;
  auto seq = int8_example(p);  // T1 {0, 1, 3, 5, 7, 8}, no T2
  ASSERT_EQ(seq.tier_of(0), T1);
  const std::vector<TierMove> moves = {{0, T1, T2}};
  const Status status = seq.propose(moves);
  ASSERT_FALSE(status.has_value());
  EXPECT_THAT(status.error().message, HasSubstr("T2 is off"));
}

TEST(SequencePressure, EvictionHeadroomInCumulativeModeIsWhatTheRatioStillAllows) {
  SequenceTiers seq = pressured();
  EXPECT_EQ(seq.eviction_headroom(), 1u);
  const std::vector<TierMove> moves = {{1, T2, T3}};
  ASSERT_TRUE(seq.propose(moves).has_value());
  seq.commit();
  EXPECT_EQ(seq.eviction_headroom(), 0u);
}

TierParams flat_params(EvictionMode mode) {
  TierParams p;
  p.sink_tokens = 0;
  p.window_tokens = 0;
  p.interval = 1;
  p.mode = mode;
  return p;
}

TEST(SequencePressure, EvictionHeadroomInCumulativeModeWithAnAbsoluteBudgetIsTheRestOfIt) {
  TierParams p = flat_params(EvictionMode::kCumulative);
  p.evict_tokens = 3;
  auto seq = *SequenceTiers::create(0, p, 32);
  ASSERT_TRUE(seq.add_scores(0, std::vector<float>(10, 1.0f)).has_value());
  EXPECT_EQ(seq.eviction_headroom(), 3u);
  seq.decide();  // destroys 3
  seq.commit();
  EXPECT_EQ(seq.eviction_headroom(), 0u);
}

TEST(SequencePressure, EvictionHeadroomInPaperAlgorithmModeIsThePerRoundCount) {
  TierParams p = flat_params(EvictionMode::kPaperAlgorithm);
  p.evict_ratio = 0.25;
  auto seq = *SequenceTiers::create(0, p, 32);
  ASSERT_TRUE(seq.add_scores(0, std::vector<float>(20, 1.0f)).has_value());
  EXPECT_EQ(seq.eviction_headroom(), 5u);  // ⌊0.25·20⌋
  seq.decide();
  seq.commit();
  EXPECT_EQ(seq.eviction_headroom(), 3u);  // ⌊0.25·15⌋: per round, whatever was destroyed
}

TEST(SequencePressure, EvictionHeadroomInPaperPrototypeModeCountsUnprotectedT0Only) {
  TierParams p = flat_params(EvictionMode::kPaperPrototype);
  p.evict_ratio = 0.2;
  auto seq = *SequenceTiers::create(0, p, 32);
  ASSERT_TRUE(seq.add_scores(0, std::vector<float>(20, 1.0f)).has_value());
  EXPECT_EQ(seq.eviction_headroom(), 4u);  // ⌊0.2·20⌋
  seq.decide();  // 4 to T3, n_keep = 10 in T0, 6 to T1
  seq.commit();
  EXPECT_EQ(seq.eviction_headroom(), 2u);  // ⌊0.2·10⌋ over the 10 T0 candidates
  seq.decide();  // 2 to T3, 5 kept, 3 to T1: 5 T0 candidates left
  seq.commit();
  EXPECT_EQ(seq.eviction_headroom(), 0u);  // fewer than 10 candidates: a skipped round
}

TEST(SequencePressure, LowestInTierAppendsTheLowestScoresAscending) {
  SequenceTiers seq = pressured();  // T1: 0 (.5), 7 (.4), 8 (.6)
  std::vector<ScoredPosition> out = {{9.0f, 99}};
  EXPECT_EQ(seq.lowest_in_tier(T1, 2, out), 2u);
  const std::vector<ScoredPosition> expected = {{9.0f, 99}, {0.4f, 7}, {0.5f, 0}};
  EXPECT_EQ(out, expected);
}

TEST(SequencePressure, LowestInTierListsTheWholeTierWhenKExceedsIt) {
  SequenceTiers seq = pressured();  // T2: 1 (.1), 3 (.3), 5 (.2)
  std::vector<ScoredPosition> out;
  EXPECT_EQ(seq.lowest_in_tier(T2, 10, out), 3u);
  const std::vector<ScoredPosition> expected = {{0.1f, 1}, {0.2f, 5}, {0.3f, 3}};
  EXPECT_EQ(out, expected);
}

TEST(SequencePressure, LowestInTierBreaksTiesByLowerPosition) {
  auto seq = *SequenceTiers::create(0, flat_params(EvictionMode::kCumulative), 16);
  const std::vector<float> scores = {1.0f, 1.0f, 0.5f, 1.0f, 1.0f, 1.0f};
  ASSERT_TRUE(seq.add_scores(0, scores).has_value());
  std::vector<ScoredPosition> out;
  EXPECT_EQ(seq.lowest_in_tier(T0, 3, out), 3u);
  const std::vector<ScoredPosition> expected = {{0.5f, 2}, {1.0f, 0}, {1.0f, 1}};
  EXPECT_EQ(out, expected);
}

TEST(SequencePressure, LowestInTierSkipsProtectedTokens) {
  TierParams p = flat_params(EvictionMode::kCumulative);
  p.window_tokens = 2;
  auto seq = *SequenceTiers::create(0, p, 16);
  const std::vector<float> scores = {1.0f, 0.5f, 0.0f, 0.0f};  // 2 and 3: the window
  ASSERT_TRUE(seq.add_scores(0, scores).has_value());
  std::vector<ScoredPosition> out;
  EXPECT_EQ(seq.lowest_in_tier(T0, 10, out), 2u);
  const std::vector<ScoredPosition> expected = {{0.5f, 1}, {1.0f, 0}};
  EXPECT_EQ(out, expected);
}

TEST(SequencePressure, LowestInTierOfT3ListsNothing) {
  SequenceTiers seq = pressured();
  ASSERT_TRUE(seq.propose(std::vector<TierMove>{{1, T2, T3}}).has_value());
  seq.commit();
  std::vector<ScoredPosition> out;
  EXPECT_EQ(seq.lowest_in_tier(T3, 10, out), 0u);
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace kvtier::tier
