// SequenceTiers bookkeeping: creation, score ingest and its refusals, steps, decay, two-phase
// commit and accessors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kvtier/tier/sequence_tiers.hpp"
#include "tier_test_support.hpp"

namespace kvtier::tier {
namespace {

using ::testing::HasSubstr;

SequenceTiers make(std::uint32_t prompt, TierParams params = {}, std::uint32_t max_tokens = 1000) {
  auto seq = SequenceTiers::create(prompt, params, max_tokens);
  EXPECT_TRUE(seq.has_value());
  return std::move(*seq);
}

TEST(SequenceTiers, CreateRefusesInvalidParamsAndOversizedPrompt) {
  TierParams bad;
  bad.decay = 0.0;
  EXPECT_THAT(SequenceTiers::create(4, bad, 100).error().message, HasSubstr("decay"));
  auto too_long = SequenceTiers::create(101, TierParams{}, 100);
  ASSERT_FALSE(too_long.has_value());
  EXPECT_EQ(too_long.error().code, Errc::kInvalidArgument);
  EXPECT_THAT(too_long.error().message, HasSubstr("prompt_length 101"));
  EXPECT_FALSE(SequenceTiers::create(0, TierParams{}, 0).has_value());
}

TEST(SequenceTiers, PromptTokensExistInT0FromTheStart) {
  SequenceTiers seq = make(10);
  EXPECT_EQ(seq.length(), 10u);
  EXPECT_EQ(seq.count(Tier::kT0), 10u);
  EXPECT_EQ(seq.step(), 0u);
  EXPECT_FLOAT_EQ(seq.score_of(3), 0.0f);
}

TEST(SequenceTiers, ScoresBeyondTheLengthExtendTheSequenceInT0) {
  SequenceTiers seq = make(2);
  const float values[] = {0.5f, 0.25f};
  ASSERT_TRUE(seq.add_scores(5, values).has_value());
  EXPECT_EQ(seq.length(), 7u);
  EXPECT_EQ(seq.count(Tier::kT0), 7u);
  EXPECT_FLOAT_EQ(seq.score_of(4), 0.0f);
  EXPECT_FLOAT_EQ(seq.score_of(5), 0.5f);
  EXPECT_FLOAT_EQ(seq.score_of(6), 0.25f);
}

TEST(SequenceTiers, ScoresAccumulateAcrossSteps) {
  SequenceTiers seq = make(3);
  const float a[] = {1.0f, 2.0f, 3.0f};
  const float b[] = {0.5f, 0.5f};
  ASSERT_TRUE(seq.add_scores(0, a).has_value());
  seq.end_step();
  ASSERT_TRUE(seq.add_scores(1, b).has_value());
  EXPECT_FLOAT_EQ(seq.score_of(0), 1.0f);
  EXPECT_FLOAT_EQ(seq.score_of(1), 2.5f);
  EXPECT_FLOAT_EQ(seq.score_of(2), 3.5f);
}

struct RefusedScore {
  float value;
  const char* words;
};

TEST(SequenceTiers, NanInfNegativeScoresAreRefusedNamingPositionAndValue) {
  const RefusedScore cases[] = {
      {std::numeric_limits<float>::quiet_NaN(), "score at position 6 is NaN"},
      {std::numeric_limits<float>::infinity(), "score at position 6 is infinite (inf)"},
      {-std::numeric_limits<float>::infinity(), "score at position 6 is infinite (-inf)"},
      {-0.5f, "score at position 6 is negative (-0.5)"},
  };
  for (const RefusedScore& c : cases) {
    SequenceTiers seq = make(4);
    const float values[] = {0.25f, 0.25f, c.value, 0.25f};
    const Status status = seq.add_scores(4, values);
    ASSERT_FALSE(status.has_value()) << c.words;
    EXPECT_EQ(status.error().code, Errc::kInvalidArgument);
    EXPECT_THAT(status.error().message, HasSubstr(c.words));
    // Nothing applied: no extension, no partial accumulation.
    EXPECT_EQ(seq.length(), 4u);
  }
}

TEST(SequenceTiers, NegativeZeroIsAcceptedAsZero) {
  SequenceTiers seq = make(1);
  const float values[] = {-0.0f};
  ASSERT_TRUE(seq.add_scores(0, values).has_value());
  EXPECT_FALSE(std::signbit(seq.score_of(0)));
}

TEST(SequenceTiers, PositionsAtOrBeyondMaxTokensAreRefused) {
  SequenceTiers seq = make(4, TierParams{}, 10);
  const float values[] = {0.1f, 0.2f, 0.3f};
  const Status status = seq.add_scores(8, values);  // positions 8, 9, 10
  ASSERT_FALSE(status.has_value());
  EXPECT_EQ(status.error().code, Errc::kInvalidArgument);
  EXPECT_THAT(status.error().message, HasSubstr("score position 10 (value 0.300000012)"));
  EXPECT_THAT(status.error().message, HasSubstr("max_tokens 10"));
  EXPECT_EQ(seq.length(), 4u);
  const float one[] = {0.1f};
  EXPECT_FALSE(seq.add_scores(0xFFFFFFFFu, one).has_value());  // no overflow of first + size
  EXPECT_TRUE(seq.add_scores(9, one).has_value());
}

TEST(SequenceTiers, DueFiresEveryIntervalSteps) {
  TierParams p;
  p.interval = 3;
  SequenceTiers seq = make(0, p);
  EXPECT_FALSE(seq.due());
  std::vector<std::uint64_t> fired;
  for (int i = 0; i < 10; ++i) {
    seq.end_step();
    if (seq.due()) fired.push_back(seq.step());
  }
  EXPECT_EQ(fired, (std::vector<std::uint64_t>{3, 6, 9}));
}

TEST(SequenceTiers, DecayMultipliesEveryScoreOncePerStep) {
  TierParams p;
  p.decay = 0.5;
  SequenceTiers seq = make(2, p);
  const float x[] = {1.0f, 4.0f};
  ASSERT_TRUE(seq.add_scores(0, x).has_value());
  seq.end_step();  // s = 0.5, 2
  ASSERT_TRUE(seq.add_scores(0, x).has_value());
  seq.end_step();  // s = (0.5 + 1) * 0.5 = 0.75, (2 + 4) * 0.5 = 3
  EXPECT_FLOAT_EQ(seq.score_of(0), 0.75f);
  EXPECT_FLOAT_EQ(seq.score_of(1), 3.0f);
  // Equivalent to s <- d*s + x at the add, times one common factor d.
  const float d = 0.5f;
  EXPECT_FLOAT_EQ(seq.score_of(0), d * (d * 1.0f + 1.0f));
}

TEST(SequenceTiers, NoDecayByDefault) {
  SequenceTiers seq = make(1);
  const float x[] = {1.0f};
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(seq.add_scores(0, x).has_value());
    seq.end_step();
  }
  EXPECT_FLOAT_EQ(seq.score_of(0), 5.0f);
}

// 20 tokens, P = 4, k_s = 2, k_w = 4: managed range [6, 16), interval 1.
SequenceTiers twenty_tokens(double evict_ratio = 0.2) {
  TierParams p;
  p.sink_tokens = 2;
  p.window_tokens = 4;
  p.interval = 1;
  p.evict_ratio = evict_ratio;
  p.hbm_ratio = 0.5;
  SequenceTiers seq = make(4, p, 64);
  std::vector<float> s(20, 1.0f);
  const float managed[10] = {0.6f, 0.1f, 0.9f, 0.3f, 0.3f, 0.7f, 0.05f, 0.6f, 0.1f, 0.8f};
  for (int i = 0; i < 10; ++i) s[6 + i] = managed[i];
  EXPECT_TRUE(seq.add_scores(0, s).has_value());
  return seq;
}

TEST(SequenceTiers, RollbackLeavesTheAssignmentUnchanged) {
  SequenceTiers seq = twenty_tokens();
  const std::vector<Tier> before = testing::snapshot(seq);
  const Decision& d = seq.decide();
  EXPECT_FALSE(d.moves.empty());
  EXPECT_TRUE(seq.has_pending());
  EXPECT_EQ(testing::snapshot(seq), before);  // nothing visible before commit
  seq.rollback();
  EXPECT_FALSE(seq.has_pending());
  EXPECT_EQ(testing::snapshot(seq), before);
  EXPECT_EQ(seq.destroyed(), 0u);
  EXPECT_EQ(seq.count(Tier::kT0), 20u);
  // The same decision can be taken again.
  EXPECT_EQ(seq.decide().moves.size(), d.moves.size());
  seq.commit();
  EXPECT_EQ(seq.destroyed(), 2u);
}

TEST(SequenceTiers, CommitOfASubsetKeepsTheOtherTokensInTheirTier) {
  SequenceTiers seq = twenty_tokens();
  const Decision& d = seq.decide();
  std::vector<TierMove> accepted;
  for (const TierMove& m : d.moves) {
    if (m.to != Tier::kT1) accepted.push_back(m);  // as if the pool had no slot at all
  }
  const std::vector<Tier> expected = testing::apply_moves(testing::snapshot(seq), accepted);
  seq.commit(accepted);
  EXPECT_EQ(testing::snapshot(seq), expected);
  EXPECT_EQ(seq.count(Tier::kT1), 0u);
  EXPECT_EQ(seq.count(Tier::kT3), 2u);
}

TEST(SequenceTiers, ScoresKeepAccumulatingWhileADecisionIsPending) {
  SequenceTiers seq = twenty_tokens();
  seq.decide();
  const float x[] = {1.0f};
  ASSERT_TRUE(seq.add_scores(20, x).has_value());
  seq.end_step();
  EXPECT_EQ(seq.length(), 21u);
  seq.commit();
  EXPECT_EQ(seq.tier_of(20), Tier::kT0);
}

TEST(SequenceTiers, MetadataStaysWithinFiveBytesPerToken) {
  EXPECT_EQ(SequenceTiers::kMetadataBytesPerToken, 5u);
  SequenceTiers seq = make(0, TierParams{}, 1u << 20);
  std::vector<float> s(100000, 0.5f);
  ASSERT_TRUE(seq.add_scores(0, s).has_value());
  EXPECT_LE(seq.metadata_bytes(), 2 * 5 * std::size_t{seq.length()});  // vector growth slack
}

TEST(SequenceTiers, DestroyedTokensIgnoreLaterScores) {
  SequenceTiers seq = twenty_tokens();
  seq.decide();
  seq.commit();
  ASSERT_EQ(seq.tier_of(12), Tier::kT3);
  const float x[] = {5.0f};
  ASSERT_TRUE(seq.add_scores(12, x).has_value());
  EXPECT_FLOAT_EQ(seq.score_of(12), 0.0f);
}

TEST(SequenceTiers, DestroyedTokensIgnoreScoresInsideALongRecord) {
  SequenceTiers seq = twenty_tokens();
  seq.decide();
  seq.commit();
  std::vector<float> x(20, 2.0f);  // one record over every position, T3 ones among them
  std::vector<float> before(20);
  for (std::uint32_t i = 0; i < 20; ++i) before[i] = seq.score_of(i);
  ASSERT_TRUE(seq.add_scores(0, x).has_value());
  for (std::uint32_t i = 0; i < 20; ++i) {
    if (seq.tier_of(i) == Tier::kT3) {
      EXPECT_EQ(seq.score_of(i), 0.0f) << i;
      EXPECT_FALSE(std::signbit(seq.score_of(i))) << i;
    } else {
      EXPECT_FLOAT_EQ(seq.score_of(i), before[i] + 2.0f) << i;
    }
  }
}

TEST(SequenceTiers, FirstBadScoreOfALongRecordIsNamedAndNothingIsApplied) {
  SequenceTiers seq = make(0);
  std::vector<float> values(300, 0.5f);
  values[77] = -1.0f;  // past several vector chunks; a later NaN must not be the one named
  values[201] = std::numeric_limits<float>::quiet_NaN();
  const Status status = seq.add_scores(0, values);
  ASSERT_FALSE(status.has_value());
  EXPECT_THAT(status.error().message, HasSubstr("score at position 77 is negative (-1)"));
  EXPECT_EQ(seq.length(), 0u);
  values[77] = 0.5f;
  values[201] = -std::numeric_limits<float>::quiet_NaN();  // sign bit set: still NaN
  const Status nan = seq.add_scores(0, values);
  ASSERT_FALSE(nan.has_value());
  EXPECT_THAT(nan.error().message, HasSubstr("score at position 201 is NaN"));
}

TEST(SequenceTiers, ABadScoreIsFoundInEveryLaneAndTailPosition) {
  const float bad[] = {-1.0f, std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::quiet_NaN()};
  for (std::size_t n = 1; n <= 9; ++n) {
    for (std::size_t at = 0; at < n; ++at) {
      for (float v : bad) {
        SequenceTiers seq = make(0);
        std::vector<float> values(n, -0.0f);
        values[at] = v;
        const Status status = seq.add_scores(0, values);
        ASSERT_FALSE(status.has_value()) << n << " " << at;
        EXPECT_THAT(status.error().message, HasSubstr("position " + std::to_string(at)));
      }
    }
  }
}

TEST(SequenceTiers, ExtremeFiniteScoresAreAccepted) {
  SequenceTiers seq = make(0);
  std::vector<float> values(37, 0.0f);
  values[3] = std::numeric_limits<float>::max();
  values[9] = std::numeric_limits<float>::denorm_min();
  values[35] = -0.0f;
  ASSERT_TRUE(seq.add_scores(0, values).has_value());
  EXPECT_EQ(seq.score_of(3), std::numeric_limits<float>::max());
  EXPECT_EQ(seq.score_of(9), std::numeric_limits<float>::denorm_min());
  EXPECT_FALSE(std::signbit(seq.score_of(35)));
}

TEST(SequenceTiersDeathTest, DecideWhileADecisionIsPendingAborts) {
  SequenceTiers seq = twenty_tokens();
  seq.decide();
  EXPECT_DEATH(seq.decide(), "pending");
}

TEST(SequenceTiersDeathTest, CommitOfAMoveThatWasNotProposedAborts) {
  SequenceTiers seq = twenty_tokens();
  seq.decide();
  const TierMove invented[] = {{8, Tier::kT0, Tier::kT3}};
  EXPECT_DEATH(seq.commit(invented), "not proposed");
}

}  // namespace
}  // namespace kvtier::tier
