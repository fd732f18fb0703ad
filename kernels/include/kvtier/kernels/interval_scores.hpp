// Per-decision score accumulation: the one definition of how a sequence's per-step scores become
// the per-interval sums that libkvtier ships to kvtierd and kvtierd folds into its cumulative
// scores (shm/LAYOUT.md "Score records", DESIGN.md §5). Both sides compile this file, so the
// per-step path (kvtierd accumulating ScoreKind::kAttention records itself) and the
// per-decision path (libkvtier accumulating, kvtierd receiving ScoreKind::kAttentionSum) run the
// same float operations in the same order and agree bit for bit.
//
// Order of operations, for a factor f (1: plain sum; the score decay d or the recent-attention
// EMA factor ρ = 1 − 1/R otherwise), over the steps of one interval (Δ decode steps):
//   add(first, x):  if p > 0 steps ended since the last add, v ← v · f^p (every entry), p ← 0;
//                   then v[first + i] += x[i], in call order.
//   end_step():     p ← p + 1.
//   finish():       v ← v · f^p if p > 0 (the steps that ended after the last add), then v is the
//                   interval's sum Σ_j f^(t−j) · x_j (t = the interval's last step; x_j the values
//                   added during step j, in call order; the last step weighs 1).
// f^n is always decay_power(f, n) = float(pow(double f, n)), never repeated multiplication. With
// f == 1 no multiply happens at all (x · 1 == x exactly, so skipping is the same arithmetic).
// The fold of an interval into a cumulative value u is fold(): u ← u · f^Δ + v, the multiply
// once per interval for every token, the add per token.
//
// Thread-safety: none; one owner (a client's sequence, or the daemon's SequenceTiers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace kvtier::kernels {

// float(pow(double(factor), steps)); 1 for steps == 0 or factor == 1.
float decay_power(float factor, std::uint64_t steps) noexcept;

// v[i] *= factor for every i; no-op for factor == 1.
void scale_scores(std::span<float> values, float factor) noexcept;

class IntervalSum {
 public:
  // factor in (0, 1]; 1 for a plain sum.
  explicit IntervalSum(float factor = 1.0f) noexcept : factor_(factor) {}

  // Adds values[i] to position first + i, growing the sum (new entries 0). Precondition: the
  // values are finite and >= 0 (the daemon validates what it accumulates itself; a client that
  // adds garbage only ships garbage, which the daemon then refuses).
  void add(std::uint32_t first, std::span<const float> values);
  void end_step() noexcept;
  // Applies the pending decay and returns the interval's sums, positions [0, length()).
  std::span<const float> finish() noexcept;
  // Starts the next interval: every sum 0, nothing pending, length kept (capacity kept).
  void reset() noexcept;
  // Forgets everything and releases the memory.
  void clear() noexcept;

  // [begin, end) of the positions any add() touched since the last reset (empty: begin == end).
  std::uint32_t touched_begin() const noexcept { return touched_begin_; }
  std::uint32_t touched_end() const noexcept { return touched_end_; }
  std::uint32_t length() const noexcept { return static_cast<std::uint32_t>(values_.size()); }
  float factor() const noexcept { return factor_; }
  std::size_t bytes() const noexcept { return values_.capacity() * sizeof(float); }

 private:
  void apply_pending() noexcept;

  float factor_;
  std::uint32_t pending_ = 0;
  std::uint32_t touched_begin_ = 0;
  std::uint32_t touched_end_ = 0;
  std::vector<float> values_;
};

}  // namespace kvtier::kernels
