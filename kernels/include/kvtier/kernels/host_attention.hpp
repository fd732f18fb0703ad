// attend_rows: one decode query's attention over KV rows in host memory, computed on the CPU
// where the rows live instead of copying them anywhere (DESIGN §6): an engine's T0 rows in its
// own cache and a sequence's T1 rows in the pool (T2 rows dequantized), in one softmax. For query
// head h, whose KV head is h / (q_heads / kv_heads), and rows i with logits s_i = scale · q_h · k_i:
//   lse_h = ln Σ_i exp(s_i)      p_hi = exp(s_i − lse_h)      out_h = Σ_i p_hi · v_i
// With only some of the keys given, (out, lse) is a partial result that merges exactly (up to
// rounding) with an engine's attention over the others (part A):
//   lse = ln(exp(lse_A) + exp(lse_B))     out = exp(lse_A − lse) · out_A + exp(lse_B − lse) · out_B
// With no rows lse is −inf and out 0, so the merge returns part A.
//
// How: float32; rows cut into chunks of kAttendChunkRows, each chunk one online softmax (a running
// max, sum and accumulator per query head, updated once per block of 8 rows; e^x by a polynomial
// within one ulp); chunks run on a few threads and merge in chunk order. Deterministic: the same
// rows in the same order give the same bits whatever the number of threads or the instruction
// set (a fixed summation order, no fused multiply-add).
//
// Thread-safety: concurrent calls must not share outputs; calls from several threads are served
// one at a time by the worker threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kvtier/kernels/kv_layout.hpp"
#include "kvtier/base/error.hpp"

namespace kvtier::kernels {

inline constexpr std::size_t kAttendChunkRows = 64;

// The query of one token: q_heads rows of head_dim float32, head h at q + h * head_dim.
struct HostQuery {
  const float* q = nullptr;
  std::uint32_t q_heads = 0;   // a multiple of the KV heads
  // A token's: the layout's, or a divisor of it when a layout row holds layout.head_dim / head_dim
  // tokens back to back per head (an engine whose cache slot is a block of tokens, as vLLM's).
  std::uint32_t head_dim = 0;
  float scale = 0.0f;  // usually head_dim^-1/2
  // Keys stored dim-major within a layout row (vLLM's CPU "vec" backend): element e of token t of
  // a head's row at e · n + t (n = layout.head_dim / head_dim tokens per row); values stay
  // token-major. A row's k then names its token's element 0, and element e is n elements on.
  bool keys_dim_major = false;
};

// One row (one token): KV head h of its key at k + h * head_stride, of its value at v + h *
// head_stride (query.head_dim elements of the layout's dtype each). A pool row: v = k + half a row, head_stride
// = head bytes; an HF cache slot: k_base + slot offset, the cache's head stride.
struct AttendRow {
  const std::byte* k = nullptr;
  const std::byte* v = nullptr;
  std::size_t head_stride = 0;
};

// Where the results go (float32, not owned).
struct AttendOutput {
  float* out = nullptr;  // [q_heads, head_dim]
  float* lse = nullptr;  // [q_heads], natural logarithm
  // Optional [q_heads, probs_stride]: p_hi at h * probs_stride + i.
  float* probs = nullptr;
  std::size_t probs_stride = 0;
  // Optional [rows]: scores[i] += Σ_h p_hi (h ascending), e.g. summed over a step's layers.
  float* scores = nullptr;
  std::size_t scores_count = 0;  // entries of scores: the rows, when scores is set
};

// Tokens a layout row holds per head for `query`: layout.head_dim / query.head_dim, or 0 when
// query.head_dim does not divide it (validate_host_attention refuses that).
inline std::size_t tokens_per_row(const KvLayout& layout, const HostQuery& query) noexcept {
  return query.head_dim != 0 && layout.head_dim % query.head_dim == 0 ? layout.head_dim / query.head_dim : 0;
}

// Checks a request over `rows` rows of `layout`'s geometry: q, out and lse non-null, q_heads a
// non-zero multiple of num_kv_heads, head_dim dividing the layout's, a finite scale, probs_stride >= rows
// when probs is set, scores_count == rows when scores is set. kInvalidArgument naming the field.
Status validate_host_attention(const KvLayout& layout, const HostQuery& query, const AttendOutput& out,
                               std::size_t rows);

// Precondition: validate_host_attention passed; every row readable as described.
void attend_rows(const KvLayout& layout, const HostQuery& query, std::span<const AttendRow> rows,
                 const AttendOutput& out);

}  // namespace kvtier::kernels
