// Validation of prefetch, stage_at and attend requests, shared by every executor backend.
#include "kvtier/kernels/staging.hpp"

#include <string>
#include <string_view>
#include <utility>

namespace kvtier::kernels {
namespace {

Status invalid(std::string message) {
  return make_error(Errc::kInvalidArgument, "prefetch: " + std::move(message));
}

std::string num(std::size_t value) { return std::to_string(value); }

}  // namespace

Status validate_host_rows(std::string_view op, const PoolView& pool, std::uint32_t int8_slots, std::uint32_t layer,
                          std::span<const std::uint32_t> slots, std::span<const std::uint8_t> from_int8) {
  const auto bad = [op](std::string message) {
    return make_error(Errc::kInvalidArgument, std::string(op) + ": " + std::move(message));
  };
  if (layer >= pool.num_layers) return bad("layer " + num(layer) + " >= num_layers " + num(pool.num_layers));
  if (!from_int8.empty() && from_int8.size() != slots.size()) {
    return bad(num(from_int8.size()) + " int8 flags for " + num(slots.size()) + " slots");
  }
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const bool int8 = !from_int8.empty() && from_int8[i] != 0;
    const std::uint32_t limit = int8 ? int8_slots : pool.slots;
    if (slots[i] >= limit) {
      return bad("slot " + num(i) + " is " + (int8 ? "int8" : "pool") + " slot " + num(slots[i]) + " >= " + num(limit));
    }
  }
  return {};
}

Status validate_position_target(const PoolView& pool, std::uint32_t int8_slots, std::uint32_t layer,
                                std::span<const std::uint32_t> slots, std::span<const std::uint8_t> from_int8,
                                std::span<const std::uint32_t> positions, const PositionTarget& target) {
  const auto bad = [](std::string message) {
    return make_error(Errc::kInvalidArgument, "stage_at: " + std::move(message));
  };
  if (auto ok = validate_host_rows("stage_at", pool, int8_slots, layer, slots, from_int8); !ok) return ok;
  if (positions.size() != slots.size()) return bad(num(positions.size()) + " positions for " + num(slots.size()) + " slots");
  for (const std::uint32_t position : positions) {
    if (std::size_t{position} + target.row_offset >= target.rows) {
      return bad("position " + num(position) + " + offset " + num(target.row_offset) + " is outside the " +
                 num(target.rows) + " destination rows");
    }
  }
  if (!slots.empty() && (target.k == 0 || target.v == 0)) return bad("the destination is null");
  return {};
}

Status validate_staging(const PoolView& pool, std::uint32_t layer,
                        std::span<const std::uint32_t> pool_slots,
                        std::span<const std::uint32_t> positions, StagingOrder order,
                        const StagingBuffer& buffer) {
  if (layer >= pool.num_layers) {
    return invalid("layer " + num(layer) + " >= num_layers " + num(pool.num_layers));
  }
  for (std::size_t i = 0; i < pool_slots.size(); ++i) {
    if (pool_slots[i] >= pool.slots) {
      return invalid("slot " + num(i) + " is pool slot " + num(pool_slots[i]) + " >= pool slots " +
                     num(pool.slots));
    }
  }
  if (!positions.empty() && positions.size() != pool_slots.size()) {
    return invalid(num(positions.size()) + " positions for " + num(pool_slots.size()) + " slots");
  }
  if (order == StagingOrder::kPositionOrder) {
    if (positions.size() != pool_slots.size()) {
      return invalid("position order needs one position per slot");
    }
    for (std::size_t i = 1; i < positions.size(); ++i) {
      if (positions[i] <= positions[i - 1]) {
        return invalid("position order needs strictly ascending positions; position " + num(i) +
                       " is " + num(positions[i]) + " after " + num(positions[i - 1]));
      }
    }
  }
  if (pool_slots.empty()) return {};
  if (buffer.data == 0) return invalid("staging buffer is null");
  const std::size_t need = staging_bytes(pool, pool_slots.size());
  if (buffer.capacity_bytes < need) {
    return invalid("staging buffer holds " + num(buffer.capacity_bytes) + " bytes, " +
                   num(pool_slots.size()) + " rows need " + num(need));
  }
  return {};
}

}  // namespace kvtier::kernels
