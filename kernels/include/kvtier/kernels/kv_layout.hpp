// KvLayout: where an inference engine keeps its own KV cache (tier T0), described well enough
// that an executor can copy one token's K and V for every layer and KV head without knowing the
// engine.
//
// One descriptor covers the common layouts, per layer, with K and V in separate tensors:
//   HF / contiguous   K[l] = [kv_heads, seq, head_dim]                (make_hf_layout)
//   vLLM paged NHD    K[l] = [blocks, block_size, kv_heads, head_dim] (make_paged_layout)
//   vLLM paged HND    K[l] = [blocks, kv_heads, block_size, head_dim] (make_paged_hnd_layout)
// An "HBM slot" is the engine's token index into that cache; element d of KV head h of the token
// in slot s of layer l lives at
//   k_base[l] + slot_offset(s) + h * head_stride + d * dtype_bytes
//   slot_offset(s) = (s / block_size) * block_stride + (s % block_size) * token_stride
// (a contiguous cache is one block of num_slots tokens). Base pointers are integers so device
// pointers fit; only an executor of the matching backend dereferences them.
//
// Thread-safety: plain values; the free functions are pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "kvtier/base/error.hpp"

namespace kvtier::kernels {

enum class KvDtype : std::uint8_t { kF16 = 0, kBf16 = 1, kF32 = 2 };

constexpr std::size_t dtype_bytes(KvDtype dtype) noexcept {
  switch (dtype) {
    case KvDtype::kF16:
    case KvDtype::kBf16:
      return 2;
    case KvDtype::kF32:
      return 4;
  }
  return 0;  // not a KvDtype: validate() rejects it
}

std::string_view dtype_name(KvDtype dtype) noexcept;

struct KvLayout {
  std::uint32_t num_layers = 0;
  std::uint32_t num_kv_heads = 0;
  std::uint32_t head_dim = 0;
  KvDtype dtype = KvDtype::kF16;
  std::uint32_t num_slots = 0;   // HBM slots addressable per layer: 0 .. num_slots-1
  std::uint32_t block_size = 0;  // tokens per block (contiguous caches: num_slots)
  std::size_t token_stride = 0;  // bytes between consecutive slots inside a block
  std::size_t head_stride = 0;   // bytes between KV heads of one token
  std::size_t block_stride = 0;  // bytes between blocks (unused when one block holds all slots)
  std::vector<std::uintptr_t> k_base;  // per layer; not owned
  std::vector<std::uintptr_t> v_base;  // per layer; not owned

  // Bytes of one KV head of one token (head_dim elements).
  std::size_t head_bytes() const noexcept { return std::size_t{head_dim} * dtype_bytes(dtype); }
  // Bytes of one token's K (or V) over all KV heads: half of a pool row.
  std::size_t half_row_bytes() const noexcept { return head_bytes() * num_kv_heads; }
  // Bytes of the matching pool row: K then V of all KV heads of one token, one layer.
  std::size_t row_bytes() const noexcept { return 2 * half_row_bytes(); }
  // Byte offset of a slot from the layer's base pointer (precondition: slot < num_slots).
  std::size_t slot_offset(std::uint32_t slot) const noexcept {
    return std::size_t{slot / block_size} * block_stride +
           std::size_t{slot % block_size} * token_stride;
  }
};

// Checks sizes, pointers (non-null, aligned to the element size, and a layer's extent from each
// does not wrap past the end of the address space), that the per-layer pointer lists have
// num_layers entries, that a layer's extent fits 64 bits and that strides keep every (slot,
// head) extent disjoint.
// Returns kInvalidArgument naming the first offending field.
Status validate(const KvLayout& layout);

// The constructors never wrap around: a tensor whose strides do not fit 64 bits, or a paged one
// of more than 2^32 - 1 slots (num_slots is then 0), gives a layout validate() refuses.

// HF-style per-layer tensors [kv_heads, num_slots, head_dim], densely packed.
KvLayout make_hf_layout(std::uint32_t num_layers, std::uint32_t num_kv_heads,
                        std::uint32_t head_dim, KvDtype dtype, std::uint32_t num_slots,
                        std::vector<std::uintptr_t> k_base, std::vector<std::uintptr_t> v_base);

// vLLM-style paged per-layer tensors [num_blocks, block_size, kv_heads, head_dim] ("NHD").
KvLayout make_paged_layout(std::uint32_t num_layers, std::uint32_t num_kv_heads,
                           std::uint32_t head_dim, KvDtype dtype, std::uint32_t num_blocks,
                           std::uint32_t block_size, std::vector<std::uintptr_t> k_base,
                           std::vector<std::uintptr_t> v_base);

// vLLM-style paged per-layer tensors [num_blocks, kv_heads, block_size, head_dim] ("HND").
KvLayout make_paged_hnd_layout(std::uint32_t num_layers, std::uint32_t num_kv_heads,
                               std::uint32_t head_dim, KvDtype dtype, std::uint32_t num_blocks,
                               std::uint32_t block_size, std::vector<std::uintptr_t> k_base,
                               std::vector<std::uintptr_t> v_base);

// Bytes one layer's K (or V) tensor spans: the extent of the highest slot and head plus one
// head. Lets callers size buffers and bounds-check pointers. SIZE_MAX when it does not fit 64
// bits (validate() refuses such a layout, so after it the value is exact).
std::size_t layer_extent_bytes(const KvLayout& layout) noexcept;

}  // namespace kvtier::kernels
