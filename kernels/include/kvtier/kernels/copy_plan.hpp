// Copy-plan semantics: which tokens move between the engine's cache (T0) and the T1 pool.
//
// A plan step is a list of RowCopy, each naming one token by its HBM slot (see KvLayout) and its
// pool slot (see PoolView). A copy always moves the token's K and V for every layer and KV head
// (v1 moves whole tokens). Offload reads T0 and writes pool rows; restore reads pool rows and
// writes T0. Within one list destinations are distinct, so the order of copies never matters.
//
// Thread-safety: plain values; validate_copies is pure.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "kvtier/kernels/kv_layout.hpp"
#include "kvtier/kernels/pool_view.hpp"
#include "kvtier/base/error.hpp"

namespace kvtier::kernels {

struct RowCopy {
  std::uint32_t hbm_slot = 0;
  std::uint32_t pool_slot = 0;

  friend bool operator==(const RowCopy&, const RowCopy&) = default;
};

enum class Direction : std::uint8_t {
  kOffload = 0,  // engine cache (T0) -> pool row (T1)
  kRestore = 1,  // pool row (T1) -> engine cache (T0)
};

std::string_view direction_name(Direction direction) noexcept;

// Every hbm_slot < layout.num_slots, every pool_slot < pool.slots, and the destination slots
// (pool slots for kOffload, HBM slots for kRestore) pairwise distinct. kInvalidArgument names
// the first bad entry. Does not validate layout or pool themselves (see check_compatible).
Status validate_copies(const KvLayout& layout, const PoolView& pool, Direction direction,
                       std::span<const RowCopy> copies);

}  // namespace kvtier::kernels
