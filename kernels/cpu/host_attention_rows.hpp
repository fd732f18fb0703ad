// Private to PartialAttention (host_attention.hpp): the loop over a block of rows, per instruction
// set.
// Written once over 8-lane GCC vectors, compiled for the baseline and, where the CPU has it, for
// AVX2; without fused multiply-add (-ffp-contract=off) both compute every lane the same way, so
// they give the same bits (tests/unit/kernels/host_attention_test.cpp compares them).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvtier::kernels::detail {

// What one row updates: per query head a running max, sum and accumulator ([q_heads, head_dim]).
struct AttentionState {
  const float* q;
  float scale;
  std::uint32_t q_heads, group, head_dim;
  std::size_t half;  // floats of K (and of V) in a row
  float* max;
  float* sum;
  float* acc;
  float* logits;  // nullable: s_i of row i at h * logits_stride + i (finish turns them into probs)
  std::size_t logits_stride, row;  // logits column of the block's first row
  const std::byte* const* next;     // the next block's rows, to prefetch (row_bytes each)
  std::uint32_t next_rows;
  std::size_t row_bytes;
};

// Adds rows[0..n) (n <= 8; K of every KV head, then V, float32) to `state`, logits columns
// state.row.. (and advances state.row by n).
using AddBlock = void (*)(AttentionState& state, const float* const* rows, std::uint32_t n) noexcept;

AddBlock baseline_add_block() noexcept;
AddBlock avx2_add_block() noexcept;  // nullptr without AVX2 (CPU or build)
// The widest of them this CPU runs, chosen once per process.
AddBlock default_add_block() noexcept;

// values[i] = exp(values[i] − lse) for n values (each <= lse), by the same polynomial.
using ToProbs = void (*)(float* values, std::size_t n, float lse) noexcept;

ToProbs baseline_to_probs() noexcept;
ToProbs avx2_to_probs() noexcept;  // nullptr without AVX2 (CPU or build)
ToProbs default_to_probs() noexcept;

}  // namespace kvtier::kernels::detail
