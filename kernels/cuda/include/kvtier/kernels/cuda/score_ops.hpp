// Score head-reduction on the GPU (DESIGN.md §3, §5): each layer's attention probabilities
// [heads, tokens] become every token's share of the step's score, accumulated in HBM across the
// layers of a step, then folded on the device into the interval's sums exactly as
// kernels::IntervalSum (kvtier/kernels/interval_scores.hpp) folds one add(0, step) per step, and
// copied to the host once per interval (one D2H per decision, never one per step or layer): what
// libkvtier ships to kvtierd per decision (PROTOCOL.md §4 "Score shipping").
//
//  - ScoreReduce: one layer, CUTLASS-style can_implement -> initialize -> run(stream); computes
//    accumulate_scores_reference (score_reference.hpp) bit for bit (no fused multiply-add).
//  - ScoreAccumulator: owns the step accumulator, the interval sums (attention and, for vase and
//    r_kv, recent attention) and their pinned host copies.
//
// Addresses are device addresses as integers; `stream` is a cudaStream_t as an integer (the
// engine's compute stream, so the reduction runs right after the attention that produced the
// probabilities). Thread-safety: one thread at a time per object.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kvtier/kernels/cuda/device.hpp"
#include "kvtier/base/error.hpp"

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

// The IntervalSum factors of a sequence (ScoreShipping on the wire): score_factor for the
// attention sums, recent_factor for the recent-attention sums when `recent`.
struct IntervalFactors {
  float score_factor = 1.0f;
  bool recent = false;
  float recent_factor = 0.0f;
};

class ScoreAccumulator {
 public:
  // Room for max_tokens tokens per step, for a model of num_layers layers; zeroed.
  static Result<ScoreAccumulator> create(std::uint32_t max_tokens, std::uint32_t num_layers,
                                         IntervalFactors factors = {});

  // Adds one layer's probabilities (weight 1 / (heads * num_layers)) on `stream`.
  Status add_layer(std::uintptr_t probs, std::uint32_t heads, std::uint32_t tokens, std::size_t ld,
                   std::uintptr_t stream);
  // Ends the step on `stream`: the step's tokens (the most any add_layer named) are folded into
  // the interval sums (IntervalSum::add(0, step), its pending decay first) and the step
  // accumulator is zeroed. When the step completes an interval, one device-to-host copy of the
  // interval's sums (tokens [0, the most any step of it named)) into pinned memory follows and
  // the sums restart; otherwise the step's decay becomes pending (IntervalSum::end_step). With
  // completes_interval every step, collect() returns each step's scores.
  Status end_step(std::uintptr_t stream, bool completes_interval = true);
  // Waits for the last interval-completing end_step and returns its attention sums (collect)
  // or recent-attention sums (collect_recent; empty without `recent`); valid until the next one.
  Result<std::span<const float>> collect() const;
  Result<std::span<const float>> collect_recent() const;

 private:
  ScoreAccumulator() = default;

  DeviceBuffer accumulator_;
  DeviceBuffer sums_;    // interval sums: [0, max_tokens) attention, then recent when kept
  PinnedBuffer host_;    // their copy: same layout
  Event copied_;
  IntervalFactors factors_;
  std::uint32_t max_tokens_ = 0;
  std::uint32_t num_layers_ = 0;
  std::uint32_t step_tokens_ = 0;       // tokens added in the running step
  std::uint32_t interval_tokens_ = 0;   // tokens any step of the running interval added
  std::uint32_t pending_ = 0;           // steps ended since the last fold (IntervalSum's p)
  std::uint32_t collected_tokens_ = 0;  // tokens copied by the last interval-completing end_step
};

}  // namespace kvtier::kernels::cuda
