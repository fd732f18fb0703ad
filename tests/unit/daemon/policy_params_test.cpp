// Policy names and traits, the policy fields of TierParams, per-token feature ingest and the
// recent-attention EMA.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kvtier/tier/policy.hpp"
#include "kvtier/tier/sequence_tiers.hpp"

namespace kvtier::tier {
namespace {

TEST(PolicyKind, NamesRoundTripThroughParse) {
  for (PolicyKind kind : kAllPolicies) {
    auto parsed = parse_policy(policy_name(kind));
    ASSERT_TRUE(parsed.has_value()) << policy_name(kind);
    EXPECT_EQ(*parsed, kind);
  }
  EXPECT_EQ(policy_name(PolicyKind::kStreamingLlm), "streaming_llm");
  EXPECT_EQ(policy_name(PolicyKind::kRKv), "r_kv");
  EXPECT_EQ(policy_name(static_cast<PolicyKind>(77)), "unknown");
}

TEST(PolicyKind, ParseRejectsUnknownNamesListingTheValidOnes) {
  auto parsed = parse_policy("H2O");
  ASSERT_FALSE(parsed.has_value());
  EXPECT_EQ(parsed.error().code, Errc::kInvalidArgument);
  EXPECT_NE(parsed.error().message.find("streaming_llm"), std::string::npos);
}

TEST(PolicyKind, BytesPerTokenFollowTheFeaturesEachPolicyKeeps) {
  EXPECT_EQ(policy_bytes_per_token(PolicyKind::kPaper, 0), 5u);
  EXPECT_EQ(policy_bytes_per_token(PolicyKind::kH2o, 0), 5u);
  EXPECT_EQ(policy_bytes_per_token(PolicyKind::kStreamingLlm, 0), 5u);
  EXPECT_EQ(policy_bytes_per_token(PolicyKind::kRandom, 0), 5u);
  EXPECT_EQ(policy_bytes_per_token(PolicyKind::kVase, 0), 13u);
  EXPECT_EQ(policy_bytes_per_token(PolicyKind::kRKv, 32), 45u);
}

TEST(PolicyParams, PromptProtectionDefaultsToThePolicyAndCanBeOverridden) {
  TierParams p;
  EXPECT_TRUE(protects_prompt(p));
  p.policy = PolicyKind::kH2o;
  EXPECT_FALSE(protects_prompt(p));
  p.protect_prompt = true;
  EXPECT_TRUE(protects_prompt(p));
  p.policy = PolicyKind::kRandom;
  p.protect_prompt.reset();
  EXPECT_TRUE(protects_prompt(p));
  p.protect_prompt = false;
  EXPECT_FALSE(protects_prompt(p));
}

TEST(PolicyParams, RecentWindowDefaultsPerPolicy) {
  TierParams p;
  p.policy = PolicyKind::kVase;
  EXPECT_EQ(effective_recent_window(p), 64u);
  p.policy = PolicyKind::kRKv;
  EXPECT_EQ(effective_recent_window(p), 8u);
  p.recent_window = 5;
  EXPECT_EQ(effective_recent_window(p), 5u);
}

TEST(PolicyParams, ValidateRejectsHysteresisForPoliciesWithoutScoreKeys) {
  TierParams p;
  p.hysteresis = 0.1;
  EXPECT_TRUE(validate(p).has_value());
  p.policy = PolicyKind::kH2o;
  EXPECT_TRUE(validate(p).has_value());
  p.policy = PolicyKind::kRandom;
  auto status = validate(p);
  ASSERT_FALSE(status.has_value());
  EXPECT_NE(status.error().message.find("random"), std::string::npos);
}

TEST(PolicyParams, ValidateChecksPolicyFieldRanges) {
  TierParams p;
  p.policy = static_cast<PolicyKind>(9);
  EXPECT_FALSE(validate(p).has_value());
  p = TierParams{};
  p.value_protect_ratio = 1.5;
  EXPECT_FALSE(validate(p).has_value());
  p = TierParams{};
  p.rkv_lambda = -0.1;
  EXPECT_FALSE(validate(p).has_value());
  p = TierParams{};
  p.rkv_threshold = 1.0;
  EXPECT_FALSE(validate(p).has_value());
  p.rkv_threshold = std::nan("");
  EXPECT_FALSE(validate(p).has_value());
}

TEST(PolicyFeatures, PolicyWithoutTheFeatureRefusesItWithBadState) {
  auto seq = *SequenceTiers::create(0, TierParams{}, 16);
  const float ranges[] = {1.0f};
  auto status = seq.add_value_ranges(0, ranges);
  ASSERT_FALSE(status.has_value());
  EXPECT_EQ(status.error().code, Errc::kBadState);
  const float keys[] = {1.0f, 0.0f};
  status = seq.add_key_digests(0, keys, 2);
  ASSERT_FALSE(status.has_value());
  EXPECT_EQ(status.error().code, Errc::kBadState);
  EXPECT_EQ(seq.length(), 0u);
}

TEST(PolicyFeatures, BadValueRangesChangeNothing) {
  TierParams p;
  p.policy = PolicyKind::kVase;
  auto seq = *SequenceTiers::create(0, p, 8);
  const float negative[] = {1.0f, -2.0f};
  EXPECT_FALSE(seq.add_value_ranges(0, negative).has_value());
  const float inf[] = {INFINITY};
  EXPECT_FALSE(seq.add_value_ranges(0, inf).has_value());
  const float ok[] = {1.0f, 2.0f};
  auto beyond = seq.add_value_ranges(7, ok);
  ASSERT_FALSE(beyond.has_value());
  EXPECT_NE(beyond.error().message.find("max_tokens"), std::string::npos);
  EXPECT_EQ(seq.length(), 0u);
  EXPECT_TRUE(seq.add_value_ranges(6, ok).has_value());
  EXPECT_EQ(seq.length(), 8u);  // features extend the sequence like scores do
}

TEST(PolicyFeatures, KeyDigestDimIsFixedByTheFirstCall) {
  TierParams p;
  p.policy = PolicyKind::kRKv;
  auto seq = *SequenceTiers::create(0, p, 8);
  const float three[] = {1.0f, 2.0f, 3.0f};
  EXPECT_FALSE(seq.add_key_digests(0, three, 2).has_value());  // not a multiple of dim
  EXPECT_FALSE(seq.add_key_digests(0, three, 0).has_value());
  const float nan_key[] = {1.0f, NAN};
  EXPECT_FALSE(seq.add_key_digests(0, nan_key, 2).has_value());
  EXPECT_EQ(seq.length(), 0u);
  const float four[] = {1.0f, 0.0f, 0.0f, 1.0f};
  ASSERT_TRUE(seq.add_key_digests(0, four, 2).has_value());
  EXPECT_EQ(seq.length(), 2u);
  EXPECT_EQ(seq.metadata_bytes_per_token(), 13u + 2u);  // 5 + 4 recent + 2 codes + 4 norm
  auto changed = seq.add_key_digests(2, three, 3);
  ASSERT_FALSE(changed.has_value());
  EXPECT_NE(changed.error().message.find("differs"), std::string::npos);
}

TEST(PolicyFeatures, RecentAttentionIsAnEmaWithTheLatestStepUndecayed) {
  TierParams p;
  p.policy = PolicyKind::kVase;
  p.recent_window = 4;  // ρ = 0.75
  auto seq = *SequenceTiers::create(0, p, 8);
  const float one[] = {1.0f};
  const float zero[] = {0.0f};
  ASSERT_TRUE(seq.add_scores(0, one).has_value());
  seq.end_step();
  EXPECT_FLOAT_EQ(seq.recent_of(0), 1.0f);
  ASSERT_TRUE(seq.add_scores(0, one).has_value());
  seq.end_step();
  EXPECT_FLOAT_EQ(seq.recent_of(0), 1.75f);  // 1·0.75 + 1
  seq.end_step();                              // a step without scores still decays
  ASSERT_TRUE(seq.add_scores(0, zero).has_value());
  EXPECT_FLOAT_EQ(seq.recent_of(0), 1.75f * 0.75f * 0.75f);
  EXPECT_FLOAT_EQ(seq.score_of(0), 2.0f);  // the cumulative score is unaffected
}

TEST(PolicyFeatures, RecentWindowOfOneKeepsOnlyTheLatestStep) {
  TierParams p;
  p.policy = PolicyKind::kRKv;
  p.recent_window = 1;
  auto seq = *SequenceTiers::create(0, p, 8);
  const float a[] = {3.0f};
  const float b[] = {0.5f};
  ASSERT_TRUE(seq.add_scores(0, a).has_value());
  seq.end_step();
  ASSERT_TRUE(seq.add_scores(0, b).has_value());
  EXPECT_FLOAT_EQ(seq.recent_of(0), 0.5f);
}

TEST(PolicyFeatures, PaperKeepsNoRecentAttention) {
  auto seq = *SequenceTiers::create(0, TierParams{}, 8);
  const float a[] = {3.0f};
  ASSERT_TRUE(seq.add_scores(0, a).has_value());
  EXPECT_EQ(seq.recent_of(0), 0.0f);
  EXPECT_EQ(seq.metadata_bytes_per_token(), SequenceTiers::kMetadataBytesPerToken);
}

TEST(RandomDraw, IsDeterministicInTheOpenUnitInterval) {
  EXPECT_EQ(random_draw(1, 2, 3), random_draw(1, 2, 3));
  EXPECT_NE(random_draw(1, 2, 3), random_draw(2, 2, 3));
  EXPECT_NE(random_draw(1, 2, 3), random_draw(1, 3, 3));
  EXPECT_NE(random_draw(1, 2, 3), random_draw(1, 2, 4));
  double sum = 0.0;
  for (std::uint32_t i = 0; i < 10000; ++i) {
    const double u = random_draw(5, 0, i);
    ASSERT_GT(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 10000.0, 0.5, 0.01);
}

}  // namespace
}  // namespace kvtier::tier
