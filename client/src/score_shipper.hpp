// SequenceScores: libkvtier's score accumulation for one sequence between decisions
// (PROTOCOL.md §4 "Score shipping", shm/LAYOUT.md "Records"). The engine pushes every step's
// scores; they are summed here, in the client's own memory, by kernels::IntervalSum, and only
// the interval's sums cross shared memory, in the step that completes an interval, just before
// that step's end marker. kvtierd folds them exactly as its per-step path folds the same values,
// so its scores and decisions are bit-identical either way.
//
// Steps are counted as kvtierd counts them: one per step-end marker that reached the ring (a
// dropped marker is not counted, and its step's values merge into the next step, on both sides
// alike). Sums that do not fit into the ring are not lost: they are added back and go out with
// the next interval's (late, counted in score_positions_deferred).
//
// Thread-safety: none; owned by the Client (one thread at a time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kvtier/kernels/interval_scores.hpp"
#include "kvtier/protocol/control.capnp.h"
#include "kvtier/shm/records.hpp"

namespace kvtier::client {

// The wire's ScoreShipping, copied out. interval 0: ship every step (a daemon that sent none).
struct ShippingParams {
  std::uint32_t interval = 0;
  std::uint64_t steps_done = 0;
  float score_factor = 1.0f;
  bool recent = false;
  float recent_factor = 0.0f;
};

ShippingParams shipping_from_wire(wire::ScoreShipping::Reader wire);

class SequenceScores {
 public:
  // per_step: ship every push as it comes (ScoreKind::kAttention; the per-step path kvtierd
  // keeps for comparison and for engines that ask for it), whatever the interval.
  SequenceScores(const ShippingParams& params, bool per_step);

  // True when pushes go out as per-step records instead of being accumulated here.
  bool per_step() const noexcept { return per_step_; }
  void add(std::uint32_t first, std::span<const float> values);
  // Interval sums computed elsewhere (a device accumulator): added to the attention sums, or to
  // the recent-attention sums (`recent`; false when the policy keeps none).
  bool add_sums(bool recent, std::uint32_t first, std::span<const float> sums);
  // True when the step now ending completes an interval: its sums are then to be shipped.
  bool completes_interval() const noexcept;
  // Appends the interval's sum records (kAttentionSum, then kRecentSum when the policy keeps
  // recent attention) to `out` and restarts the sums. Precondition: completes_interval().
  void take_sums(std::uint32_t sequence, std::vector<shm::ScoreRecord>& out);
  // Records that take_sums produced but the ring refused: added back into the running sums.
  void carry(std::span<const shm::ScoreRecord> unshipped);
  // The step's end marker reached the ring (`shipped`: take_sums ran for this step).
  void step_counted(bool shipped);

  std::size_t bytes() const noexcept;

 private:
  ShippingParams params_;
  bool per_step_;
  kernels::IntervalSum sums_;
  std::optional<kernels::IntervalSum> recent_;
};

}  // namespace kvtier::client
