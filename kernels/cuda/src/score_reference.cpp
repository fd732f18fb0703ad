// Score head-reduction, CPU reference (see score_reference.hpp).
#include "kvtier/kernels/cuda/score_reference.hpp"

namespace kvtier::kernels::cuda {

void accumulate_scores_reference(std::span<float> acc, const float* probs, std::uint32_t heads,
                                 std::uint32_t tokens, std::size_t ld, float scale) noexcept {
  for (std::uint32_t t = 0; t < tokens; ++t) {
    float sum = 0.0f;
    for (std::uint32_t h = 0; h < heads; ++h) sum += probs[std::size_t{h} * ld + t];
    acc[t] += sum * scale;
  }
}

}  // namespace kvtier::kernels::cuda
