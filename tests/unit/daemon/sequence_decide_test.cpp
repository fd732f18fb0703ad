// SequenceTiers::decide(): a hand-computed example, agreement with the sort-based reference,
// protection, budgets, differential moves and hysteresis.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kvtier/tier/sequence_tiers.hpp"
#include "tier_test_support.hpp"

namespace kvtier::tier {
namespace {

using testing::apply_moves;
using testing::reference_decision;
using testing::snapshot;

constexpr Tier T0 = Tier::kT0;
constexpr Tier T1 = Tier::kT1;
constexpr Tier T3 = Tier::kT3;

TEST(SequenceDecide, HandComputedTwentyTokenExample) {
  // P = 4 (0..3), sinks 4..5, window 16..19: managed 6..15, r = 20%, β = 50%, cumulative.
  TierParams p;
  p.sink_tokens = 2;
  p.window_tokens = 4;
  p.interval = 1;
  p.evict_ratio = 0.2;
  p.hbm_ratio = 0.5;
  auto seq = *SequenceTiers::create(4, p, 64);
  std::vector<float> s(20, 1.0f);
  //                    6     7     8     9     10    11    12     13    14    15
  const float m[10] = {0.6f, 0.1f, 0.9f, 0.3f, 0.3f, 0.7f, 0.05f, 0.6f, 0.1f, 0.8f};
  for (int i = 0; i < 10; ++i) s[6 + i] = m[i];
  ASSERT_TRUE(seq.add_scores(0, s).has_value());
  EXPECT_EQ(seq.managed(), 10u);

  // allowed = ⌊0.2·10⌋ = 2: 12 (0.05) and 7 (0.1; ties with 14, lower position ranks lower).
  // Survivors ascending: 14 .1, 9 .3, 10 .3, 6 .6, 13 .6, 11 .7, 15 .8, 8 .9; ⌊0.5·8⌋ = 4 in T0:
  // 13, 11, 15, 8 (6 ties with 13 and ranks lower). T1: 14, 9, 10, 6.
  const Decision& d = seq.decide();
  EXPECT_EQ(d.candidates, 10u);
  EXPECT_EQ(d.evict_count, 2u);
  EXPECT_EQ(d.hbm_budget, 4u);
  const std::vector<TierMove> expected = {
      {6, T0, T1}, {7, T0, T3}, {9, T0, T1}, {10, T0, T1}, {12, T0, T3}, {14, T0, T1}};
  EXPECT_EQ(std::vector<TierMove>(d.moves.begin(), d.moves.end()), expected);
  seq.commit();
  const std::vector<Tier> tiers = {T0, T0, T0, T0, T0, T0,  // prompt + sinks
                                   T1, T3, T0, T1, T1, T0, T3, T0, T1, T0,
                                   T0, T0, T0, T0};  // window
  EXPECT_EQ(snapshot(seq), tiers);
  EXPECT_EQ(seq.destroyed(), 2u);
  EXPECT_DOUBLE_EQ(seq.destroyed_fraction(), 0.2);

  // Token 20 arrives: 16 (score 1.0) leaves the window. managed = 11, ⌊0.2·11⌋ = 2 are already
  // destroyed: no eviction. 9 live candidates, ⌊0.5·9⌋ = 4 in T0: 11, 15, 8, 16; 13 now ranks
  // fifth from the top and is the only token that moves.
  const float newest[] = {1.0f};
  ASSERT_TRUE(seq.add_scores(20, newest).has_value());
  EXPECT_EQ(seq.managed(), 11u);
  const Decision& d2 = seq.decide();
  EXPECT_EQ(d2.evict_count, 0u);
  EXPECT_EQ(d2.candidates, 9u);
  const std::vector<TierMove> expected2 = {{13, T0, T1}};
  EXPECT_EQ(std::vector<TierMove>(d2.moves.begin(), d2.moves.end()), expected2);
  seq.commit();
}

TierParams random_params(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> mode(0, 2);
  std::uniform_int_distribution<std::uint32_t> small(0, 12);
  std::uniform_real_distribution<double> ratio(0.0, 1.0);
  std::bernoulli_distribution coin(0.5);
  TierParams p;
  p.mode = static_cast<EvictionMode>(mode(rng));
  p.sink_tokens = small(rng);
  p.window_tokens = small(rng) * 4;
  p.interval = 1 + small(rng) % 4;
  p.hbm_ratio = ratio(rng);
  p.evict_ratio = coin(rng) ? ratio(rng) * 0.3 : 0.0;
  if (coin(rng) && coin(rng)) p.hbm_tokens = small(rng) * 5;
  if (coin(rng) && coin(rng)) p.evict_tokens = small(rng) * 2;
  if (coin(rng)) p.hysteresis = ratio(rng) * 0.3;
  return p;
}

// Drives random chains; at every decision checks the reference, protection, budgets and that the
// moves turn the old assignment into the new one.
TEST(SequenceDecide, MatchesTheReferenceAndProtectsPromptSinksAndWindowOverRandomChains) {
  std::mt19937_64 rng(2024);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::uniform_int_distribution<int> shape(0, 2);
  for (int trial = 0; trial < 300; ++trial) {
    const TierParams p = random_params(rng);
    const std::uint32_t prompt = static_cast<std::uint32_t>(rng() % 20);
    const std::uint32_t generated = 50 + static_cast<std::uint32_t>(rng() % 250);
    auto seq = *SequenceTiers::create(prompt, p, prompt + generated);
    const int score_shape = shape(rng);  // 0 uniform, 1 few distinct values (ties), 2 mostly zero
    auto draw = [&] {
      const float x = u(rng);
      return score_shape == 0 ? x : score_shape == 1 ? static_cast<float>(static_cast<int>(x * 3)) : (x < 0.8f ? 0.0f : x);
    };
    for (std::uint32_t t = 0; t < generated; ++t) {
      std::vector<float> row(prompt + t + 1);
      for (float& x : row) x = draw();
      ASSERT_TRUE(seq.add_scores(0, row).has_value());
      seq.end_step();
      if (!seq.due()) continue;
      SCOPED_TRACE(::testing::Message() << "trial " << trial << " step " << seq.step() << " mode "
                                        << eviction_mode_name(p.mode));
      const std::vector<Tier> before = snapshot(seq);
      const std::vector<Tier> expected = reference_decision(seq);
      const Decision& d = seq.decide();
      for (std::size_t i = 1; i < d.moves.size(); ++i) {
        ASSERT_LT(d.moves[i - 1].position, d.moves[i].position);
      }
      for (const TierMove& m : d.moves) ASSERT_NE(m.from, m.to);
      ASSERT_EQ(apply_moves(before, d.moves), expected);
      seq.commit();
      ASSERT_EQ(snapshot(seq), expected);
      std::uint32_t counts[4] = {};
      for (std::uint32_t pos = 0; pos < seq.length(); ++pos) {
        ++counts[tier_index(seq.tier_of(pos))];
        if (seq.is_protected(pos)) {
          ASSERT_EQ(seq.tier_of(pos), T0) << "protected " << pos;
        }
      }
      for (Tier tier : {T0, T1, Tier::kT2, T3}) ASSERT_EQ(seq.count(tier), counts[tier_index(tier)]);
    }
  }
}

TEST(SequenceDecide, TierCountsMatchRatioBudgets) {
  TierParams p;
  p.sink_tokens = 0;
  p.window_tokens = 0;
  p.evict_ratio = 0.1;
  p.hbm_ratio = 0.3;
  std::vector<float> s(1000);
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (float& x : s) x = u(rng);
  auto seq = *SequenceTiers::create(0, p, 1000);
  ASSERT_TRUE(seq.add_scores(0, s).has_value());
  seq.decide();
  seq.commit();
  EXPECT_EQ(seq.count(T3), 100u);  // ⌊0.1·1000⌋
  EXPECT_EQ(seq.count(T0), 270u);  // ⌊0.3·900⌋
  EXPECT_EQ(seq.count(T1), 630u);
}

TEST(SequenceDecide, DecisionsWithAMappedMoveBufferMatchTheReference) {
  // 4.5M candidates need a 36 MB move buffer, above kMappedMoveBufferBytes: the mapped path.
  constexpr std::uint32_t kTokens = 4'500'000;
  static_assert(std::size_t{kTokens} * sizeof(TierMove) > SequenceTiers::kMappedMoveBufferBytes);
  TierParams p;
  p.evict_ratio = 0.03;
  std::vector<float> s(kTokens);
  std::mt19937_64 rng(9);
  std::lognormal_distribution<float> dist(0.0f, 2.0f);
  for (float& x : s) x = dist(rng);
  auto seq = *SequenceTiers::create(0, p, kTokens);
  ASSERT_TRUE(seq.add_scores(0, s).has_value());
  const std::vector<Tier> expected = reference_decision(seq);
  for (int round = 0; round < 2; ++round) {  // a rollback releases the mapping; decide again
    const Decision& d = seq.decide();
    EXPECT_EQ(apply_moves(snapshot(seq), d.moves), expected);
    if (round == 0) seq.rollback();
  }
  seq.commit();
  EXPECT_EQ(snapshot(seq), expected);
}

TEST(SequenceDecide, TierCountsMatchAbsoluteBudgets) {
  TierParams p;
  p.sink_tokens = 4;
  p.window_tokens = 16;
  p.evict_tokens = 37;
  p.hbm_tokens = 200;
  std::vector<float> s(1000);
  std::mt19937_64 rng(6);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (float& x : s) x = u(rng);
  auto seq = *SequenceTiers::create(10, p, 1000);
  ASSERT_TRUE(seq.add_scores(0, s).has_value());
  seq.decide();
  seq.commit();
  EXPECT_EQ(seq.count(T3), 37u);
  EXPECT_EQ(seq.count(T0), 200u + 10 + 4 + 16);  // budget + protected
  EXPECT_EQ(seq.count(T1), 1000u - 37 - 230);
  // The absolute evict cap is cumulative: nothing more is destroyed later.
  seq.decide();
  seq.commit();
  EXPECT_EQ(seq.count(T3), 37u);
}

TEST(SequenceDecide, NoMovesWhenNothingChanges) {
  TierParams p;
  p.sink_tokens = 0;
  p.window_tokens = 0;
  std::vector<float> s = {5, 1, 4, 2, 3, 6};
  auto seq = *SequenceTiers::create(0, p, 16);
  ASSERT_TRUE(seq.add_scores(0, s).has_value());
  EXPECT_EQ(seq.decide().moves.size(), 3u);
  seq.commit();
  EXPECT_TRUE(seq.decide().moves.empty());
  seq.commit();
}

// Two tokens, β = 0.5: one T0 place. They start clearly apart (token 1 in T0, token 0 in T1),
// then leapfrog each other by 0.02 every round.
std::uint32_t flips_over_rounds(double hysteresis) {
  TierParams p;
  p.sink_tokens = 0;
  p.window_tokens = 0;
  p.interval = 1;
  p.hbm_ratio = 0.5;
  p.hysteresis = hysteresis;
  auto seq = *SequenceTiers::create(0, p, 4);
  const float start[] = {0.5f, 1.0f};
  EXPECT_TRUE(seq.add_scores(0, start).has_value());
  seq.decide();
  seq.commit();
  EXPECT_EQ(seq.tier_of(0), T1);
  EXPECT_EQ(seq.tier_of(1), T0);
  std::uint32_t moves = 0;
  for (int round = 0; round < 10; ++round) {
    const float bump[] = {round == 0 ? 0.52f : 0.04f};  // 1.02 vs 1.0, then +0.04 each
    EXPECT_TRUE(seq.add_scores(static_cast<std::uint32_t>(round % 2), bump).has_value());
    const Decision& d = seq.decide();
    moves += static_cast<std::uint32_t>(d.moves.size());
    seq.commit();
    EXPECT_EQ(seq.count(T0), 1u);  // the margin holds tokens, it never grows T0 here
  }
  return moves;
}

TEST(SequenceDecide, HysteresisPreventsFlipFlopForNearCutScores) {
  EXPECT_EQ(flips_over_rounds(0.0), 20u);  // both tokens swap every round
  EXPECT_EQ(flips_over_rounds(0.1), 0u);
}

TEST(SequenceDecide, HysteresisStillSwapsClearlySeparatedTokens) {
  TierParams p;
  p.sink_tokens = 0;
  p.window_tokens = 0;
  p.hbm_ratio = 0.5;
  p.hysteresis = 0.1;
  auto seq = *SequenceTiers::create(0, p, 4);
  const float start[] = {0.5f, 1.0f};
  ASSERT_TRUE(seq.add_scores(0, start).has_value());
  seq.decide();
  seq.commit();
  ASSERT_EQ(seq.tier_of(0), T1);
  const float bump[] = {1.5f};  // token 0: 2.0 vs 1.0, far beyond 10%
  ASSERT_TRUE(seq.add_scores(0, bump).has_value());
  const Decision& d = seq.decide();
  const std::vector<TierMove> expected = {{0, T1, T0}, {1, T0, T1}};
  EXPECT_EQ(std::vector<TierMove>(d.moves.begin(), d.moves.end()), expected);
  EXPECT_EQ(d.hysteresis_held, 0u);
  seq.commit();
}

TEST(SequenceDecide, HysteresisBudgetDeviationIsBoundedByTheBand) {
  std::mt19937_64 rng(99);
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  for (int trial = 0; trial < 50; ++trial) {
    TierParams p;
    p.sink_tokens = 0;
    p.window_tokens = 0;
    p.hbm_ratio = 0.4;
    p.evict_ratio = 0.05;
    p.hysteresis = 0.05;
    auto seq = *SequenceTiers::create(0, p, 500);
    std::vector<float> s(500);
    for (int round = 0; round < 5; ++round) {
      for (float& x : s) x = u(rng);
      ASSERT_TRUE(seq.add_scores(0, s).has_value());
      const Decision& d = seq.decide();
      const std::uint32_t budget = d.hbm_budget;
      const std::uint32_t held = d.hysteresis_held;
      seq.commit();
      const auto t0 = static_cast<std::int64_t>(seq.count(T0));
      EXPECT_LE(std::abs(t0 - static_cast<std::int64_t>(budget)), static_cast<std::int64_t>(held));
    }
  }
}

}  // namespace
}  // namespace kvtier::tier
