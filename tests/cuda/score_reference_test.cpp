// The CPU reference of the score head-reduction, which the CUDA ScoreReduce is checked against.
#include "kvtier/kernels/cuda/score_reference.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace kvtier::kernels::cuda {
namespace {

TEST(ScoreReference, AddsTheMeanOverHeadsAndLayersOfEachTokensProbability) {
  // 2 heads x 3 tokens, rows 4 floats apart (the 4th column is not a token); 2 layers -> 1/4.
  const std::vector<float> probs{0.5f, 0.25f, 0.25f, 99.0f, 0.1f, 0.7f, 0.2f, 99.0f};
  std::vector<float> acc{1.0f, 0.0f, 0.0f};
  accumulate_scores_reference(acc, probs.data(), 2, 3, 4, score_scale(2, 2));
  EXPECT_FLOAT_EQ(acc[0], 1.0f + 0.6f / 4);
  EXPECT_FLOAT_EQ(acc[1], 0.95f / 4);
  EXPECT_FLOAT_EQ(acc[2], 0.45f / 4);
}

TEST(ScoreReference, TwoLayersOfUniformAttentionAddUpToTheUniformProbability) {
  const std::vector<float> probs(3 * 8, 0.125f);  // 3 heads, 8 tokens, uniform
  std::vector<float> acc(8, 0.0f);
  for (int layer = 0; layer < 2; ++layer) {
    accumulate_scores_reference(acc, probs.data(), 3, 8, 8, score_scale(3, 2));
  }
  for (const float s : acc) EXPECT_FLOAT_EQ(s, 0.125f);
}

}  // namespace
}  // namespace kvtier::kernels::cuda
