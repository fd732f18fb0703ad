// Score head-reduction, CPU reference: from one layer's attention probabilities [heads, tokens]
// to each token's share of the step's importance score (DESIGN.md §5: mean over query heads and
// layers of the probability the token received). The CUDA ScoreReduce (score_ops.hpp) computes
// exactly this, in the same order and without fused multiply-adds, so the two agree bit for bit.
//
// CUDA-free; part of the always-built host library. Thread-safety: reentrant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace kvtier::kernels::cuda {

// 1 / (heads * layers): the weight of one probability in the step's mean.
constexpr float score_scale(std::uint32_t heads, std::uint32_t layers) noexcept {
  return 1.0f / (static_cast<float>(heads) * static_cast<float>(layers));
}

// For t < tokens: acc[t] += (sum over h < heads, in order, of probs[h * ld + t]) * scale.
// Preconditions: acc.size() >= tokens, ld >= tokens, probs holds heads rows of ld floats.
void accumulate_scores_reference(std::span<float> acc, const float* probs, std::uint32_t heads,
                                 std::uint32_t tokens, std::size_t ld, float scale) noexcept;

}  // namespace kvtier::kernels::cuda
