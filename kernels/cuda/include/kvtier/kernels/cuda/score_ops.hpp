// Score head-reduction on the GPU (DESIGN.md §3, §5): each layer's attention probabilities
// [heads, tokens] become every token's share of the step's score, accumulated in HBM across the
// layers of a step and copied to the host once per step (one small D2H, never one per layer).
//
//  - ScoreReduce: one layer, CUTLASS-style can_implement -> initialize -> run(stream); computes
//    accumulate_scores_reference (score_reference.hpp) bit for bit (no fused multiply-add).
//  - ScoreAccumulator: owns the step accumulator and its pinned host copy.
//
// Addresses are device addresses as integers; `stream` is a cudaStream_t as an integer (the
// engine's compute stream, so the reduction runs right after the attention that produced the
// probabilities). Thread-safety: one thread at a time per object.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kvtier/kernels/cuda/device.hpp"
#include "kvtier/protocol/error.hpp"

namespace kvtier::kernels::cuda {

struct ScoreReduceArguments {
  std::uintptr_t probs = 0;  // device f32 [heads rows of ld floats]
  std::uint32_t heads = 0;
  std::uint32_t tokens = 0;
  std::size_t ld = 0;              // floats between consecutive heads' rows, >= tokens
  float scale = 0.0f;              // score_scale(heads, layers)
  std::uintptr_t accumulator = 0;  // device f32 [>= tokens], updated in place
};

class ScoreReduce {
 public:
  static Status can_implement(const ScoreReduceArguments& args);
  Status initialize(const ScoreReduceArguments& args);
  Status run(std::uintptr_t stream) const;

 private:
  ScoreReduceArguments args_{};
  bool initialized_ = false;
};

class ScoreAccumulator {
 public:
  // Room for max_tokens tokens per step, for a model of num_layers layers; zeroed.
  static Result<ScoreAccumulator> create(std::uint32_t max_tokens, std::uint32_t num_layers);

  // Adds one layer's probabilities (weight 1 / (heads * num_layers)) on `stream`.
  Status add_layer(std::uintptr_t probs, std::uint32_t heads, std::uint32_t tokens, std::size_t ld,
                   std::uintptr_t stream);
  // Ends the step on `stream`: one device-to-host copy of the step's tokens (the most any
  // add_layer named) into pinned memory, then the accumulator is zeroed for the next step.
  Status end_step(std::uintptr_t stream);
  // Waits for the last end_step and returns its scores; valid until the next end_step.
  Result<std::span<const float>> collect() const;

 private:
  ScoreAccumulator() = default;

  DeviceBuffer accumulator_;
  PinnedBuffer host_;
  Event copied_;
  std::uint32_t max_tokens_ = 0;
  std::uint32_t num_layers_ = 0;
  std::uint32_t step_tokens_ = 0;       // tokens added in the running step
  std::uint32_t collected_tokens_ = 0;  // tokens copied by the last end_step
};

}  // namespace kvtier::kernels::cuda
