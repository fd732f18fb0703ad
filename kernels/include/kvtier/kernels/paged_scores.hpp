// Block scores over a paged KV cache, for engines whose attention kernel returns no
// probabilities (vLLM's CPU backend): the per-block importance kvtierd ranks, computed from the
// queries and the keys in place, without gathering the keys or a softmax per row in Python.
//
// For each row r (a request of the batch) with n = seq_lens[r] keys in the blocks
// block_table[r, 0..] and the q = query_start[r+1] − query_start[r] queries of
// query[query_start[r] ..), query j sitting at position n − q + j and seeing the keys up to it:
//   p(j, h, t) = softmax_t(scale · query[j, h] · key(t))  over the keys it sees (query head h
//                uses kv head h / (q_heads / kv_heads))
//   out[r, u]  = Σ_j Σ_h Σ_{t in block u} p(j, h, t) / q_heads     for u < n / block_size
//   out[r, u]  = 0                                                for the other u < out_stride
// The keys of the last, partial block take part in the softmax but get no score (a partial
// block is not tiered). Summation order: per query vector the keys in position order, so a call
// is deterministic; it is not the order PyTorch's softmax uses (the scores are a ranking input,
// not an output of the model).
//
// Thread-safety: reentrant; concurrent calls write disjoint outputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kvtier/base/error.hpp"

namespace kvtier::kernels {

enum class KeyType : std::uint8_t { kF32, kBF16, kF16 };

// The keys: element i of key(b, h, t) (block b, kv head h, token t of the block), of `type`, at
// base + (b · block_stride + h · head_stride + t · token_stride + i · dim_stride) elements. vLLM's
// CPU backend ("vec" ISA) stores a block's keys dim-major: token_stride 1, dim_stride block_size.
struct PagedKeys {
  const void* base = nullptr;
  KeyType type = KeyType::kF32;
  std::uint32_t num_blocks = 0, kv_heads = 0, block_size = 0, head_dim = 0;
  std::size_t block_stride = 0, head_stride = 0, token_stride = 0;  // in elements
  std::size_t dim_stride = 1;                                       // in elements, >= 1
};

struct ScoreBatch {
  const float* query = nullptr;  // [tokens, q_heads, head_dim], contiguous
  std::uint32_t tokens = 0, q_heads = 0;
  std::span<const std::int32_t> block_table;  // [rows, table_stride]
  std::uint32_t table_stride = 0;
  std::span<const std::int32_t> seq_lens;     // [rows]
  std::span<const std::int32_t> query_start;  // [rows + 1], non-decreasing, last ≤ tokens
  float scale = 1.0f;
};

// Writes out[r · out_stride + u] as above. kInvalidArgument (nothing written) when the shapes
// disagree, a row needs a block id outside [0, num_blocks) or more blocks than table_stride, a
// row has more queries than keys, or out_stride < table_stride.
Status paged_block_scores(const PagedKeys& keys, const ScoreBatch& batch, std::span<float> out,
                          std::uint32_t out_stride);

}  // namespace kvtier::kernels
