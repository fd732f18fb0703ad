// PartialAttention: one decode query's attention over KV rows in host memory (T1 rows, or T2
// rows dequantized), as the partial result an engine merges with its own attention over its
// other keys by log-sum-exp: the T1 rows are attended where they live instead of being staged
// (DESIGN §6). For query head h, whose KV head is h / (q_heads / kv_heads), and the rows i added,
// with logits s_i = scale · q_h · k_i:
//   lse_h = ln Σ_i exp(s_i)          out_h = Σ_i exp(s_i − lse_h) · v_i
// computed in float32 in one pass over the rows (online softmax: a running max, sum and
// accumulator per query head, updated once per block of 8 rows; e^x by a polynomial within 2 ulp),
// rows in the order added. Merging with part A of the same head
// (exact up to rounding; the engine does it):
//   lse = ln(exp(lse_A) + exp(lse_B))     out = exp(lse_A − lse) · out_A + exp(lse_B − lse) · out_B
// With no rows lse is −inf and out 0, so the merge returns part A.
// Deterministic: the same rows in the same order give the same bits (a fixed summation order,
// no fused multiply-add).
//
// Thread-safety: an accumulator is used by one thread; it does not own the query or outputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvtier/kernels/kv_layout.hpp"
#include "kvtier/protocol/error.hpp"

namespace kvtier::kernels {

// The query of one token: q_heads rows of head_dim float32, head h at q + h * head_dim.
struct HostQuery {
  const float* q = nullptr;
  std::uint32_t q_heads = 0;   // a multiple of the KV heads
  std::uint32_t head_dim = 0;  // the layout's (a caller states it, so a mismatch is refused)
  float scale = 0.0f;          // usually head_dim^-1/2
};

// Where the partial result goes. Not owned.
struct HostPartial {
  float* out = nullptr;      // [q_heads, head_dim]
  float* lse = nullptr;      // [q_heads], natural logarithm
  // Optional [q_heads, probs_stride]: exp(s_i − lse_h), row i's weight within this part, at
  // h * probs_stride + i (its weight in the merged attention: times exp(lse_h − lse)).
  float* probs = nullptr;
  std::size_t probs_stride = 0;  // >= the rows, when probs is set
};

// Checks a request over `rows` rows of `layout`'s geometry: q, out and lse non-null, q_heads a
// non-zero multiple of num_kv_heads, head_dim the layout's, a finite scale, probs_stride >= rows when probs is set.
// kInvalidArgument naming the field.
Status validate_host_attention(const KvLayout& layout, const HostQuery& query, const HostPartial& out,
                               std::size_t rows);

class PartialAttention {
 public:
  // Precondition: validate_host_attention passed for the same arguments.
  PartialAttention(const KvLayout& layout, const HostQuery& query, const HostPartial& out);

  // Rows, each K of every KV head then V (layout.row_bytes() bytes of layout.dtype, as a pool
  // row), read during the call only, in blocks of 8 from its first row (the bits depend on how rows
  // are split into calls). Their probs columns follow those of the rows added before.
  void add(std::span<const std::byte* const> rows) noexcept;
  // Writes out, lse and probs for the rows added so far.
  void finish() const noexcept;

 private:
  KvDtype dtype_;
  std::uint32_t kv_heads_, head_dim_, group_;
  HostQuery query_;
  HostPartial out_;
  std::size_t rows_ = 0;
  static constexpr std::size_t kBlockRows = 8;
  std::vector<float> row_;  // a block's rows as float32 (K then V), when the dtype is not f32
  std::vector<float> max_, sum_, acc_;  // per query head; acc_ [q_heads, head_dim]
};

}  // namespace kvtier::kernels
