// ScoreReduce and ScoreAccumulator (score_ops.hpp).
#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda_check.hpp"
#include "kvtier/kernels/cuda/score_ops.hpp"
#include "kvtier/kernels/cuda/score_reference.hpp"

namespace kvtier::kernels::cuda {
namespace {

constexpr std::uint32_t kScoreThreads = 256;
constexpr std::uint32_t kMaxScoreBlocks = 4096;

// One thread per token, heads summed in order; explicit round-to-nearest adds and multiplies so
// nvcc cannot contract them into FMAs and the result equals the CPU reference bit for bit.
// Threads of a warp read consecutive tokens of one head row: coalesced.
__global__ void score_reduce_kernel(const float* probs, std::uint32_t heads, std::uint32_t tokens,
                                    std::uint64_t ld, float scale, float* accumulator) {
  for (std::uint64_t t = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < tokens;
       t += std::uint64_t{gridDim.x} * blockDim.x) {
    float sum = 0.0f;
    for (std::uint32_t h = 0; h < heads; ++h) sum = __fadd_rn(sum, probs[h * ld + t]);
    accumulator[t] = __fadd_rn(accumulator[t], __fmul_rn(sum, scale));
  }
}

}  // namespace

Status ScoreReduce::can_implement(const ScoreReduceArguments& a) {
  if (a.tokens == 0) return {};
  if (a.probs == 0 || a.accumulator == 0) {
    return make_error(Errc::kInvalidArgument, "score reduce: null address");
  }
  if (a.heads == 0 || a.ld < a.tokens) {
    return make_error(Errc::kInvalidArgument, "score reduce: need heads > 0 and ld >= tokens");
  }
  if (a.probs % alignof(float) != 0 || a.accumulator % alignof(float) != 0) {
    return make_error(Errc::kInvalidArgument, "score reduce: addresses must be float-aligned");
  }
  return {};
}

Status ScoreReduce::initialize(const ScoreReduceArguments& args) {
  initialized_ = false;
  if (auto s = can_implement(args); !s) return s;
  args_ = args;
  initialized_ = true;
  return {};
}

Status ScoreReduce::run(std::uintptr_t stream) const {
  if (!initialized_) return make_error(Errc::kBadState, "score reduce: not initialized");
  if (args_.tokens == 0) return {};
  const std::uint32_t blocks =
      std::min(kMaxScoreBlocks, (args_.tokens + kScoreThreads - 1) / kScoreThreads);
  score_reduce_kernel<<<blocks, kScoreThreads, 0, reinterpret_cast<cudaStream_t>(stream)>>>(
      reinterpret_cast<const float*>(args_.probs), args_.heads, args_.tokens, args_.ld, args_.scale,
      reinterpret_cast<float*>(args_.accumulator));
  KVTIER_CUDA_CHECK_LAUNCH("score_reduce_kernel");
  return {};
}

Result<ScoreAccumulator> ScoreAccumulator::create(std::uint32_t max_tokens,
                                                  std::uint32_t num_layers) {
  if (max_tokens == 0 || num_layers == 0) {
    return make_error(Errc::kInvalidArgument, "score accumulator: max_tokens and layers > 0");
  }
  ScoreAccumulator acc;
  auto device = DeviceBuffer::allocate(std::size_t{max_tokens} * sizeof(float));
  if (!device) return tl::unexpected(device.error());
  auto host = PinnedBuffer::allocate(std::size_t{max_tokens} * sizeof(float));
  if (!host) return tl::unexpected(host.error());
  auto event = Event::create();
  if (!event) return tl::unexpected(event.error());
  if (auto s = device->fill(0); !s) return tl::unexpected(s.error());
  acc.accumulator_ = std::move(*device);
  acc.host_ = std::move(*host);
  acc.copied_ = std::move(*event);
  acc.max_tokens_ = max_tokens;
  acc.num_layers_ = num_layers;
  return acc;
}

Status ScoreAccumulator::add_layer(std::uintptr_t probs, std::uint32_t heads, std::uint32_t tokens,
                                   std::size_t ld, std::uintptr_t stream) {
  if (tokens > max_tokens_) {
    return make_error(Errc::kInvalidArgument, "score accumulator: " + std::to_string(tokens) +
                                                  " tokens > max_tokens " +
                                                  std::to_string(max_tokens_));
  }
  ScoreReduce reduce;
  const ScoreReduceArguments args{
      probs, heads, tokens, ld, score_scale(heads, num_layers_), accumulator_.address()};
  if (auto s = reduce.initialize(args); !s) return s;
  if (auto s = reduce.run(stream); !s) return s;
  step_tokens_ = std::max(step_tokens_, tokens);
  return {};
}

Status ScoreAccumulator::end_step(std::uintptr_t stream) {
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  const std::size_t bytes = std::size_t{step_tokens_} * sizeof(float);
  if (bytes != 0) {
    KVTIER_CUDA_CHECK(cudaMemcpyAsync(host_.data(),
                                      reinterpret_cast<const void*>(accumulator_.address()), bytes,
                                      cudaMemcpyDeviceToHost, s));
    KVTIER_CUDA_CHECK(
        cudaMemsetAsync(reinterpret_cast<void*>(accumulator_.address()), 0, bytes, s));
  }
  if (auto r = copied_.record(stream); !r) return r;
  collected_tokens_ = step_tokens_;
  step_tokens_ = 0;
  return {};
}

Result<std::span<const float>> ScoreAccumulator::collect() const {
  if (auto s = copied_.synchronize(); !s) return tl::unexpected(s.error());
  return std::span<const float>(reinterpret_cast<const float*>(host_.data()), collected_tokens_);
}

}  // namespace kvtier::kernels::cuda
