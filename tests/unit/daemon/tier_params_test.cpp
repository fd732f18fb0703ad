// TierParams validation, eviction-mode names and the floor_share rounding rule.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kvtier/tier/tier_params.hpp"

namespace kvtier::tier {
namespace {

using ::testing::HasSubstr;

TEST(TierParams, DefaultsAreValid) {
  EXPECT_TRUE(validate(TierParams{}).has_value());
  const TierParams p;
  EXPECT_EQ(p.sink_tokens, 4u);
  EXPECT_EQ(p.window_tokens, 128u);
  EXPECT_EQ(p.interval, 64u);
  EXPECT_EQ(p.mode, EvictionMode::kCumulative);
}

struct BadCase {
  const char* field;
  TierParams params;
};

TEST(TierParams, ValidateNamesTheOffendingField) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto with = [](auto mutate) {
    TierParams p;
    mutate(p);
    return p;
  };
  const BadCase cases[] = {
      {"hbm_ratio", with([](TierParams& p) { p.hbm_ratio = 1.5; })},
      {"hbm_ratio", with([](TierParams& p) { p.hbm_ratio = -0.1; })},
      {"hbm_ratio", with([&](TierParams& p) { p.hbm_ratio = nan; })},
      {"evict_ratio", with([](TierParams& p) { p.evict_ratio = 1.01; })},
      {"evict_ratio", with([&](TierParams& p) { p.evict_ratio = nan; })},
      {"hysteresis", with([](TierParams& p) { p.hysteresis = 1.0; })},
      {"hysteresis", with([](TierParams& p) { p.hysteresis = -0.5; })},
      {"decay", with([](TierParams& p) { p.decay = 0.0; })},
      {"decay", with([](TierParams& p) { p.decay = 1.5; })},
      {"interval", with([](TierParams& p) { p.interval = 0; })},
      {"mode", with([](TierParams& p) { p.mode = static_cast<EvictionMode>(9); })},
  };
  for (const BadCase& c : cases) {
    const Status status = validate(c.params);
    ASSERT_FALSE(status.has_value()) << c.field;
    EXPECT_EQ(status.error().code, Errc::kInvalidArgument);
    EXPECT_THAT(status.error().message, HasSubstr(c.field));
  }
}

TEST(TierParams, ValidateMessageCarriesTheValue) {
  TierParams p;
  p.hbm_ratio = 1.5;
  EXPECT_EQ(validate(p).error().message, "tier params: hbm_ratio must be in [0, 1], got 1.5");
}

TEST(TierParams, BoundaryValuesAreAccepted) {
  TierParams p;
  p.hbm_ratio = 1.0;
  p.evict_ratio = 1.0;
  p.hysteresis = 0.99;
  p.decay = 1.0;
  p.interval = 1;
  EXPECT_TRUE(validate(p).has_value());
  p.hbm_ratio = 0.0;
  p.evict_ratio = 0.0;
  p.hysteresis = 0.0;
  p.decay = 1e-6;
  EXPECT_TRUE(validate(p).has_value());
}

TEST(TierParams, Int8IsOffByDefault) {
  const TierParams p;
  EXPECT_EQ(p.int8_ratio, 0.0);
  EXPECT_EQ(p.int8_tokens, 0u);
  EXPECT_FALSE(int8_enabled(p));
}

TEST(TierParams, Int8RatioOutsideTheUnitIntervalIsRefused) {
  for (double bad : {-0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    TierParams p;
    p.int8_ratio = bad;
    const Status status = validate(p);
    ASSERT_FALSE(status.has_value()) << bad;
    EXPECT_EQ(status.error().code, Errc::kInvalidArgument);
    EXPECT_THAT(status.error().message, HasSubstr("int8_ratio must be in [0, 1]"));
  }
}

TEST(TierParams, Int8InPaperPrototypeModeIsRefused) {
  TierParams ratio;
  ratio.mode = EvictionMode::kPaperPrototype;
  ratio.int8_ratio = 0.5;
  TierParams tokens;
  tokens.mode = EvictionMode::kPaperPrototype;
  tokens.int8_tokens = 8;
  for (const TierParams& p : {ratio, tokens}) {
    const Status status = validate(p);
    ASSERT_FALSE(status.has_value());
    EXPECT_EQ(status.error().code, Errc::kInvalidArgument);
    EXPECT_THAT(status.error().message, HasSubstr("paper-prototype"));
  }
}

TEST(TierParams, Int8IsAcceptedInTheOtherModes) {
  for (EvictionMode mode : {EvictionMode::kCumulative, EvictionMode::kPaperAlgorithm}) {
    TierParams p;
    p.mode = mode;
    p.int8_ratio = 1.0;
    p.int8_tokens = 16;
    EXPECT_TRUE(validate(p).has_value()) << eviction_mode_name(mode);
    EXPECT_TRUE(int8_enabled(p));
  }
}

TEST(EvictionMode, NamesRoundTrip) {
  for (EvictionMode m : {EvictionMode::kCumulative, EvictionMode::kPaperAlgorithm,
                         EvictionMode::kPaperPrototype}) {
    auto parsed = parse_eviction_mode(eviction_mode_name(m));
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(*parsed, m);
  }
  EXPECT_EQ(eviction_mode_name(EvictionMode::kCumulative), "cumulative");
  EXPECT_EQ(eviction_mode_name(EvictionMode::kPaperAlgorithm), "paper-algorithm");
  EXPECT_EQ(eviction_mode_name(EvictionMode::kPaperPrototype), "paper-prototype");
}

TEST(EvictionMode, UnknownNameIsRefusedWithTheValidNames) {
  auto parsed = parse_eviction_mode("Cumulative");
  ASSERT_FALSE(parsed.has_value());
  EXPECT_EQ(parsed.error().code, Errc::kInvalidArgument);
  EXPECT_THAT(parsed.error().message, HasSubstr("'Cumulative'"));
  EXPECT_THAT(parsed.error().message, HasSubstr("paper-prototype"));
}

TEST(FloorShare, RoundsDownWithToleranceForDecimalRatios) {
  EXPECT_EQ(floor_share(0.29, 100), 29u);  // 0.29 * 100 is 28.999999999999996 in double
  EXPECT_EQ(floor_share(0.03, 100), 3u);
  EXPECT_EQ(floor_share(0.5, 7), 3u);
  EXPECT_EQ(floor_share(0.1, 9), 0u);
  EXPECT_EQ(floor_share(0.0, 1000), 0u);
  EXPECT_EQ(floor_share(1.0, 1000), 1000u);
  EXPECT_EQ(floor_share(0.999999, 10), 9u);
  EXPECT_EQ(floor_share(0.5, 0), 0u);
}

}  // namespace
}  // namespace kvtier::tier
