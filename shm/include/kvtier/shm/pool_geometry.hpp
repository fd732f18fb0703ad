// Geometry of a host KV pool: per layer, `slots` fixed-size rows, one row = one token's K and V
// for all KV heads of that layer. Pure arithmetic; the pool segment itself is in pool_segment.hpp.
//
// Row (layer, slot) lives at rows_base + row_offset(layer, slot):
//
//   rows_base
//   v
//   [layer 0: slot 0 | slot 1 | ... | slot S-1][layer 1: slot 0 | ...] ... [layer L-1: ...]
//    <-row_bytes->                              ^ layer_stride = S * row_bytes
//
// A row holds K then V, each [num_kv_heads][head_dim] elements of dtype_bytes.
// Thread-safety: plain value. Values obtained from make_pool_geometry() never overflow.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kvtier/base/check.hpp"
#include "kvtier/base/error.hpp"

namespace kvtier::shm {

// Limits make_pool_geometry enforces (beyond "non-zero"): anything larger is a caller bug.
inline constexpr std::uint32_t kMaxPoolLayers = 1024;
inline constexpr std::uint32_t kMaxPoolKvHeads = 1024;
inline constexpr std::uint32_t kMaxPoolHeadDim = 16384;
inline constexpr std::uint32_t kMaxPoolDtypeBytes = 8;
inline constexpr std::uint32_t kMaxPoolSlots = 1u << 30;
inline constexpr std::uint64_t kMaxPoolBytes = std::uint64_t{1} << 40;  // 1 TiB

struct PoolGeometry {
  std::uint32_t num_layers;
  std::uint32_t num_kv_heads;
  std::uint32_t head_dim;
  std::uint32_t dtype_bytes;
  std::uint32_t slots;  // rows per layer

  constexpr std::uint64_t row_bytes() const noexcept {
    return std::uint64_t{2} * num_kv_heads * head_dim * dtype_bytes;
  }
  constexpr std::uint64_t layer_stride() const noexcept { return std::uint64_t{slots} * row_bytes(); }
  constexpr std::uint64_t total_bytes() const noexcept { return layer_stride() * num_layers; }
  // Offset of row (layer, slot) from the start of the rows region.
  // Precondition: layer < num_layers, slot < slots.
  constexpr std::uint64_t row_offset(std::uint32_t layer, std::uint32_t slot) const noexcept {
    KVTIER_CHECK(layer < num_layers && slot < slots, "row_offset() beyond the geometry");
    return layer * layer_stride() + std::uint64_t{slot} * row_bytes();
  }
  friend constexpr bool operator==(const PoolGeometry&, const PoolGeometry&) = default;
};

static_assert(std::is_standard_layout_v<PoolGeometry> && std::is_trivially_copyable_v<PoolGeometry>);
static_assert(sizeof(PoolGeometry) == 20 && alignof(PoolGeometry) == 4);

// Checks every field against the limits above and every product against overflow and
// kMaxPoolBytes. Errors: kInvalidArgument naming the offending field and its value.
Result<PoolGeometry> make_pool_geometry(std::uint32_t num_layers, std::uint32_t num_kv_heads,
                                        std::uint32_t head_dim, std::uint32_t dtype_bytes,
                                        std::uint32_t slots);

}  // namespace kvtier::shm
