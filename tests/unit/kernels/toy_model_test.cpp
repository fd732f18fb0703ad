// ToyModel on its own: determinism, scores, positions and the HBM slot map.
#include "kvtier/toy/toy_model.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

namespace kvtier::toy {
namespace {

ToyConfig small_config() {
  ToyConfig config;
  config.num_layers = 2;
  config.num_q_heads = 4;
  config.num_kv_heads = 2;
  config.head_dim = 8;
  config.max_slots = 16;
  return config;
}

std::vector<std::uint32_t> tokens(std::size_t n) {
  std::vector<std::uint32_t> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::uint32_t>((i * 7 + 3) % 32);
  return out;
}

TEST(ToyModel, SameSeedGivesTheSameOutputsAndAnotherSeedDoesNot) {
  ToyModel a(small_config(), 1), b(small_config(), 1), c(small_config(), 2);
  const auto ta = a.prefill(tokens(6)), tb = b.prefill(tokens(6)), tc = c.prefill(tokens(6));
  ASSERT_TRUE(ta && tb && tc);
  EXPECT_EQ(ta->hidden, tb->hidden);
  EXPECT_EQ(ta->scores, tb->scores);
  EXPECT_NE(ta->hidden, tc->hidden);
}

TEST(ToyModel, ScoresCoverEveryLivePositionAndSumToOne) {
  ToyModel model(small_config(), 5);
  ASSERT_TRUE(model.prefill(tokens(5)));
  const auto out = model.decode_token(9, 5);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->positions, (std::vector<std::uint32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_NEAR(std::accumulate(out->scores.begin(), out->scores.end(), 0.0f), 1.0f, 1e-5f);
  EXPECT_EQ(out->hidden.size(), small_config().model_dim());
}

TEST(ToyModel, PositionGapsChangeTheOutputThroughRope) {
  ToyModel a(small_config(), 5), b(small_config(), 5);
  ASSERT_TRUE(a.prefill(tokens(5)) && b.prefill(tokens(5)));
  const auto near = a.decode_token(9, 5), far = b.decode_token(9, 40);
  ASSERT_TRUE(near && far);
  EXPECT_NE(near->hidden, far->hidden);
}

TEST(ToyModel, ReleasedSlotsAreReusedForNewTokens) {
  ToyModel model(small_config(), 5);
  ASSERT_TRUE(model.prefill(tokens(4)));
  EXPECT_EQ(model.slot_of(2), 2u);
  const auto freed = model.release(2);
  ASSERT_TRUE(freed);
  EXPECT_EQ(*freed, 2u);
  EXPECT_FALSE(model.slot_of(2));
  ASSERT_TRUE(model.decode_token(1, 4));
  EXPECT_EQ(model.slot_of(4), 2u);  // lowest free slot
  EXPECT_EQ(model.resident_positions(), (std::vector<std::uint32_t>{0, 1, 3, 4}));
  EXPECT_FALSE(model.release(2));
}

TEST(ToyModel, RejectsALivePositionAndRunsOutOfSlots) {
  ToyModel model(small_config(), 5);
  ASSERT_TRUE(model.prefill(tokens(16)));
  const auto again = model.decode_token(1, 3);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, Errc::kInvalidArgument);
  const auto full = model.decode_token(1, 16);
  ASSERT_FALSE(full);
  EXPECT_EQ(full.error().code, Errc::kLimitExceeded);
  const std::vector<float> wrong_size(3);
  EXPECT_FALSE(model.decode_step(wrong_size, 17));
}

}  // namespace
}  // namespace kvtier::toy
