// ScoreReduce and ScoreAccumulator (score_ops.hpp).
#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda_check.hpp"
#include "kvtier/kernels/cuda/score_ops.hpp"
#include "kvtier/kernels/cuda/score_reference.hpp"
#include "kvtier/kernels/interval_scores.hpp"

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

// IntervalSum::add(0, step) for one or two sums at once: v <- v * f^p (when factor != 1 and p > 0;
// over the interval's touched tokens), then v += step (over the step's tokens), in IntervalSum's
// order and rounding; the step accumulator is zeroed for the next step.
__global__ void interval_fold_kernel(float* step, std::uint32_t step_tokens, std::uint32_t touched,
                                     float* sums, float score_power, float* recent, float recent_power) {
  for (std::uint64_t t = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < touched;
       t += std::uint64_t{gridDim.x} * blockDim.x) {
    const float x = t < step_tokens ? step[t] : 0.0f;
    float v = sums[t];
    if (score_power != 1.0f) v = __fmul_rn(v, score_power);
    sums[t] = t < step_tokens ? __fadd_rn(v, x) : v;
    if (recent != nullptr) {
      float r = recent[t];
      if (recent_power != 1.0f) r = __fmul_rn(r, recent_power);
      recent[t] = t < step_tokens ? __fadd_rn(r, x) : r;
    }
    if (t < step_tokens) step[t] = 0.0f;
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
                                                  std::uint32_t num_layers, IntervalFactors factors) {
  if (max_tokens == 0 || num_layers == 0) {
    return make_error(Errc::kInvalidArgument, "score accumulator: max_tokens and layers > 0");
  }
  ScoreAccumulator acc;
  auto device = DeviceBuffer::allocate(std::size_t{max_tokens} * sizeof(float));
  if (!device) return tl::unexpected(device.error());
  const std::size_t sums_bytes = std::size_t{max_tokens} * sizeof(float) * (factors.recent ? 2 : 1);
  auto sums = DeviceBuffer::allocate(sums_bytes);
  if (!sums) return tl::unexpected(sums.error());
  auto host = PinnedBuffer::allocate(sums_bytes);
  if (!host) return tl::unexpected(host.error());
  auto event = Event::create();
  if (!event) return tl::unexpected(event.error());
  if (auto s = device->fill(0); !s) return tl::unexpected(s.error());
  if (auto s = sums->fill(0); !s) return tl::unexpected(s.error());
  acc.accumulator_ = std::move(*device);
  acc.sums_ = std::move(*sums);
  acc.factors_ = factors;
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

Status ScoreAccumulator::end_step(std::uintptr_t stream, bool completes_interval) {
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  interval_tokens_ = std::max(interval_tokens_, step_tokens_);
  float* sums = reinterpret_cast<float*>(sums_.address());
  float* recent = factors_.recent ? sums + max_tokens_ : nullptr;
  if (step_tokens_ != 0) {  // IntervalSum::add skips an empty add, pending decay included
    const std::uint32_t blocks =
        std::min(kMaxScoreBlocks, (interval_tokens_ + kScoreThreads - 1) / kScoreThreads);
    interval_fold_kernel<<<blocks, kScoreThreads, 0, s>>>(
        reinterpret_cast<float*>(accumulator_.address()), step_tokens_, interval_tokens_, sums,
        decay_power(factors_.score_factor, pending_), recent,
        decay_power(factors_.recent_factor, pending_));
    KVTIER_CUDA_CHECK_LAUNCH("interval_fold_kernel");
    pending_ = 0;
  }
  step_tokens_ = 0;
  if (!completes_interval) {
    ++pending_;
    return {};
  }
  // IntervalSum::finish: the decay of steps that ended after the last add, applied on the
  // device (a fold with no step tokens) before the copy.
  if (pending_ != 0 && interval_tokens_ != 0) {
    const std::uint32_t blocks =
        std::min(kMaxScoreBlocks, (interval_tokens_ + kScoreThreads - 1) / kScoreThreads);
    interval_fold_kernel<<<blocks, kScoreThreads, 0, s>>>(
        reinterpret_cast<float*>(accumulator_.address()), 0, interval_tokens_, sums,
        decay_power(factors_.score_factor, pending_), recent,
        decay_power(factors_.recent_factor, pending_));
    KVTIER_CUDA_CHECK_LAUNCH("interval_fold_kernel");
  }
  const std::size_t bytes = std::size_t{interval_tokens_} * sizeof(float);
  if (bytes != 0) {
    KVTIER_CUDA_CHECK(cudaMemcpyAsync(host_.data(), sums, bytes, cudaMemcpyDeviceToHost, s));
    KVTIER_CUDA_CHECK(cudaMemsetAsync(sums, 0, bytes, s));
    if (recent != nullptr) {
      KVTIER_CUDA_CHECK(cudaMemcpyAsync(static_cast<std::byte*>(host_.data()) + std::size_t{max_tokens_} * sizeof(float),
                                        recent, bytes, cudaMemcpyDeviceToHost, s));
      KVTIER_CUDA_CHECK(cudaMemsetAsync(recent, 0, bytes, s));
    }
  }
  if (auto r = copied_.record(stream); !r) return r;
  collected_tokens_ = interval_tokens_;
  interval_tokens_ = 0;
  pending_ = 0;
  return {};
}

Result<std::span<const float>> ScoreAccumulator::collect() const {
  if (auto s = copied_.synchronize(); !s) return tl::unexpected(s.error());
  return std::span<const float>(reinterpret_cast<const float*>(host_.data()), collected_tokens_);
}

Result<std::span<const float>> ScoreAccumulator::collect_recent() const {
  if (auto s = copied_.synchronize(); !s) return tl::unexpected(s.error());
  if (!factors_.recent) return std::span<const float>();
  return std::span<const float>(reinterpret_cast<const float*>(host_.data()) + max_tokens_, collected_tokens_);
}

}  // namespace kvtier::kernels::cuda
