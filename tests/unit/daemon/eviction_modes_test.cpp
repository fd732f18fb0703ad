// The three eviction-knob semantics: cumulative never exceeds r, paper-algorithm compounds,
// paper-prototype keeps T1 immune; plus the destroyed-fraction table of research §3.4.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kvtier/tier/sequence_tiers.hpp"
#include "kvtier/tier/simulate.hpp"
#include "tier_test_support.hpp"

namespace kvtier::tier {
namespace {

constexpr Tier T0 = Tier::kT0;
constexpr Tier T1 = Tier::kT1;
constexpr Tier T3 = Tier::kT3;

TierParams bare(EvictionMode mode, double r, double beta) {
  TierParams p;
  p.sink_tokens = 0;
  p.window_tokens = 0;
  p.interval = 1;
  p.mode = mode;
  p.evict_ratio = r;
  p.hbm_ratio = beta;
  return p;
}

// 16 tokens scored 1..16, no protection, r = 25%, β = 50%, three rounds on unchanged scores.
std::vector<std::vector<Tier>> three_rounds(EvictionMode mode) {
  auto seq = *SequenceTiers::create(0, bare(mode, 0.25, 0.5), 16);
  std::vector<float> s(16);
  for (int i = 0; i < 16; ++i) s[i] = static_cast<float>(i + 1);
  EXPECT_TRUE(seq.add_scores(0, s).has_value());
  std::vector<std::vector<Tier>> rounds;
  for (int round = 0; round < 3; ++round) {
    seq.decide();
    seq.commit();
    rounds.push_back(testing::snapshot(seq));
  }
  return rounds;
}

std::vector<Tier> tiers_from(const std::string& code) {
  std::vector<Tier> out;
  for (char c : code) out.push_back(c == '0' ? T0 : c == '1' ? T1 : T3);
  return out;
}

TEST(EvictionModes, PaperAlgorithmCompoundsHandComputed) {
  // Round 1: |U| = 16, ⌊4⌋ evicted (0-3); 12 survive, ⌊6⌋ in T0 (10-15).
  // Round 2: |U| = 12, ⌊3⌋ evicted (4-6); 9 survive, ⌊4.5⌋ = 4 in T0 (12-15).
  // Round 3: |U| = 9, ⌊2.25⌋ = 2 evicted (7-8); 7 survive, ⌊3.5⌋ = 3 in T0 (13-15).
  const auto rounds = three_rounds(EvictionMode::kPaperAlgorithm);
  EXPECT_EQ(rounds[0], tiers_from("3333111111000000"));
  EXPECT_EQ(rounds[1], tiers_from("3333333111110000"));
  EXPECT_EQ(rounds[2], tiers_from("3333333331111000"));  // 9 of 16 = 56% destroyed at r = 25%
}

TEST(EvictionModes, CumulativeDoesNotCompoundHandComputed) {
  // Round 1 as above; then managed = 16, allowed ⌊4⌋ = 4 = destroyed: nothing more goes.
  const auto rounds = three_rounds(EvictionMode::kCumulative);
  for (const auto& tiers : rounds) EXPECT_EQ(tiers, tiers_from("3333111111000000"));
}

TEST(EvictionModes, CumulativeDestroyedFractionNeverExceedsR) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (double r : {0.01, 0.03, 0.05, 0.1, 0.2, 0.5}) {
    TierParams p;  // defaults: k_s 4, k_w 128, Δ 64
    p.evict_ratio = r;
    p.interval = 16;
    auto seq = *SequenceTiers::create(50, p, 50 + 3000);
    std::uint32_t rounds = 0;
    for (std::uint32_t t = 0; t < 3000; ++t) {
      std::vector<float> row(51 + t);
      for (float& x : row) x = u(rng);
      ASSERT_TRUE(seq.add_scores(0, row).has_value());
      seq.end_step();
      if (seq.due()) {
        seq.decide();
        seq.commit();
        ++rounds;
        ASSERT_LE(seq.destroyed(), testing::ref_floor(r, seq.managed())) << "r " << r;
      }
      ASSERT_LE(seq.destroyed_fraction(), r + 1e-12) << "r " << r << " step " << t;
    }
    EXPECT_EQ(rounds, 3000u / 16);
    EXPECT_GT(seq.destroyed_fraction(), r * 0.95) << "the budget is actually used";
  }
}

TEST(EvictionModes, PaperPrototypeKeepsT1Immune) {
  auto seq = *SequenceTiers::create(0, bare(EvictionMode::kPaperPrototype, 0.25, 0.5), 40);
  std::vector<float> s(40);
  for (int i = 0; i < 40; ++i) s[i] = static_cast<float>(i + 1);
  ASSERT_TRUE(seq.add_scores(0, s).has_value());
  // n = 40: evict ⌊10⌋ (0-9), keep ⌊20⌋ (20-39), middle 10 → T1 (10-19).
  const Decision& d1 = seq.decide();
  EXPECT_EQ(d1.evict_count, 10u);
  EXPECT_EQ(d1.hbm_budget, 20u);
  seq.commit();
  EXPECT_EQ(seq.count(T1), 10u);
  // T1 tokens become the most important ones: they are still never promoted nor re-ranked.
  std::vector<float> boost(20, 0.0f);
  for (int i = 10; i < 20; ++i) boost[i] = 1000.0f;
  ASSERT_TRUE(seq.add_scores(0, boost).has_value());
  // n = 20 (the T0 tokens only): evict ⌊5⌋ (20-24), keep ⌊10⌋ (30-39), T1 25-29.
  const Decision& d2 = seq.decide();
  EXPECT_EQ(d2.candidates, 20u);
  for (const TierMove& m : d2.moves) {
    EXPECT_EQ(m.from, T0) << "T1 token " << m.position << " moved";
  }
  seq.commit();
  for (std::uint32_t pos = 10; pos < 20; ++pos) EXPECT_EQ(seq.tier_of(pos), T1) << pos;
  for (std::uint32_t pos = 20; pos < 25; ++pos) EXPECT_EQ(seq.tier_of(pos), T3) << pos;
  for (std::uint32_t pos = 25; pos < 30; ++pos) EXPECT_EQ(seq.tier_of(pos), T1) << pos;
  EXPECT_EQ(seq.destroyed(), 15u);
  // n = 10 T0 tokens: evict 2, keep 5. Then 8 < 10 candidates: the round is skipped.
  seq.decide();
  seq.commit();
  EXPECT_EQ(seq.count(T0), 5u);
  const Decision& skipped = seq.decide();
  EXPECT_TRUE(skipped.skipped);
  EXPECT_TRUE(skipped.moves.empty());
  seq.rollback();
}

TEST(EvictionModes, PaperPrototypeKeepUsesNNotSurvivors) {
  // n = 100, r = 10%, β = 50%: keep ⌊50⌋ (not ⌊0.5·90⌋ = 45), evict 10, T1 40.
  auto seq = *SequenceTiers::create(0, bare(EvictionMode::kPaperPrototype, 0.1, 0.5), 100);
  std::vector<float> s(100);
  for (int i = 0; i < 100; ++i) s[i] = static_cast<float>(i);
  ASSERT_TRUE(seq.add_scores(0, s).has_value());
  seq.decide();
  seq.commit();
  EXPECT_EQ(seq.count(T0), 50u);
  EXPECT_EQ(seq.count(T1), 40u);
  EXPECT_EQ(seq.count(T3), 10u);
}

TEST(EvictionModes, SimulationMatchesResearchAnchorsAndPrintsTheTable) {
  // research/seed-algorithms.md §3.4 (prompt ~80): per-round r destroys 30.8% (3%) and 63.5%
  // (10%) of a 2,047-token chain, 53.6% (3%) of 4,096; the prototype at (β 0.5, r 10%) on 1,188
  // tokens destroys 15.2% and ends with ~776 tokens in DDR.
  auto paper = [](double r, std::uint32_t len) {
    return simulate_destroyed_fraction(EvictionMode::kPaperAlgorithm, r, 0.5, 80, len, 1);
  };
  EXPECT_NEAR(paper(0.03, 2047), 0.308, 0.002);
  EXPECT_NEAR(paper(0.10, 2047), 0.635, 0.002);
  EXPECT_NEAR(paper(0.03, 4096), 0.536, 0.002);
  TierParams proto;
  proto.mode = EvictionMode::kPaperPrototype;
  proto.evict_ratio = 0.10;
  proto.hbm_ratio = 0.5;
  const ChainSimulation sim = *simulate_chain(proto, 80, 1188, 1);
  EXPECT_NEAR(sim.destroyed_fraction, 0.152, 0.002);
  EXPECT_NEAR(sim.t1, 776, 10);

  std::string table = "destroyed fraction, 2000 generated tokens, prompt 100, beta 0.5\n"
                      "r       cumulative  paper-algorithm  paper-prototype\n";
  for (double r : {0.03, 0.05, 0.10}) {
    const double cumulative = simulate_destroyed_fraction(EvictionMode::kCumulative, r, 0.5, 100, 2000, 1);
    const double algorithm = simulate_destroyed_fraction(EvictionMode::kPaperAlgorithm, r, 0.5, 100, 2000, 1);
    const double prototype = simulate_destroyed_fraction(EvictionMode::kPaperPrototype, r, 0.5, 100, 2000, 1);
    EXPECT_LE(cumulative, r);
    if (r == 0.03) {
      EXPECT_GE(algorithm, 5 * r);
    }
    char line[96];
    std::snprintf(line, sizeof line, "%-7.2f %-11.4f %-16.4f %.4f\n", r, cumulative, algorithm, prototype);
    table += line;
    ::testing::Test::RecordProperty("destroyed_r" + std::to_string(static_cast<int>(r * 100)),
                                    std::to_string(cumulative) + "," + std::to_string(algorithm) +
                                        "," + std::to_string(prototype));
  }
  std::printf("%s", table.c_str());
}

}  // namespace
}  // namespace kvtier::tier
