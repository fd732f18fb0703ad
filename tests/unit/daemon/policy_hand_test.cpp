// Each policy on a small sequence whose outcome is worked out by hand in the comments.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kvtier/tier/policy.hpp"
#include "kvtier/tier/sequence_tiers.hpp"
#include "tier_test_support.hpp"

namespace kvtier::tier {
namespace {

using testing::snapshot;

constexpr Tier T0 = Tier::kT0;
constexpr Tier T1 = Tier::kT1;
constexpr Tier T3 = Tier::kT3;

TierParams small_params(PolicyKind policy, std::uint32_t sinks, std::uint32_t window) {
  TierParams p;
  p.policy = policy;
  p.sink_tokens = sinks;
  p.window_tokens = window;
  p.interval = 1;
  return p;
}

std::vector<Tier> decide_and_commit(SequenceTiers& seq) {
  seq.decide();
  seq.commit();
  return snapshot(seq);
}

// 12 tokens, prompt 0..3; window 10..11. Scores chosen so the prompt holds the lowest one.
const std::vector<float> kTwelveScores = {5, 5, 0.1f, 3.0f, 0.4f, 2.0f, 0.2f, 1.0f, 0.3f, 0.6f, 0, 0};

TEST(PolicyH2o, RanksThePromptWithEverythingElseAndKeepsHeavyHitters) {
  // h2o does not protect the prompt: sinks are positions 0, 1; managed 2..9 (8 tokens).
  // r = 25%: ⌊0.25·8⌋ = 2 lowest → T3: 2 (0.1), 6 (0.2). Survivors ascending: 8 .3, 4 .4, 9 .6,
  // 7 1.0, 5 2.0, 3 3.0; ⌊0.5·6⌋ = 3 heavy hitters in T0: 7, 5, 3. T1: 8, 4, 9.
  TierParams p = small_params(PolicyKind::kH2o, 2, 2);
  p.evict_ratio = 0.25;
  auto seq = *SequenceTiers::create(4, p, 64);
  ASSERT_TRUE(seq.add_scores(0, kTwelveScores).has_value());
  EXPECT_EQ(seq.managed(), 8u);
  EXPECT_EQ(decide_and_commit(seq),
            (std::vector<Tier>{T0, T0, T3, T0, T1, T0, T3, T0, T1, T1, T0, T0}));
}

TEST(PolicyH2o, PaperOnTheSameScoresProtectsThePrompt) {
  // paper: prompt 0..3 and sinks 4, 5 protected; managed 6..9. ⌊0.25·4⌋ = 1 → T3: 6 (0.2).
  // Survivors 8 .3, 9 .6, 7 1.0; ⌊0.5·3⌋ = 1 in T0: 7. T1: 8, 9. Prompt token 2 (0.1) stays T0.
  TierParams p = small_params(PolicyKind::kPaper, 2, 2);
  p.evict_ratio = 0.25;
  auto seq = *SequenceTiers::create(4, p, 64);
  ASSERT_TRUE(seq.add_scores(0, kTwelveScores).has_value());
  const std::vector<Tier> paper = decide_and_commit(seq);
  EXPECT_EQ(paper, (std::vector<Tier>{T0, T0, T0, T0, T0, T0, T3, T0, T1, T1, T0, T0}));

  // h2o with the prompt protected explicitly ranks exactly like paper.
  p.policy = PolicyKind::kH2o;
  p.protect_prompt = true;
  auto h2o = *SequenceTiers::create(4, p, 64);
  ASSERT_TRUE(h2o.add_scores(0, kTwelveScores).has_value());
  EXPECT_EQ(decide_and_commit(h2o), paper);
}

TEST(PolicyStreamingLlm, KeepsSinksAndTheNewestTokensWhateverTheScores) {
  // Sinks 0, 1 (the prompt is not protected); managed 2..9. Scores fall with position, so any
  // score-based policy would do the opposite. r = 25% → the 2 oldest (2, 3) → T3; of 4..9 the
  // ⌊0.5·6⌋ = 3 newest (7, 8, 9) stay T0, 4..6 go to T1.
  TierParams p = small_params(PolicyKind::kStreamingLlm, 2, 2);
  p.evict_ratio = 0.25;
  auto seq = *SequenceTiers::create(4, p, 64);
  const std::vector<float> falling = {12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1};
  ASSERT_TRUE(seq.add_scores(0, falling).has_value());
  EXPECT_EQ(decide_and_commit(seq),
            (std::vector<Tier>{T0, T0, T3, T3, T1, T1, T1, T0, T0, T0, T0, T0}));
}

TEST(PolicyRandom, KeepsThePromptEvenWhenEveryOtherTokenIsEvicted) {
  TierParams p = small_params(PolicyKind::kRandom, 0, 2);
  p.evict_ratio = 1.0;
  auto seq = *SequenceTiers::create(4, p, 64);
  ASSERT_TRUE(seq.add_scores(0, std::vector<float>(12, 1.0f)).has_value());
  EXPECT_EQ(decide_and_commit(seq),
            (std::vector<Tier>{T0, T0, T0, T0, T3, T3, T3, T3, T3, T3, T0, T0}));
}

TEST(PolicyRandom, SplitsByTheDocumentedDrawAndRedrawsEveryDecision) {
  // Managed 4..11 (prompt 0..3, window 12..13). r = 25%: the 2 smallest draws → T3; of the
  // other 6 the 3 largest → T0.
  TierParams p = small_params(PolicyKind::kRandom, 0, 2);
  p.evict_ratio = 0.25;
  p.seed = 7;
  auto seq = *SequenceTiers::create(4, p, 64);
  ASSERT_TRUE(seq.add_scores(0, std::vector<float>(14, 1.0f)).has_value());
  seq.end_step();  // step 1
  std::vector<std::pair<double, std::uint32_t>> draws;
  for (std::uint32_t pos = 4; pos < 12; ++pos) draws.emplace_back(random_draw(7, 1, pos), pos);
  std::sort(draws.begin(), draws.end());
  std::vector<Tier> expected(14, T0);
  for (std::size_t r = 0; r < draws.size(); ++r) {
    expected[draws[r].second] = r < 2 ? T3 : r < 5 ? T1 : T0;
  }
  EXPECT_EQ(decide_and_commit(seq), expected);

  // Step 2 re-draws: with nothing left to evict (cumulative r) the T0/T1 split follows the new
  // draws over the 6 survivors.
  seq.end_step();
  std::vector<std::pair<double, std::uint32_t>> again;
  for (std::uint32_t pos = 4; pos < 12; ++pos) {
    if (seq.tier_of(pos) != T3) again.emplace_back(random_draw(7, 2, pos), pos);
  }
  std::sort(again.begin(), again.end());
  for (std::size_t r = 0; r < again.size(); ++r) expected[again[r].second] = r < 3 ? T1 : T0;
  EXPECT_EQ(decide_and_commit(seq), expected);
}

TEST(PolicyRandom, EveryCandidateIsEquallyLikelyToStayInHbm) {
  // 8 candidates, 3 kept in T0 after 2 evictions: P(T0) = 3/8 for each, over 2,000 seeds.
  std::vector<int> kept(8, 0);
  constexpr int kSeeds = 2000;
  for (int s = 0; s < kSeeds; ++s) {
    TierParams p = small_params(PolicyKind::kRandom, 0, 0);
    p.evict_ratio = 0.25;
    p.seed = static_cast<std::uint64_t>(s);
    auto seq = *SequenceTiers::create(0, p, 8);
    ASSERT_TRUE(seq.add_scores(0, std::vector<float>(8, 1.0f)).has_value());
    decide_and_commit(seq);
    for (std::uint32_t pos = 0; pos < 8; ++pos) kept[pos] += seq.tier_of(pos) == T0 ? 1 : 0;
  }
  for (int k : kept) EXPECT_NEAR(static_cast<double>(k) / kSeeds, 3.0 / 8.0, 0.05);
}

TEST(PolicyVase, ReservesLargestValueRangesThenSamplesByAttention) {
  // Prompt 0..1 not protected; sinks 0, 1; window 10, 11; managed 2..9 (8 candidates).
  // T0 budget 4 (hbm_tokens), 2 of them reserved for value ranges: 3 (9.0) and 8 (7.0).
  // Recent attention is positive only at 5 and 6, so they are the only tokens the sampler can
  // pick and fill the other 2 T0 slots whatever the seed. The rest have key 0 and rank by
  // position: evict_tokens = 3 → 2, 4, 7 to T3; 9 to T1.
  TierParams p = small_params(PolicyKind::kVase, 2, 2);
  p.hbm_tokens = 4;
  p.evict_tokens = 3;
  p.value_protect_tokens = 2;
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    p.seed = seed;
    auto seq = *SequenceTiers::create(2, p, 64);
    std::vector<float> ranges(12, 1.0f);
    ranges[3] = 9.0f;
    ranges[8] = 7.0f;
    ranges[0] = 100.0f;  // a sink: protected anyway, never competes for a reservation
    ASSERT_TRUE(seq.add_value_ranges(0, ranges).has_value());
    std::vector<float> attention(12, 0.0f);
    attention[5] = 0.5f;
    attention[6] = 0.25f;
    ASSERT_TRUE(seq.add_scores(0, attention).has_value());
    EXPECT_EQ(decide_and_commit(seq),
              (std::vector<Tier>{T0, T0, T3, T0, T3, T0, T0, T3, T0, T1, T0, T0}))
        << "seed " << seed;
  }
}

TEST(PolicyVase, SamplesWithoutReplacementProportionalToAttention) {
  // Candidates 0, 1, 2 with attention 2 : 1 : 1 and 2 T0 slots, no reservation. Token 0 is left
  // out only if 1 and 2 are drawn first: P = (1/4)(1/3) + (1/4)(1/3) = 1/6 (after drawing 1 the
  // weights left are 2 : 1), so P(0 in T0) = 5/6 and P(1) = P(2) = (2 − 5/6)/2 = 7/12.
  // (With-replacement or plain proportional keeping would give 1 and 1/2.)
  std::vector<int> kept(3, 0);
  constexpr int kSeeds = 4000;
  for (int s = 0; s < kSeeds; ++s) {
    TierParams p = small_params(PolicyKind::kVase, 0, 0);
    p.hbm_tokens = 2;
    p.value_protect_ratio = 0.0;
    p.seed = static_cast<std::uint64_t>(s);
    auto seq = *SequenceTiers::create(0, p, 3);
    const float attention[] = {2.0f, 1.0f, 1.0f};
    ASSERT_TRUE(seq.add_scores(0, attention).has_value());
    decide_and_commit(seq);
    for (std::uint32_t pos = 0; pos < 3; ++pos) kept[pos] += seq.tier_of(pos) == T0 ? 1 : 0;
  }
  EXPECT_NEAR(kept[0] / double{kSeeds}, 5.0 / 6.0, 0.03);
  EXPECT_NEAR(kept[1] / double{kSeeds}, 7.0 / 12.0, 0.03);
  EXPECT_NEAR(kept[2] / double{kSeeds}, 7.0 / 12.0, 0.03);
}

// A ranking context over a whole sequence with no protection, for r_kv's keys.
struct RKvFixture {
  TierParams params;
  SequenceTiers seq;
  std::vector<float> scratch;

  static RKvFixture make(const std::vector<float>& attention, const std::vector<float>& digests,
                         std::uint32_t dim, std::uint32_t horizon) {
    TierParams p = small_params(PolicyKind::kRKv, 0, 0);
    p.redundancy_horizon = horizon;
    const auto n = static_cast<std::uint32_t>(attention.size());
    RKvFixture f{p, *SequenceTiers::create(0, p, n), {}};
    EXPECT_TRUE(f.seq.add_scores(0, attention).has_value());
    if (dim > 0) {
      EXPECT_TRUE(f.seq.add_key_digests(0, digests, dim).has_value());
    }
    return f;
  }
};

TEST(PolicyRKv, KeysAreImportanceMinusRedundancyWithTheNewestDuplicateSpared) {
  // Digests 0:(1,0) 1:(1,0) 2:(0,1) 3:(1,0); equal attention → I = 1/4 each (pooling is flat).
  // Column sums of S (zero diagonal): 0: 2, 1: 2, 2: 0, 3: 2. Sparing: row 0's newest
  // near-duplicate is 3, row 1's is 3, row 3's is 1, row 2 has none → columns lose 3: 2, 1: 1.
  // m = (2, 1, 0, 0)/4 = (.5, .25, 0, 0); R = softmax(m) = e^m / (e^.5 + e^.25 + 2)
  //   = (.334240, .260306, .202727, .202727); Z = 0.1·0.25 − 0.9·R
  //   = (−.275816, −.209276, −.157454, −.157454); key = Z − min Z = (0, .066540, .118362, .118362).
  const std::vector<float> digests = {1, 0, 1, 0, 0, 1, 1, 0};
  RKvFixture f = RKvFixture::make({1, 1, 1, 1}, digests, 2, 128);
  const Decision& d = f.seq.decide();
  EXPECT_EQ(d.candidates, 4u);
  f.seq.rollback();

  auto policy = make_policy(PolicyKind::kRKv);
  std::vector<float> recent(4);
  for (std::uint32_t i = 0; i < 4; ++i) recent[i] = f.seq.recent_of(i);
  const std::vector<Tier> tiers(4, T0);
  std::vector<std::int8_t> codes = {127, 0, 127, 0, 0, 127, 127, 0};
  std::vector<float> inv(4, 1.0f / 127.0f);
  RankingContext ctx;
  ctx.scores = recent;
  ctx.tiers = tiers;
  ctx.recent = recent;
  ctx.digests = {codes, inv, 2};
  ctx.candidate_mask = 0b0111;
  ctx.candidates = 4;
  ctx.params = &f.params;
  const std::span<const float> keys = policy->rank(ctx, f.scratch);
  ASSERT_EQ(keys.size(), 4u);
  EXPECT_NEAR(keys[0], 0.0, 1e-6);
  EXPECT_NEAR(keys[1], 0.066540, 1e-5);
  EXPECT_NEAR(keys[2], 0.118362, 1e-5);
  EXPECT_NEAR(keys[3], 0.118362, 1e-5);

  // Without sparing (horizon 0) every duplicate has m = .5: keys of 0, 1 and 3 are equal.
  TierParams no_spare = f.params;
  no_spare.redundancy_horizon = 0;
  ctx.params = &no_spare;
  const std::span<const float> flat = policy->rank(ctx, f.scratch);
  EXPECT_EQ(flat[0], flat[1]);
  EXPECT_EQ(flat[1], flat[3]);
  EXPECT_GT(flat[2], flat[0]);
}

TEST(PolicyRKv, DecisionEvictsTheMostRedundantAndKeepsTheUniqueAndNewestCopies) {
  // Same sequence; keys from the test above rank 0 < 1 < 2 < 3 (2 and 3 tie; the newer ranks
  // higher). evict_tokens = 1 → 0 to T3; hbm_tokens = 2 → 2, 3 in T0; 1 to T1.
  const std::vector<float> digests = {1, 0, 1, 0, 0, 1, 1, 0};
  RKvFixture f = RKvFixture::make({1, 1, 1, 1}, digests, 2, 128);
  TierParams p = f.params;
  p.evict_tokens = 1;
  p.hbm_tokens = 2;
  auto seq = *SequenceTiers::create(0, p, 4);
  ASSERT_TRUE(seq.add_scores(0, std::vector<float>{1, 1, 1, 1}).has_value());
  ASSERT_TRUE(seq.add_key_digests(0, digests, 2).has_value());
  EXPECT_EQ(decide_and_commit(seq), (std::vector<Tier>{T3, T1, T0, T0}));
}

TEST(PolicyRKv, ImportanceIsMaxPooledOverThreeNeighboursEachSide) {
  // No digests: R is uniform, so keys order by I alone. Attention only at 0 → pooled I is 1/4
  // for 0..3 and 0 for 4..9. hbm_tokens = 4 → 0..3 in T0; evict_tokens = 3 → the oldest
  // zero-key tokens 4, 5, 6 to T3; 7, 8, 9 to T1.
  TierParams p = small_params(PolicyKind::kRKv, 0, 0);
  p.hbm_tokens = 4;
  p.evict_tokens = 3;
  auto seq = *SequenceTiers::create(0, p, 10);
  std::vector<float> attention(10, 0.0f);
  attention[0] = 1.0f;
  ASSERT_TRUE(seq.add_scores(0, attention).has_value());
  EXPECT_EQ(decide_and_commit(seq),
            (std::vector<Tier>{T0, T0, T0, T0, T3, T3, T3, T1, T1, T1}));
}

}  // namespace
}  // namespace kvtier::tier
