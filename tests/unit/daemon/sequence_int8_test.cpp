// SequenceTiers::decide() with the int8 tier T2: the budget, the two T2 rules (T2 only from T1,
// never back to T1), promotion and eviction out of T2, absolute budgets, agreement with the
// sort-based reference, and T2 off leaving decisions as they were.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kvtier/tier/sequence_tiers.hpp"
#include "tier_test_support.hpp"

namespace kvtier::tier {
namespace {

using testing::apply_moves;
using testing::int8_example;
using testing::int8_example_params;
using testing::kInt8ExampleScores;
using testing::reference_decision;
using testing::snapshot;

constexpr Tier T0 = Tier::kT0;
constexpr Tier T1 = Tier::kT1;
constexpr Tier T2 = Tier::kT2;
constexpr Tier T3 = Tier::kT3;

std::vector<TierMove> moves_of(const Decision& d) { return {d.moves.begin(), d.moves.end()}; }

SequenceTiers fresh_example(const TierParams& p) {
  auto seq = *SequenceTiers::create(0, p, 64);
  EXPECT_TRUE(seq.add_scores(0, kInt8ExampleScores).has_value());
  return seq;
}

TEST(SequenceInt8, T0TokensThatTheSplitPutsInT2GoToT1First) {
  // Ascending: 1 .1, 5 .2, 3 .3, 7 .4, 0 .5, 8 .6, 4 .7, 6 .8, 2 .9. T0: 4, 6, 2; T2 by the
  // split: 1, 5, 3; T1: 7, 0, 8. Everything is in T0 now, so 1, 5 and 3 stop in T1.
  auto seq = fresh_example(int8_example_params());
  const Decision& d = seq.decide();
  EXPECT_EQ(d.hbm_budget, 3u);
  EXPECT_EQ(d.int8_budget, 3u);
  const std::vector<TierMove> expected = {{0, T0, T1}, {1, T0, T1}, {3, T0, T1},
                                          {5, T0, T1}, {7, T0, T1}, {8, T0, T1}};
  EXPECT_EQ(moves_of(d), expected);
}

TEST(SequenceInt8, BudgetDemotesExactlyTheLowestT1BoundSurvivorsToT2) {
  auto seq = fresh_example(int8_example_params());
  seq.decide();
  seq.commit();
  // Same scores, second decision: the three lowest of the six non-T0 survivors (1, 5, 3) now sit
  // in T1 and go to T2; 7, 0, 8 stay in T1.
  const Decision& d = seq.decide();
  EXPECT_EQ(d.int8_budget, 3u);
  const std::vector<TierMove> expected = {{1, T1, T2}, {3, T1, T2}, {5, T1, T2}};
  EXPECT_EQ(moves_of(d), expected);
  seq.commit();
  EXPECT_EQ(seq.count(T2), 3u);
}

TEST(SequenceInt8, T2TokenThatTheSplitPutsInT1StaysInT2) {
  auto seq = int8_example(int8_example_params());
  // 1: .1 + .65 = .75, 5: .2 + .65 = .85. Ascending: 3 .3, 7 .4, 0 .5, 8 .6, 4 .7, 1 .75, 6 .8,
  // 5 .85, 2 .9. T0: 6, 5, 2; T2 by the split: 3, 7, 0; T1: 8, 4, 1 — but 1 is in T2 already.
  std::vector<float> add(9, 0.0f);
  add[1] = 0.65f;
  add[5] = 0.65f;
  ASSERT_TRUE(seq.add_scores(0, add).has_value());
  const Decision& d = seq.decide();
  for (const TierMove& m : d.moves) EXPECT_NE(m.position, 1u) << "1 must stay in T2";
  seq.commit();
  EXPECT_EQ(seq.tier_of(1), T2);
}

TEST(SequenceInt8, T2TokenIsPromotedToT0) {
  auto seq = int8_example(int8_example_params());
  std::vector<float> add(9, 0.0f);
  add[1] = 0.65f;
  add[5] = 0.65f;
  ASSERT_TRUE(seq.add_scores(0, add).has_value());
  // As above: 5 (T2) ranks in T0's top three; 4 drops to T1; 7 and 0 (T1) go to T2.
  const Decision& d = seq.decide();
  const std::vector<TierMove> expected = {{0, T1, T2}, {4, T0, T1}, {5, T2, T0}, {7, T1, T2}};
  EXPECT_EQ(moves_of(d), expected);
}

TEST(SequenceInt8, T2TokenIsEvicted) {
  TierParams p = int8_example_params();
  p.evict_ratio = 0.1;  // ⌊0.1·9⌋ = 0 destroyed while 9 tokens are managed
  auto seq = int8_example(p);
  ASSERT_EQ(seq.destroyed(), 0u);
  // Token 9 (score 1.0) makes 10 managed: ⌊0.1·10⌋ = 1, the lowest, 1 (T2, .1), is destroyed.
  // Survivors 9: T0 = 9, 2, 6 (4 drops to T1); T2 by the split: 5, 3, 7 (7 is in T1: demoted).
  const float newest[] = {1.0f};
  ASSERT_TRUE(seq.add_scores(9, newest).has_value());
  const Decision& d = seq.decide();
  const std::vector<TierMove> expected = {{1, T2, T3}, {4, T0, T1}, {7, T1, T2}};
  EXPECT_EQ(moves_of(d), expected);
}

TEST(SequenceInt8, Int8TokensIsAnAbsoluteBudget) {
  TierParams p = int8_example_params();
  p.int8_ratio = 0.9;  // ignored: int8_tokens is set
  p.int8_tokens = 2;
  auto seq = int8_example(p);
  EXPECT_EQ(seq.tier_of(1), T2);
  EXPECT_EQ(seq.tier_of(5), T2);
  EXPECT_EQ(seq.tier_of(3), T1);
  EXPECT_EQ(seq.count(T2), 2u);
}

TEST(SequenceInt8, Int8TokensIsClampedToTheSurvivorsOutsideT0) {
  TierParams p = int8_example_params();
  p.int8_tokens = 100;
  auto seq = fresh_example(p);
  EXPECT_EQ(seq.decide().int8_budget, 6u);  // 9 − n_hbm 3
  seq.commit();
  seq.decide();
  seq.commit();
  EXPECT_EQ(seq.count(T2), 6u);
  EXPECT_EQ(seq.count(T1), 0u);
}

TEST(SequenceInt8, HysteresisHoldsT2TokensBelowTheMarginInT2) {
  TierParams p = int8_example_params();
  p.hysteresis = 0.5;
  auto seq = int8_example(p);
  ASSERT_EQ(seq.tier_of(5), T2);
  // (The margin held 7, 0, 8 in T0 in the first decision; 1, 3, 5 still reached T2.)
  // 5: .2 + .65 = .85 ranks in T0's top three (6, 5, 2), but it is not above c_lo·1.5 =
  // .7·1.5 = 1.05 (c_lo: 4, the highest the split leaves outside T0): it is held, and held
  // outside T0 a T2 token stays in T2.
  std::vector<float> add(9, 0.0f);
  add[5] = 0.65f;
  ASSERT_TRUE(seq.add_scores(0, add).has_value());
  const Decision& d = seq.decide();
  EXPECT_GE(d.hysteresis_held, 1u);
  seq.commit();
  EXPECT_EQ(seq.tier_of(5), T2);
}

TierParams random_int8_params(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> mode(0, 1);  // the prototype refuses T2
  std::uniform_int_distribution<std::uint32_t> small(0, 12);
  std::uniform_real_distribution<double> ratio(0.0, 1.0);
  std::bernoulli_distribution coin(0.5);
  TierParams p;
  p.mode = static_cast<EvictionMode>(mode(rng));
  p.sink_tokens = small(rng);
  p.window_tokens = small(rng) * 4;
  p.interval = 1 + small(rng) % 4;
  p.hbm_ratio = ratio(rng);
  p.evict_ratio = coin(rng) ? ratio(rng) * 0.2 : 0.0;
  p.int8_ratio = ratio(rng);
  if (coin(rng) && coin(rng)) p.int8_tokens = small(rng) * 3;
  if (coin(rng) && coin(rng)) p.hbm_tokens = small(rng) * 5;
  if (coin(rng)) p.hysteresis = ratio(rng) * 0.3;
  return p;
}

// Random chains; at every decision: the reference, no T0 -> T2 and no T2 -> T1 move.
TEST(SequenceInt8, MatchesTheReferenceAndKeepsBothT2RulesOverRandomChains) {
  std::mt19937_64 rng(808);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::size_t t2_moves = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const TierParams p = random_int8_params(rng);
    const auto prompt = static_cast<std::uint32_t>(rng() % 10);
    const std::uint32_t generated = 40 + static_cast<std::uint32_t>(rng() % 160);
    auto seq = *SequenceTiers::create(prompt, p, prompt + generated);
    const bool ties = rng() % 2 == 0;
    for (std::uint32_t t = 0; t < generated; ++t) {
      std::vector<float> row(prompt + t + 1);
      for (float& x : row) x = ties ? static_cast<float>(static_cast<int>(u(rng) * 3)) : u(rng);
      ASSERT_TRUE(seq.add_scores(0, row).has_value());
      seq.end_step();
      if (!seq.due()) continue;
      SCOPED_TRACE(::testing::Message() << "trial " << trial << " step " << seq.step());
      const std::vector<Tier> before = snapshot(seq);
      const std::vector<Tier> expected = reference_decision(seq);
      const Decision& d = seq.decide();
      for (const TierMove& m : d.moves) {
        ASSERT_FALSE(m.from == T0 && m.to == T2) << "position " << m.position;
        ASSERT_FALSE(m.from == T2 && m.to == T1) << "position " << m.position;
        t2_moves += m.to == T2 ? 1u : 0u;
      }
      ASSERT_EQ(apply_moves(before, d.moves), expected);
      seq.commit();
    }
  }
  EXPECT_GT(t2_moves, 0u);  // the chains did exercise T2
}

// T2 off (the default, spelled out): the same chains as before T2 existed, never a T2 token, a
// zero int8 budget, and the three-tier reference.
TEST(SequenceInt8, T2OffGivesTheThreeTierDecisionsOverRandomChains) {
  std::mt19937_64 rng(909);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int trial = 0; trial < 100; ++trial) {
    TierParams p = random_int8_params(rng);
    p.mode = static_cast<EvictionMode>(rng() % 3);
    p.int8_ratio = 0.0;
    p.int8_tokens = 0;
    auto seq = *SequenceTiers::create(3, p, 203);
    for (std::uint32_t t = 0; t < 200; ++t) {
      std::vector<float> row(4 + t);
      for (float& x : row) x = u(rng);
      ASSERT_TRUE(seq.add_scores(0, row).has_value());
      seq.end_step();
      if (!seq.due()) continue;
      const std::vector<Tier> before = snapshot(seq);
      const std::vector<Tier> expected = reference_decision(seq);
      const Decision& d = seq.decide();
      ASSERT_EQ(d.int8_budget, 0u);
      for (const TierMove& m : d.moves) ASSERT_NE(m.to, T2);
      ASSERT_EQ(apply_moves(before, d.moves), expected) << "trial " << trial;
      seq.commit();
      ASSERT_EQ(seq.count(T2), 0u);
    }
  }
}

}  // namespace
}  // namespace kvtier::tier
