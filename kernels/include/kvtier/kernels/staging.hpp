// Staging: one layer's T1 rows gathered next to the engine right before that layer's attention.
//
// A StagingBuffer is caller-owned memory (host memory for the CPU backend, device memory for
// CUDA) plus host-side metadata that prefetch fills in. After prefetch stages n rows:
//
//   data: | K rows [n, kv_heads, head_dim] | V rows [n, kv_heads, head_dim] |
//           ^ k()                            ^ v() = data + n * half_row_bytes
//
// Staged row i is pool row pool_slots[i]; positions[i] is its absolute token position when the
// caller supplied positions. Attention merges staged rows with its T0 rows by position:
//  - StagingOrder::kPositionOrder: the caller lists the slots sorted by strictly ascending
//    absolute position and passes those positions (checked). An engine that also walks its T0
//    rows by ascending position can then merge both lists in one pass and sum over keys in
//    exactly the order a full cache would: outputs are bit-identical to the untiered engine.
//  - StagingOrder::kCompact: rows are staged in the order given (positions optional, any order);
//    attention visits T0 first, then the staged rows, so results equal the full cache only
//    within floating-point tolerance. Cheaper to plan; an executor keeps the given order.
// Bytes needed for n rows: n * pool row_bytes (staging_bytes).
//
// Thread-safety: a StagingBuffer is used by one thread; on an asynchronous backend its contents
// are valid only after CopyExecutor::wait(layer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "kvtier/kernels/pool_view.hpp"
#include "kvtier/base/error.hpp"

namespace kvtier::kernels {

enum class StagingOrder : std::uint8_t { kCompact = 0, kPositionOrder = 1 };

struct StagingBuffer {
  // Set by the caller. Not owned; alignment of at least the KV element size.
  std::uintptr_t data = 0;
  std::size_t capacity_bytes = 0;

  // Set by prefetch.
  std::uint32_t layer = 0;
  std::uint32_t rows = 0;
  std::size_t half_row_bytes = 0;  // kv_heads * head_dim * dtype_bytes
  StagingOrder order = StagingOrder::kCompact;
  std::vector<std::uint32_t> positions;  // one per staged row, or empty (compact, none given)

  std::uintptr_t k() const noexcept { return data; }
  std::uintptr_t v() const noexcept { return data + std::size_t{rows} * half_row_bytes; }

  // What a prefetch fills in once it issued the copies.
  void describe(std::uint32_t staged_layer, std::size_t staged_rows, std::size_t half, StagingOrder staged_order,
                std::span<const std::uint32_t> staged_positions) {
    layer = staged_layer;
    rows = static_cast<std::uint32_t>(staged_rows);
    half_row_bytes = half;
    order = staged_order;
    positions.assign(staged_positions.begin(), staged_positions.end());
  }
};

constexpr std::size_t staging_bytes(const PoolView& pool, std::size_t rows) noexcept {
  return rows * pool.row_bytes;
}

// Where CopyExecutor::stage_at writes: one layer's keys and values as the engine's attention
// reads them, indexed by position (e.g. HF's [kv_heads, length, head_dim] K and V of one batch
// row). KV head h of the row of absolute position p starts at
//   k + (p + row_offset) * token_stride + h * head_stride        (V likewise from v)
// and holds head_dim elements of the layout's dtype. Not owned.
struct PositionTarget {
  std::uintptr_t k = 0, v = 0;
  std::size_t rows = 0;  // destination rows: every p + row_offset is below
  std::size_t token_stride = 0, head_stride = 0;  // bytes
  std::size_t row_offset = 0;
};

// Checks one layer's list of host rows: layer < pool.num_layers; from_int8 empty or one flag per
// slot; each slot below the slots of its pool (`int8_slots` for flagged rows). kInvalidArgument,
// the message prefixed by `op`, naming the first bad entry.
Status validate_host_rows(std::string_view op, const PoolView& pool, std::uint32_t int8_slots, std::uint32_t layer,
                          std::span<const std::uint32_t> slots, std::span<const std::uint8_t> from_int8);

// Checks a stage_at request: validate_host_rows; one position per slot; each position +
// row_offset below target.rows; non-null k and v when there are rows.
// kInvalidArgument naming the first bad entry.
Status validate_position_target(const PoolView& pool, std::uint32_t int8_slots, std::uint32_t layer,
                                std::span<const std::uint32_t> slots, std::span<const std::uint8_t> from_int8,
                                std::span<const std::uint32_t> positions, const PositionTarget& target);

// Checks a prefetch request against the pool and the buffer: layer < num_layers, every slot
// < pool.slots, positions empty or one per slot (required and strictly ascending for
// kPositionOrder), buffer non-null with room for all rows. kInvalidArgument on failure.
Status validate_staging(const PoolView& pool, std::uint32_t layer,
                        std::span<const std::uint32_t> pool_slots,
                        std::span<const std::uint32_t> positions, StagingOrder order,
                        const StagingBuffer& buffer);

}  // namespace kvtier::kernels
