// Geometry of a client's int8 (T2) pool: per layer, `blocks` blocks, each holding up to
// `group_tokens` tokens quantized together. The block format (sizes and offsets inside a block)
// is int8_block.hpp, the one definition the quantizer also uses. Slot s is row s % G of block
// s / G, in every layer.
//
//   rows_base
//   v
//   [layer 0: block 0 | block 1 | ... | block B-1][layer 1: block 0 | ...] ... [layer L-1: ...]
//    <-block_bytes->                               ^ layer_stride = B * block_bytes
//
// Thread-safety: plain value.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kvtier/base/error.hpp"
#include "kvtier/shm/int8_block.hpp"

namespace kvtier::shm {

struct Int8PoolGeometry {
  std::uint32_t num_layers;
  std::uint32_t num_kv_heads;
  std::uint32_t head_dim;
  std::uint32_t group_tokens;  // G: rows per block
  std::uint32_t blocks;        // per layer

  constexpr Int8BlockShape block_shape() const noexcept { return {num_kv_heads, head_dim, group_tokens}; }
  constexpr std::uint64_t block_bytes() const noexcept { return block_shape().block_bytes(); }
  constexpr std::uint32_t slots() const noexcept { return blocks * group_tokens; }
  constexpr std::uint64_t layer_stride() const noexcept { return std::uint64_t{blocks} * block_bytes(); }
  constexpr std::uint64_t total_bytes() const noexcept { return layer_stride() * num_layers; }
  // Offset of (layer, block) from the start of the rows region.
  constexpr std::uint64_t block_offset(std::uint32_t layer, std::uint32_t block) const noexcept {
    return layer * layer_stride() + std::uint64_t{block} * block_bytes();
  }
  friend constexpr bool operator==(const Int8PoolGeometry&, const Int8PoolGeometry&) = default;
};

static_assert(std::is_standard_layout_v<Int8PoolGeometry> && std::is_trivially_copyable_v<Int8PoolGeometry>);
static_assert(sizeof(Int8PoolGeometry) == 20 && alignof(Int8PoolGeometry) == 4);

// Checks num_layers, num_kv_heads, head_dim against the native pool's limits (pool_geometry.hpp),
// group_tokens in [1, kMaxInt8GroupTokens], blocks >= 1 with blocks * group_tokens < 2^30, and
// total_bytes() <= kMaxPoolBytes. kInvalidArgument naming the field otherwise.
Result<Int8PoolGeometry> make_int8_pool_geometry(std::uint32_t num_layers, std::uint32_t num_kv_heads,
                                                 std::uint32_t head_dim, std::uint32_t group_tokens,
                                                 std::uint32_t blocks);

}  // namespace kvtier::shm
