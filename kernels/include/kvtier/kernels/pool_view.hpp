// PoolView: a client's view of its T1 host pool, the rows an executor copies to and from.
//
// The pool (owned and laid out by shm/, filled in by the client from its PoolGeometry) holds, per
// layer, `slots` fixed-size rows; row (layer, slot) starts at
//   base + layer * layer_stride + slot * row_bytes
// and holds one token of one layer: K of KV heads 0..H-1 (head_dim elements each, the engine's
// dtype), then V of KV heads 0..H-1. So row_bytes = 2 * H * head_dim * dtype_bytes.
//
//   row: | K h0 | K h1 | ... | K h(H-1) | V h0 | V h1 | ... | V h(H-1) |
//
// The view never owns the mapping. Thread-safety: plain value; the functions are pure.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvtier/kernels/kv_layout.hpp"
#include "kvtier/base/error.hpp"

namespace kvtier::kernels {

struct PoolView {
  std::byte* base = nullptr;     // host address of layer 0, slot 0; not owned
  std::size_t row_bytes = 0;     // bytes of one row (and the stride between slots)
  std::size_t layer_stride = 0;  // bytes between layer 0 and layer 1 (>= slots * row_bytes)
  std::uint32_t slots = 0;       // rows per layer
  std::uint32_t num_layers = 0;

  // Precondition: layer < num_layers, slot < slots.
  std::byte* row(std::uint32_t layer, std::uint32_t slot) const noexcept {
    return base + std::size_t{layer} * layer_stride + std::size_t{slot} * row_bytes;
  }
};

// Non-null base, non-zero sizes, layer_stride >= slots * row_bytes.
Status validate(const PoolView& pool);

// Both valid, and the pool's rows hold exactly one token of the layout (row_bytes equal to
// layout.row_bytes()) for every one of its layers.
Status check_compatible(const KvLayout& layout, const PoolView& pool);

}  // namespace kvtier::kernels
