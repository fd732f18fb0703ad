// Score head-reduction on the GPU against the CPU reference: one layer at a time (ScoreReduce)
// and a whole step accumulated on the device and copied out once (ScoreAccumulator).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "cuda_test_support.hpp"
#include "kvtier/kernels/cuda/score_ops.hpp"
#include "kvtier/kernels/cuda/score_reference.hpp"
#include "kvtier/kernels/interval_scores.hpp"

namespace kvtier::kernels::cuda {
namespace {

constexpr std::uint32_t kHeads = 12;
constexpr std::uint32_t kLd = 1024;

std::vector<float> random_probs(std::uint64_t seed) {
  std::mt19937 rng(static_cast<std::uint32_t>(seed));
  std::uniform_real_distribution<float> p(0.001f, 1.0f);  // never zero
  std::vector<float> probs(std::size_t{kHeads} * kLd);
  for (float& x : probs) x = p(rng);
  return probs;
}

class ScoreTest : public ::testing::Test {
 protected:
  void SetUp() override { KVTIER_SKIP_WITHOUT_CUDA_DEVICE(); }
};

TEST_F(ScoreTest, ReduceAddsEachTokensHeadMeanLikeTheReference) {
  const std::uint32_t tokens = 1000;
  const std::vector<float> probs = random_probs(1);
  std::vector<float> want(tokens);
  for (std::uint32_t t = 0; t < tokens; ++t) want[t] = 0.25f + static_cast<float>(t) * 1e-3f;
  std::vector<float> start = want;
  auto d_probs = DeviceBuffer::allocate(probs.size() * 4);
  auto d_acc = DeviceBuffer::allocate(tokens * 4);
  ASSERT_TRUE(d_probs && d_acc);
  ASSERT_TRUE(d_probs->upload(probs.data(), probs.size() * 4));
  ASSERT_TRUE(d_acc->upload(start.data(), tokens * 4));
  accumulate_scores_reference(want, probs.data(), kHeads, tokens, kLd, score_scale(kHeads, 3));
  ScoreReduce op;
  ASSERT_TRUE(op.initialize(ScoreReduceArguments{d_probs->address(), kHeads, tokens, kLd,
                                                 score_scale(kHeads, 3), d_acc->address()}));
  ASSERT_TRUE(op.run(0));
  std::vector<float> got(tokens);
  ASSERT_TRUE(d_acc->download(got.data(), tokens * 4));
  for (std::uint32_t t = 0; t < tokens; ++t) EXPECT_FLOAT_EQ(got[t], want[t]) << t;
}

TEST_F(ScoreTest, AccumulatorSumsAStepsLayersOnTheDeviceAndRestartsFromZero) {
  constexpr std::uint32_t kLayers = 3;
  auto acc = ScoreAccumulator::create(2048, kLayers);
  ASSERT_TRUE(acc);
  auto stream = Stream::create();
  ASSERT_TRUE(stream);
  for (const std::uint32_t tokens : {1000u, 1017u}) {  // the second step has grown
    std::vector<float> want(tokens, 0.0f);
    std::vector<DeviceBuffer> layers;
    for (std::uint32_t l = 0; l < kLayers; ++l) {
      const std::vector<float> probs = random_probs(10 * tokens + l);
      accumulate_scores_reference(want, probs.data(), kHeads, tokens, kLd,
                                  score_scale(kHeads, kLayers));
      auto d = DeviceBuffer::allocate(probs.size() * 4);
      ASSERT_TRUE(d && d->upload(probs.data(), probs.size() * 4));
      ASSERT_TRUE(acc->add_layer(d->address(), kHeads, tokens, kLd, stream->handle()));
      layers.push_back(std::move(*d));
    }
    ASSERT_TRUE(acc->end_step(stream->handle()));
    const auto got = acc->collect();
    ASSERT_TRUE(got);
    ASSERT_EQ(got->size(), tokens);
    for (std::uint32_t t = 0; t < tokens; ++t) EXPECT_FLOAT_EQ((*got)[t], want[t]) << t;
  }
}

TEST_F(ScoreTest, AccumulatorFoldsStepsIntoIntervalSumsBitForBitLikeIntervalSum) {
  constexpr std::uint32_t kLayers = 2;
  const IntervalFactors factors{0.9f, true, 0.875f};
  auto acc = ScoreAccumulator::create(2048, kLayers, factors);
  ASSERT_TRUE(acc);
  auto stream = Stream::create();
  ASSERT_TRUE(stream);
  kernels::IntervalSum sums(factors.score_factor);
  kernels::IntervalSum recent(factors.recent_factor);
  std::vector<DeviceBuffer> layers;
  for (std::uint32_t step = 0; step < 12; ++step) {
    const std::uint32_t tokens = 900 + 9 * step;  // the sequence grows
    const bool last = step % 4 == 3;           // intervals of 4 steps
    std::vector<float> want(tokens, 0.0f);
    for (std::uint32_t l = 0; l < kLayers; ++l) {
      const std::vector<float> probs = random_probs(100 * step + l);
      accumulate_scores_reference(want, probs.data(), kHeads, tokens, kLd, score_scale(kHeads, kLayers));
      auto d = DeviceBuffer::allocate(probs.size() * 4);
      ASSERT_TRUE(d && d->upload(probs.data(), probs.size() * 4));
      ASSERT_TRUE(acc->add_layer(d->address(), kHeads, tokens, kLd, stream->handle()));
      layers.push_back(std::move(*d));
    }
    sums.add(0, want);
    recent.add(0, want);
    ASSERT_TRUE(acc->end_step(stream->handle(), last));
    if (!last) {
      sums.end_step();
      recent.end_step();
      continue;
    }
    const auto got = acc->collect();
    const auto got_recent = acc->collect_recent();
    ASSERT_TRUE(got && got_recent);
    const std::span<const float> ref = sums.finish();
    const std::span<const float> ref_recent = recent.finish();
    ASSERT_EQ(got->size(), ref.size());
    ASSERT_EQ(got_recent->size(), ref_recent.size());
    for (std::size_t t = 0; t < ref.size(); ++t) {
      ASSERT_EQ((*got)[t], ref[t]) << "step " << step << " token " << t;
      ASSERT_EQ((*got_recent)[t], ref_recent[t]) << "step " << step << " token " << t;
    }
    sums.reset();
    recent.reset();
  }
}

TEST_F(ScoreTest, AccumulatorRejectsMoreTokensThanItHoldsAndBadArguments) {
  auto acc = ScoreAccumulator::create(16, 2);
  ASSERT_TRUE(acc);
  auto probs = DeviceBuffer::allocate(64 * 4);
  ASSERT_TRUE(probs);
  EXPECT_FALSE(acc->add_layer(probs->address(), 1, 17, 17, 0));
  EXPECT_FALSE(acc->add_layer(probs->address(), 1, 8, 4, 0));  // ld < tokens
  EXPECT_FALSE(ScoreAccumulator::create(0, 2));
}

}  // namespace
}  // namespace kvtier::kernels::cuda
