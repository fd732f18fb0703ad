// Private to attend_rows (host_attention.hpp): the loops over a block of rows, per instruction
// set. Written once over 8-lane GCC vectors, compiled for the baseline and, where the CPU has it,
// for AVX2; without fused multiply-add (-ffp-contract=off) both compute every lane the same way,
// so they give the same bits (tests/unit/kernels/host_attention_test.cpp compares them).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvtier/kernels/host_attention.hpp"

namespace kvtier::kernels::detail {

// One chunk's online softmax: per query head a running max, sum and accumulator [q_heads, head_dim].
struct AttentionState {
  const float* q;
  float scale;
  std::uint32_t q_heads, group, head_dim;
  float* max;
  float* sum;
  float* acc;
  float* logits;  // nullable [q_heads, logits_stride]: s_i of row i at h * logits_stride + i
  std::size_t logits_stride, row;  // the block's first row
  // The next block's rows, prefetched a few at each query head (rows are scattered over a pool
  // and a cache, where the hardware prefetchers do not follow): kv_heads heads of head_bytes.
  const AttendRow* next;
  std::uint32_t next_rows, kv_heads;
  std::size_t head_bytes;
};

// A block's rows as float32: K of KV head h of row r at k[r] + h * stride[r], V likewise (elements).
// With dim_stride > 0 the keys are dim-major instead: element e of row r's key at k[0] + h *
// stride[0] + e * dim_stride + r, for a full block of 8 rows.
struct FloatRows {
  const float* k[8];
  const float* v[8];
  std::size_t stride[8];
  std::size_t dim_stride = 0;
};

// Adds rows.k/v[0..n) (n <= 8) to `state`, logits columns state.row.. (and advances state.row).
using AddBlock = void (*)(AttentionState& state, const FloatRows& rows, std::uint32_t n) noexcept;
// values[i] = exp(values[i] − lse) for n values, by the same polynomial.
using ToProbs = void (*)(float* values, std::size_t n, float lse) noexcept;

struct AttentionLoops {
  AddBlock add_block;
  ToProbs to_probs;
};

const AttentionLoops& baseline_attention_loops() noexcept;
const AttentionLoops* avx2_attention_loops() noexcept;  // nullptr without AVX2 (CPU or build)
// The widest of them this CPU runs, chosen once per process.
const AttentionLoops& default_attention_loops() noexcept;

}  // namespace kvtier::kernels::detail
