// The checks every executor makes before an int8 (T2) operation (executor.hpp): an int8 pool
// that fits the layout, mixed staging lists and T2 -> T0 restore lists.
#include <algorithm>
#include <string>

#include "kvtier/kernels/copy_plan.hpp"
#include "kvtier/kernels/executor.hpp"

namespace kvtier::kernels {
namespace {

Status invalid(const std::string& message) { return make_error(Errc::kInvalidArgument, message); }

std::string num(std::size_t value) { return std::to_string(value); }

}  // namespace

Status check_compatible(const KvLayout& layout, const Int8PoolDesc& int8) {
  const Int8Geometry& g = int8.geometry;
  if (auto s = validate(g); !s) return s;
  if (g.num_kv_heads != layout.num_kv_heads || g.head_dim != layout.head_dim ||
      g.dtype != layout.dtype || int8.num_layers != layout.num_layers) {
    return invalid("int8 pool: " + num(int8.num_layers) + " layers x " + num(g.num_kv_heads) +
                   " KV heads x " + num(g.head_dim) + " " + std::string(dtype_name(g.dtype)) +
                   " does not match the layout (" + num(layout.num_layers) + " x " +
                   num(layout.num_kv_heads) + " x " + num(layout.head_dim) + " " +
                   std::string(dtype_name(layout.dtype)) + ")");
  }
  if (int8.base == nullptr || reinterpret_cast<std::uintptr_t>(int8.base) % 16 != 0) {
    return invalid("int8 pool: base must be non-null and 16-byte aligned");
  }
  if (int8.blocks == 0 || std::uint64_t{int8.blocks} * g.group_tokens >= (std::uint64_t{1} << 31)) {
    return invalid("int8 pool: blocks must be >= 1 with fewer than 2^31 slots");
  }
  if (int8.layer_stride < std::size_t{int8.blocks} * g.block_bytes() || int8.layer_stride % 16 != 0) {
    return invalid("int8 pool: layer_stride " + num(int8.layer_stride) +
                   " must be a multiple of 16 and hold " + num(int8.blocks) + " blocks of " +
                   num(g.block_bytes()) + " bytes");
  }
  return {};
}

Status validate_mixed_staging(const PoolView& pool, const Int8PoolDesc& int8, std::uint32_t layer,
                              std::span<const std::uint32_t> slots,
                              std::span<const std::uint8_t> from_int8,
                              std::span<const std::uint32_t> positions, StagingOrder order,
                              const StagingBuffer& buffer) {
  if (from_int8.size() != slots.size()) {
    return invalid("prefetch: " + num(from_int8.size()) + " pool flags for " + num(slots.size()) +
                   " slots");
  }
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const bool t2 = from_int8[i] != 0;
    const std::uint32_t limit = t2 ? int8.slots() : pool.slots;
    if (slots[i] >= limit) {
      return invalid("prefetch: slot " + num(i) + " is " + (t2 ? "int8" : "pool") + " slot " +
                     num(slots[i]) + " >= " + num(limit));
    }
  }
  // Every slot is in range of its own pool: validate_staging checks the rest.
  PoolView either = pool;
  either.slots = std::max(pool.slots, int8.slots());
  return validate_staging(either, layer, slots, positions, order, buffer);
}

Status validate_int8_restores(const KvLayout& layout, const Int8PoolDesc& int8,
                              std::span<const RowCopy> copies) {
  // Restores from a pool of int8.slots() rows: validate_copies checks ranges and destinations.
  PoolView int8_rows{};
  int8_rows.slots = int8.slots();
  return validate_copies(layout, int8_rows, Direction::kRestore, copies);
}

}  // namespace kvtier::kernels
