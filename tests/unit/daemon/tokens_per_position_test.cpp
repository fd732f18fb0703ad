// Tier parameters are in tokens; a sequence whose positions are blocks (TierParams
// tokensPerPosition, PROTOCOL.md §4) gets its counts and the daemon's defaults in positions.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <capnp/message.h>

#include "kvtier/config/config.hpp"
#include "kvtier/protocol/defaults.hpp"
#include "tier_params.hpp"

namespace kvtier::daemon {
namespace {

using ::testing::HasSubstr;

TEST(TokensPerPosition, TheDaemonsDefaultsAreTokensRoundedUpToWholeBlocks) {
  capnp::MallocMessageBuilder message;
  auto wire = message.initRoot<wire::TierParams>();
  wire.setUseDefaults(true);
  wire.setTokensPerPosition(32);
  const auto params = tier_params_from_wire(wire.asReader(), config::TieringSection{}, 1);
  ASSERT_TRUE(params.has_value()) << params.error().message;
  EXPECT_EQ(params->sink_tokens, 1u);    // 4 tokens: one block
  EXPECT_EQ(params->window_tokens, 4u);  // 128 tokens: four blocks, not 128
  EXPECT_EQ(params->interval, 64u);      // steps stay steps
}

TEST(TokensPerPosition, AbsentMeansOneTokenPerPosition) {
  capnp::MallocMessageBuilder message;
  auto wire = message.initRoot<wire::TierParams>();
  wire.setUseDefaults(true);
  const auto params = tier_params_from_wire(wire.asReader(), config::TieringSection{}, 1);
  ASSERT_TRUE(params.has_value()) << params.error().message;
  EXPECT_EQ(params->sink_tokens, 4u);
  EXPECT_EQ(params->window_tokens, 128u);
}

TEST(TokensPerPosition, KeepingCountsRoundUpAndTakingCountsRoundDown) {
  capnp::MallocMessageBuilder message;
  auto wire = message.initRoot<wire::TierParams>();
  wire.setUseDefaults(false);
  wire.setInterval(16);
  wire.setHbmRatio(0.3);
  wire.setDecay(1.0);
  wire.setValueProtectRatio(0.25);
  wire.setSinkTokens(33);
  wire.setWindowTokens(64);
  wire.setHbmTokens(100);
  wire.setEvictTokens(100);
  wire.setTokensPerPosition(32);
  const auto params = tier_params_from_wire(wire.asReader(), config::TieringSection{}, 1);
  ASSERT_TRUE(params.has_value()) << params.error().message;
  EXPECT_EQ(params->sink_tokens, 2u);
  EXPECT_EQ(params->window_tokens, 2u);
  EXPECT_EQ(params->hbm_tokens, 4u);
  EXPECT_EQ(params->evict_tokens, 3u);
  EXPECT_EQ(params->interval, 16u);
}

TEST(TokensPerPosition, AnEvictionBudgetBelowOnePositionIsRefusedNotReadAsTheRatio) {
  tier::TierParams params;
  params.evict_tokens = 31;
  const auto converted = tier::in_positions(params, 32);
  ASSERT_FALSE(converted.has_value());
  EXPECT_EQ(converted.error().code, Errc::kInvalidArgument);
  EXPECT_THAT(converted.error().message, HasSubstr("evict_tokens 31 is less than one position of 32 tokens"));
}

TEST(TokensPerPosition, MoreThanTheLimitIsRefusedNamingIt) {
  capnp::MallocMessageBuilder message;
  auto wire = message.initRoot<wire::TierParams>();
  wire.setUseDefaults(true);
  wire.setTokensPerPosition(protocol::kMaxTokensPerPosition + 1);
  const auto params = tier_params_from_wire(wire.asReader(), config::TieringSection{}, 1);
  ASSERT_FALSE(params.has_value());
  EXPECT_THAT(params.error().message, HasSubstr("tokensPerPosition 65537 exceeds 65536"));
}

}  // namespace
}  // namespace kvtier::daemon
