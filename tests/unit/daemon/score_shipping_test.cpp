// Per-decision score shipping against the per-step path (kernels/interval_scores.hpp,
// SequenceTiers::add_score_sums/add_recent_sums vs accumulate_step_scores): two sequences fed the
// same per-step scores, one accumulating them as kvtierd's per-step path does, the other fed the
// interval sums a client ships, must hold bit-identical scores and recent attention at every
// decision and take identical decisions, for every policy and eviction mode, with and without
// decay.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kvtier/kernels/interval_scores.hpp"
#include "kvtier/tier/sequence_tiers.hpp"

namespace kvtier::tier {
namespace {

struct Case {
  PolicyKind policy;
  EvictionMode mode;
  double decay;
};

std::string name(const Case& c) {
  return std::string(policy_name(c.policy)) + " mode " + std::to_string(static_cast<int>(c.mode)) + " decay " +
         std::to_string(c.decay);
}

TierParams params_for(const Case& c) {
  TierParams p;
  p.policy = c.policy;
  p.mode = c.mode;
  p.decay = c.decay;
  p.interval = 8;
  p.sink_tokens = 2;
  p.window_tokens = 12;
  p.hbm_ratio = 0.5;
  p.evict_ratio = 0.05;
  p.seed = 7;
  p.redundancy_horizon = 16;
  return p;
}

// The client's side: what libkvtier's SequenceScores does with the same pushes.
struct ClientSums {
  explicit ClientSums(const ScoreShipping& s) : sums(s.score_factor), recent(s.recent_factor), has_recent(s.recent) {}
  kernels::IntervalSum sums;
  kernels::IntervalSum recent;
  bool has_recent;
};

void expect_same_state(const SequenceTiers& a, const SequenceTiers& b, const std::string& where) {
  ASSERT_EQ(a.length(), b.length()) << where;
  for (std::uint32_t p = 0; p < a.length(); ++p) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(a.score_of(p)), std::bit_cast<std::uint32_t>(b.score_of(p)))
        << where << " score of position " << p;
    ASSERT_EQ(std::bit_cast<std::uint32_t>(a.recent_of(p)), std::bit_cast<std::uint32_t>(b.recent_of(p)))
        << where << " recent attention of position " << p;
    ASSERT_EQ(a.tier_of(p), b.tier_of(p)) << where << " tier of position " << p;
  }
}

void run_case(const Case& c) {
  const TierParams params = params_for(c);
  constexpr std::uint32_t kPrompt = 24;
  auto per_step = SequenceTiers::create(kPrompt, params, 4096);
  auto per_decision = SequenceTiers::create(kPrompt, params, 4096);
  ASSERT_TRUE(per_step && per_decision);
  ClientSums client(score_shipping(params));
  std::mt19937 rng(static_cast<std::uint32_t>(c.decay * 100) + static_cast<std::uint32_t>(c.policy) * 13u);
  std::uniform_real_distribution<float> attention(0.0f, 1.0f);
  const bool ranges = policy_traits(c.policy).uses_value_ranges;
  const bool digests = policy_traits(c.policy).uses_key_digests;
  std::uint32_t length = kPrompt;
  int decisions = 0;
  for (std::uint32_t step = 0; step < 200; ++step) {
    const std::string where = name(c) + " step " + std::to_string(step);
    ++length;  // one new token per step; its features arrive as the client sends them: per step
    if (ranges) {
      const float r[] = {attention(rng)};
      ASSERT_TRUE(per_step->add_value_ranges(length - 1, r));
      ASSERT_TRUE(per_decision->add_value_ranges(length - 1, r));
    }
    if (digests) {
      const float k[] = {attention(rng) - 0.5f, attention(rng) - 0.5f, attention(rng) - 0.5f, attention(rng) - 0.5f};
      ASSERT_TRUE(per_step->add_key_digests(length - 1, k, 4));
      ASSERT_TRUE(per_decision->add_key_digests(length - 1, k, 4));
    }
    // Two pushes per step that overlap (e.g. two halves of the layers), some steps skip one.
    std::vector<float> x(length);
    for (float& v : x) v = attention(rng) * attention(rng);
    const std::uint32_t half = length / 2;
    ASSERT_TRUE(per_step->accumulate_step_scores(0, x));
    client.sums.add(0, x);
    if (client.has_recent) client.recent.add(0, x);
    if (step % 3 != 0) {
      const std::span<const float> tail(x.data() + half, length - half);
      ASSERT_TRUE(per_step->accumulate_step_scores(half, tail));
      client.sums.add(half, tail);
      if (client.has_recent) client.recent.add(half, tail);
    }
    if (per_decision->completes_interval()) {
      const auto ship = [&](kernels::IntervalSum& sum, bool recent) {
        const std::span<const float> all = sum.finish();
        const std::span<const float> touched =
            all.subspan(sum.touched_begin(), sum.touched_end() - sum.touched_begin());
        const Status added = recent ? per_decision->add_recent_sums(sum.touched_begin(), touched)
                                    : per_decision->add_score_sums(sum.touched_begin(), touched);
        ASSERT_TRUE(added) << where << ": " << added.error().message;
        sum.reset();
      };
      ship(client.sums, false);
      if (client.has_recent) ship(client.recent, true);
    } else {
      client.sums.end_step();
      if (client.has_recent) client.recent.end_step();
    }
    per_step->end_step();
    per_decision->end_step();
    ASSERT_EQ(per_step->due(), per_decision->due());
    if (!per_step->due()) continue;
    expect_same_state(*per_step, *per_decision, where);
    const Decision& a = per_step->decide();
    const Decision& b = per_decision->decide();
    ASSERT_EQ(a.moves.size(), b.moves.size()) << where;
    for (std::size_t i = 0; i < a.moves.size(); ++i) ASSERT_EQ(a.moves[i], b.moves[i]) << where << " move " << i;
    ASSERT_EQ(a.evict_count, b.evict_count) << where;
    per_step->commit();
    per_decision->commit();
    ++decisions;
  }
  EXPECT_EQ(decisions, 200 / 8) << name(c);
}

TEST(ScoreShipping, PerDecisionSumsGiveTheSameScoresAndDecisionsAsThePerStepPathUnderEveryPolicy) {
  for (const PolicyKind policy : {PolicyKind::kPaper, PolicyKind::kH2o, PolicyKind::kStreamingLlm,
                                  PolicyKind::kRandom, PolicyKind::kVase, PolicyKind::kRKv}) {
    for (const double decay : {1.0, 0.9}) {
      run_case({policy, EvictionMode::kCumulative, decay});
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(ScoreShipping, PerDecisionSumsMatchThePerStepPathInThePaperModes) {
  for (const EvictionMode mode : {EvictionMode::kPaperAlgorithm, EvictionMode::kPaperPrototype}) {
    for (const PolicyKind policy : {PolicyKind::kPaper, PolicyKind::kVase, PolicyKind::kRKv}) {
      run_case({policy, mode, 1.0});
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(ScoreShipping, SumsAreRefusedOutsideTheStepThatCompletesAnInterval) {
  TierParams p;
  p.interval = 4;
  auto seq = SequenceTiers::create(8, p, 64);
  ASSERT_TRUE(seq);
  const float one[] = {1.0f};
  const Status early = seq->add_score_sums(0, one);
  ASSERT_FALSE(early);
  EXPECT_EQ(early.error().code, Errc::kInvalidArgument);
  EXPECT_NE(early.error().message.find("step 1"), std::string::npos) << early.error().message;
  for (int i = 0; i < 3; ++i) seq->end_step();
  EXPECT_TRUE(seq->completes_interval());
  EXPECT_TRUE(seq->add_score_sums(0, one));
  EXPECT_EQ(seq->score_of(0), 1.0f);  // visible at once, before the step end
}

TEST(ScoreShipping, RecentSumsAreRefusedByAPolicyWithoutRecentAttention) {
  TierParams p;
  p.interval = 1;
  auto seq = SequenceTiers::create(8, p, 64);
  ASSERT_TRUE(seq);
  const float one[] = {1.0f};
  const Status refused = seq->add_recent_sums(0, one);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::kBadState);
}

TEST(ScoreShipping, InvalidSumsAreRefusedAndChangeNothing) {
  TierParams p;
  p.interval = 1;
  auto seq = SequenceTiers::create(4, p, 64);
  ASSERT_TRUE(seq);
  const float bad[] = {1.0f, -1.0f};
  EXPECT_FALSE(seq->add_score_sums(0, bad));
  EXPECT_EQ(seq->score_of(0), 0.0f);
  const float beyond[] = {1.0f};
  EXPECT_FALSE(seq->add_score_sums(64, beyond));
  EXPECT_EQ(seq->length(), 4u);
}

TEST(ScoreShipping, PerStepScoresStayInvisibleUntilTheIntervalsLastStepEnds) {
  TierParams p;
  p.interval = 2;
  auto seq = SequenceTiers::create(4, p, 64);
  ASSERT_TRUE(seq);
  const float x[] = {0.25f, 0.5f, 0.75f, 1.0f, 2.0f};
  ASSERT_TRUE(seq->accumulate_step_scores(0, x));
  seq->end_step();
  EXPECT_EQ(seq->score_of(0), 0.0f);
  EXPECT_EQ(seq->length(), 4u);  // positions beyond the prompt arrive with the fold
  ASSERT_TRUE(seq->accumulate_step_scores(0, x));
  seq->end_step();
  EXPECT_EQ(seq->score_of(0), 0.5f);
  EXPECT_EQ(seq->score_of(4), 4.0f);
  EXPECT_EQ(seq->length(), 5u);
}

}  // namespace
}  // namespace kvtier::tier
