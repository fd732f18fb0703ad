// kernels::IntervalSum: the order of operations both sides of per-decision score shipping use
// (interval_scores.hpp), worked out by hand on values exact in binary floating point.
#include "kvtier/kernels/interval_scores.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace kvtier::kernels {
namespace {

TEST(IntervalSum, APlainSumAddsEveryPushInOrderAndFinishesUnchanged) {
  IntervalSum sum;
  const std::vector<float> a{0.5f, 0.25f};
  const std::vector<float> b{1.0f};
  sum.add(0, a);
  sum.end_step();
  sum.add(1, b);
  sum.add(1, b);
  const auto v = sum.finish();
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0], 0.5f);
  EXPECT_EQ(v[1], 2.25f);
  EXPECT_EQ(sum.touched_begin(), 0u);
  EXPECT_EQ(sum.touched_end(), 2u);
}

TEST(IntervalSum, PendingDecayIsAppliedBeforeTheNextAddAndAtFinishAsOnePower) {
  IntervalSum sum(0.5f);
  const std::vector<float> x{1.0f};
  sum.add(0, x);    // step 1: 1
  sum.end_step();
  sum.end_step();   // step 2 adds nothing
  sum.add(0, x);    // step 3: 1 * 0.5^2 + 1 = 1.25
  EXPECT_EQ(sum.finish()[0], 1.25f);  // the last step weighs 1: nothing pending
  sum.end_step();
  EXPECT_EQ(sum.finish()[0], 0.625f);  // one step ended after the last add
}

TEST(IntervalSum, ResetZeroesTheTouchedRangeAndKeepsTheLength) {
  IntervalSum sum(0.5f);
  const std::vector<float> x{1.0f, 2.0f};
  sum.add(3, x);
  sum.end_step();
  sum.reset();
  EXPECT_EQ(sum.length(), 5u);
  EXPECT_EQ(sum.touched_begin(), sum.touched_end());
  for (const float v : sum.finish()) EXPECT_EQ(v, 0.0f);
  sum.add(0, x);  // nothing pending after a reset
  EXPECT_EQ(sum.finish()[1], 2.0f);
}

TEST(IntervalSum, DecayPowerIsTheDoublePowerRoundedOnce) {
  EXPECT_EQ(decay_power(0.5f, 3), 0.125f);
  EXPECT_EQ(decay_power(0.9f, 0), 1.0f);
  EXPECT_EQ(decay_power(1.0f, 1000), 1.0f);
}

}  // namespace
}  // namespace kvtier::kernels
