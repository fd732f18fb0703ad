// CPU reference executor: per row and KV head one (K or V) segment, merged into runs.
#include "cpu/cpu_executor.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "kvtier/kernels/gather.hpp"

namespace kvtier::kernels {
namespace {

// Accumulates (dst, src, len) segments; a segment that continues the pending run on both sides
// extends it, anything else flushes the run with one memcpy. E.g. the K heads of one token in a
// heads-inside-token (vLLM NHD) cache become one memcpy per token and direction.
class RunCopier {
 public:
  RunCopier() = default;
  RunCopier(const RunCopier&) = delete;
  RunCopier& operator=(const RunCopier&) = delete;
  ~RunCopier() { flush(); }

  void add(std::byte* dst, const std::byte* src, std::size_t len) noexcept {
    if (len_ != 0 && dst == dst_ + len_ && src == src_ + len_) {
      len_ += len;
      return;
    }
    flush();
    dst_ = dst;
    src_ = src;
    len_ = len;
  }

  void flush() noexcept {
    if (len_ != 0) std::memcpy(dst_, src_, len_);
    len_ = 0;
  }

 private:
  std::byte* dst_ = nullptr;
  const std::byte* src_ = nullptr;
  std::size_t len_ = 0;
};

std::byte* host_ptr(std::uintptr_t address) noexcept {
  return reinterpret_cast<std::byte*>(address);
}

// Int8 slot `slot` of one layer, dequantized into `out` (row_bytes). Cannot fail for a slot
// that validate_mixed_staging / validate_int8_restores accepted.
Status dequantize_slot(const Int8PoolDesc& int8, std::uint32_t layer, std::uint32_t slot,
                       std::byte* out) {
  const std::uint32_t group = int8.geometry.group_tokens;
  const std::uint32_t which = slot % group;
  const std::span<const std::byte> block(int8.block(layer, slot / group),
                                         int8.geometry.block_bytes());
  return dequantize_block(int8.geometry, block, {&which, 1}, {&out, 1});
}

}  // namespace

Status CpuExecutor::can_implement(const KvLayout& layout, const PoolView& pool) const {
  // Host memory is all the CPU backend can reach; it cannot tell device pointers apart, so the
  // caller guarantees the layout's pointers are host addresses.
  return check_compatible(layout, pool);
}

Status CpuExecutor::initialize(const KvLayout& layout, const PoolView& pool) {
  if (auto s = can_implement(layout, pool); !s) return s;
  layout_ = layout;
  pool_ = pool;
  int8_.reset();
  initialized_ = true;
  return {};
}

Status CpuExecutor::bind_int8(const Int8PoolDesc& int8) {
  if (auto s = require_initialized(); !s) return s;
  int8_.reset();
  if (auto s = check_compatible(layout_, int8); !s) return s;
  int8_ = int8;
  return {};
}

Status CpuExecutor::require_int8() const {
  if (auto s = require_initialized(); !s) return s;
  if (!int8_) return make_error(Errc::kBadState, "cpu executor: no int8 pool bound");
  return {};
}

Status CpuExecutor::require_initialized() const {
  if (!initialized_) return make_error(Errc::kBadState, "cpu executor: not initialized");
  return {};
}

Status CpuExecutor::copy_layers(Direction direction, std::span<const RowCopy> copies,
                                std::uint32_t first_layer, std::uint32_t count) {
  if (auto s = require_initialized(); !s) return s;
  if (first_layer >= layout_.num_layers) {
    return make_error(Errc::kInvalidArgument, std::string(direction_name(direction)) +
                                                  ": first layer " + std::to_string(first_layer) +
                                                  " >= num_layers " +
                                                  std::to_string(layout_.num_layers));
  }
  const std::uint32_t available = layout_.num_layers - first_layer;
  if (count != kAllLayers && count > available) {
    return make_error(Errc::kInvalidArgument, std::string(direction_name(direction)) + ": layers " +
                                                  std::to_string(first_layer) + "+" +
                                                  std::to_string(count) + " exceed num_layers " +
                                                  std::to_string(layout_.num_layers));
  }
  if (auto s = validate_copies(layout_, pool_, direction, copies); !s) return s;
  const std::uint32_t end = first_layer + (count == kAllLayers ? available : count);
  for (std::uint32_t layer = first_layer; layer < end; ++layer) {
    copy_layer(direction, pool_, copies, layer);
  }
  return {};
}

void CpuExecutor::copy_layer(Direction direction, const PoolView& pool,
                             std::span<const RowCopy> copies, std::uint32_t layer) const noexcept {
  const std::size_t head_bytes = layout_.head_bytes();
  const std::size_t half = layout_.half_row_bytes();
  std::byte* const k_base = host_ptr(layout_.k_base[layer]);
  std::byte* const v_base = host_ptr(layout_.v_base[layer]);
  const bool offload = direction == Direction::kOffload;
  RunCopier copier;
  for (const RowCopy& copy : copies) {
    std::byte* const row = pool.row(layer, copy.pool_slot);
    const std::size_t slot_offset = layout_.slot_offset(copy.hbm_slot);
    for (int kv = 0; kv < 2; ++kv) {
      std::byte* const base = (kv == 0 ? k_base : v_base) + slot_offset;
      std::byte* const row_half = row + (kv == 0 ? 0 : half);
      for (std::uint32_t h = 0; h < layout_.num_kv_heads; ++h) {
        std::byte* const cache = base + h * layout_.head_stride;
        std::byte* const pooled = row_half + h * head_bytes;
        if (offload) {
          copier.add(pooled, cache, head_bytes);
        } else {
          copier.add(cache, pooled, head_bytes);
        }
      }
    }
  }
  copier.flush();
}

Status CpuExecutor::prefetch(std::uint32_t layer, std::span<const std::uint32_t> pool_slots,
                             std::span<const std::uint32_t> positions, StagingOrder order,
                             StagingBuffer& out) {
  if (auto s = require_initialized(); !s) return s;
  if (auto s = validate_staging(pool_, layer, pool_slots, positions, order, out); !s) return s;
  const std::size_t half = layout_.half_row_bytes();
  const std::size_t rows = pool_slots.size();
  const std::byte* const layer_rows = pool_.row(layer, 0);
  std::byte* const staged = host_ptr(out.data);
  gather_rows(staged, half, layer_rows, pool_.row_bytes, half, pool_slots);
  gather_rows(staged + rows * half, half, layer_rows + half, pool_.row_bytes, half, pool_slots);
  out.describe(layer, rows, half, order, positions);
  return {};
}

Status CpuExecutor::prefetch_mixed(std::uint32_t layer, std::span<const std::uint32_t> slots,
                                   std::span<const std::uint8_t> from_int8,
                                   std::span<const std::uint32_t> positions, StagingOrder order,
                                   StagingBuffer& out) {
  if (auto s = require_int8(); !s) return s;
  if (auto s = validate_mixed_staging(pool_, *int8_, layer, slots, from_int8, positions, order, out);
      !s) {
    return s;
  }
  const std::size_t half = layout_.half_row_bytes();
  const std::size_t rows = slots.size();
  std::byte* const k = host_ptr(out.data);
  std::byte* const v = k + rows * half;
  for (std::size_t i = 0; i < rows; ++i) {
    auto src = host_row(layer, slots[i], from_int8[i] != 0);
    if (!src) return tl::unexpected(src.error());
    std::memcpy(k + i * half, *src, half);
    std::memcpy(v + i * half, *src + half, half);
  }
  out.describe(layer, rows, half, order, positions);
  return {};
}

Status CpuExecutor::stage_at(std::uint32_t layer, std::span<const std::uint32_t> slots,
                             std::span<const std::uint8_t> from_int8, std::span<const std::uint32_t> positions,
                             const PositionTarget& target) {
  if (auto s = require_initialized(); !s) return s;
  const bool any_int8 = std::any_of(from_int8.begin(), from_int8.end(), [](std::uint8_t f) { return f != 0; });
  if (any_int8) {
    if (auto s = require_int8(); !s) return s;
  }
  if (auto s = validate_position_target(pool_, any_int8 ? int8_->slots() : 0, layer, slots, from_int8, positions,
                                        target);
      !s) {
    return s;
  }
  const std::size_t head = layout_.head_bytes();
  const std::size_t half = layout_.half_row_bytes();
  std::byte* const k = host_ptr(target.k);
  std::byte* const v = host_ptr(target.v);
  for (std::size_t i = 0; i < slots.size(); ++i) {
    auto src = host_row(layer, slots[i], !from_int8.empty() && from_int8[i] != 0);
    if (!src) return tl::unexpected(src.error());
    const std::size_t row = (std::size_t{positions[i]} + target.row_offset) * target.token_stride;
    for (std::size_t h = 0; h < layout_.num_kv_heads; ++h) {
      std::memcpy(k + row + h * target.head_stride, *src + h * head, head);
      std::memcpy(v + row + h * target.head_stride, *src + half + h * head, head);
    }
  }
  return {};
}

Status CpuExecutor::attend(std::uint32_t layer, std::span<const std::uint32_t> t0_slots, std::size_t t0_tokens,
                           std::span<const std::uint32_t> slots, std::span<const std::uint8_t> from_int8,
                           const HostQuery& query, const AttendOutput& out) {
  if (auto s = require_initialized(); !s) return s;
  const auto flagged = static_cast<std::size_t>(std::count_if(from_int8.begin(), from_int8.end(),
                                                              [](std::uint8_t f) { return f != 0; }));
  const bool any_int8 = flagged > 0;
  if (any_int8) {
    if (auto s = require_int8(); !s) return s;
  }
  if (auto s = validate_host_rows("attend", pool_, any_int8 ? int8_->slots() : 0, layer, slots, from_int8); !s) {
    return s;
  }
  for (std::size_t i = 0; i < t0_slots.size(); ++i) {
    if (t0_slots[i] >= layout_.num_slots) {
      return make_error(Errc::kInvalidArgument, "attend: t0 slot " + std::to_string(i) + " is " +
                                                    std::to_string(t0_slots[i]) + " >= num_slots " +
                                                    std::to_string(layout_.num_slots));
    }
  }
  // Tokens per row, back to back in each head's row (0 when head_dim does not divide the layout's:
  // validate_host_attention refuses it whatever the count of rows).
  const std::size_t n = std::max<std::size_t>(1, tokens_per_row(layout_, query));
  if (auto s = validate_host_attention(layout_, query, out, t0_tokens + slots.size() * n); !s) return s;
  if (t0_slots.empty() ? t0_tokens != 0 : (t0_tokens > t0_slots.size() * n || t0_tokens <= (t0_slots.size() - 1) * n)) {
    return make_error(Errc::kInvalidArgument, "attend: t0_tokens " + std::to_string(t0_tokens) + " for " +
                                                  std::to_string(t0_slots.size()) + " t0 slots of " +
                                                  std::to_string(n) + " tokens (only the last may hold fewer)");
  }
  // Where every token is: T0 in the engine's cache, T1 in the pool, T2 dequantized into scratch_.
  attend_rows_.clear();
  const auto* k_base = reinterpret_cast<const std::byte*>(layout_.k_base[layer]);
  const auto* v_base = reinterpret_cast<const std::byte*>(layout_.v_base[layer]);
  // A token's key element 0 within its row: token-major, a head_dim further per token; dim-major, an element.
  const std::size_t value = std::size_t{query.head_dim} * dtype_bytes(layout_.dtype);
  const std::size_t token = query.keys_dim_major ? dtype_bytes(layout_.dtype) : value;
  for (std::size_t t = 0; t < t0_tokens; ++t) {
    const std::size_t at = layout_.slot_offset(t0_slots[t / n]);
    attend_rows_.push_back({k_base + at + (t % n) * token, v_base + at + (t % n) * value, layout_.head_stride});
  }
  const std::size_t half = layout_.half_row_bytes(), head = layout_.head_bytes();
  scratch_.resize(flagged * pool_.row_bytes);
  std::byte* dequantized = scratch_.data();
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const std::byte* row = dequantized;
    if (from_int8.empty() || from_int8[i] == 0) {
      row = pool_.row(layer, slots[i]);
    } else {
      if (auto s = dequantize_slot(*int8_, layer, slots[i], dequantized); !s) return s;
      dequantized += pool_.row_bytes;
    }
    for (std::size_t t = 0; t < n; ++t) attend_rows_.push_back({row + t * token, row + half + t * value, head});
  }
  attend_rows(layout_, query, attend_rows_, out);
  return {};
}

Result<const std::byte*> CpuExecutor::host_row(std::uint32_t layer, std::uint32_t slot, bool int8) {
  if (!int8) return pool_.row(layer, slot);
  scratch_.resize(pool_.row_bytes);
  if (auto s = dequantize_slot(*int8_, layer, slot, scratch_.data()); !s) return tl::unexpected(s.error());
  return scratch_.data();
}

Status CpuExecutor::restore_int8(std::span<const RowCopy> copies) {
  if (auto s = require_int8(); !s) return s;
  if (auto s = validate_int8_restores(layout_, *int8_, copies); !s) return s;
  // Scratch row i holds copy i's row of the current layer: a pool whose layer_stride is 0 gives
  // every layer the same rows, so copy_layer restores from it as from T1 rows.
  const auto n = static_cast<std::uint32_t>(copies.size());
  scratch_.resize(std::size_t{n} * pool_.row_bytes);
  const PoolView scratch{scratch_.data(), pool_.row_bytes, 0, n, layout_.num_layers};
  std::vector<RowCopy> rows(n);
  for (std::uint32_t i = 0; i < n; ++i) rows[i] = RowCopy{copies[i].hbm_slot, i};
  for (std::uint32_t layer = 0; layer < layout_.num_layers; ++layer) {
    for (std::uint32_t i = 0; i < n; ++i) {
      if (auto s = dequantize_slot(*int8_, layer, copies[i].pool_slot, scratch.row(layer, i)); !s) {
        return s;
      }
    }
    copy_layer(Direction::kRestore, scratch, rows, layer);
  }
  return {};
}

Status CpuExecutor::wait(std::uint32_t layer) {
  if (auto s = require_initialized(); !s) return s;
  if (layer >= layout_.num_layers) {
    return make_error(Errc::kInvalidArgument, "wait: layer " + std::to_string(layer) +
                                                  " >= num_layers " +
                                                  std::to_string(layout_.num_layers));
  }
  return {};  // every CPU operation completed before it returned
}

Status CpuExecutor::synchronize() { return require_initialized(); }

}  // namespace kvtier::kernels
