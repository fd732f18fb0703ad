// SequenceTiers::restore: a sequence rebuilt from its client's record after a daemon restart.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "kvtier/tier/sequence_tiers.hpp"

namespace kvtier::tier {
namespace {

// Prompt 8, sinks 4, window 16: positions [12, length - 16) are managed.
TierParams params(double int8_ratio = 0.0) {
  TierParams p;
  p.sink_tokens = 4;
  p.window_tokens = 16;
  p.interval = 4;
  p.hbm_ratio = 0.25;
  p.int8_ratio = int8_ratio;
  return p;
}

using Placed = std::vector<std::pair<std::uint32_t, Tier>>;

TEST(SequenceRestore, TiersAndCountsAreTheRecordsAndTheRestIsT0) {
  const Placed placed = {{12, Tier::kT1}, {13, Tier::kT3}, {20, Tier::kT2}, {30, Tier::kT1}};
  auto seq = SequenceTiers::restore(8, params(0.3), 1000, 60, placed);
  ASSERT_TRUE(seq.has_value()) << seq.error().message;
  EXPECT_EQ(seq->length(), 60u);
  EXPECT_EQ(seq->count(Tier::kT1), 2u);
  EXPECT_EQ(seq->count(Tier::kT2), 1u);
  EXPECT_EQ(seq->count(Tier::kT3), 1u);
  EXPECT_EQ(seq->count(Tier::kT0), 56u);
  EXPECT_EQ(seq->destroyed(), 1u);
  EXPECT_EQ(seq->tier_of(20), Tier::kT2);
  EXPECT_EQ(seq->tier_of(21), Tier::kT0);
  EXPECT_EQ(seq->step(), 0u);
  EXPECT_EQ(seq->score_of(12), 0.0f);
}

TEST(SequenceRestore, DecisionsResumeFromTheRestoredPlacement) {
  auto seq = SequenceTiers::restore(8, params(), 1000, 60, Placed{{12, Tier::kT1}, {13, Tier::kT1}});
  ASSERT_TRUE(seq.has_value());
  std::vector<float> scores(64, 1.0f);
  ASSERT_TRUE(seq->add_scores(0, scores).has_value());
  for (int i = 0; i < 4; ++i) seq->end_step();
  ASSERT_TRUE(seq->due());
  const Decision& d = seq->decide();
  for (const TierMove& m : d.moves) EXPECT_EQ(m.from, seq->tier_of(m.position)) << m.position;
  seq->commit();
  EXPECT_EQ(seq->length(), 64u);
}

TEST(SequenceRestore, ARecordTheEngineCannotHaveIsRefused) {
  const auto refused = [](std::uint32_t length, Placed placed, double int8 = 0.0) {
    auto seq = SequenceTiers::restore(8, params(int8), 1000, length, placed);
    EXPECT_FALSE(seq.has_value());
    return seq ? std::string() : seq.error().message;
  };
  EXPECT_NE(refused(60, {{5, Tier::kT1}}).find("protected"), std::string::npos);   // the prompt
  EXPECT_NE(refused(60, {{50, Tier::kT1}}).find("protected"), std::string::npos);  // the window
  EXPECT_NE(refused(60, {{70, Tier::kT1}}).find("beyond"), std::string::npos);
  EXPECT_NE(refused(60, {{20, Tier::kT1}, {14, Tier::kT1}}).find("ascending"), std::string::npos);
  EXPECT_NE(refused(60, {{20, Tier::kT1}, {20, Tier::kT3}}).find("ascending"), std::string::npos);
  EXPECT_NE(refused(60, {{20, Tier::kT0}}).find("not a host"), std::string::npos);
  EXPECT_NE(refused(60, {{20, Tier::kT2}}).find("int8"), std::string::npos);
  EXPECT_FALSE(refused(4, {}).empty());     // shorter than the prompt
  EXPECT_FALSE(refused(2000, {}).empty());  // beyond max_tokens
}

}  // namespace
}  // namespace kvtier::tier
