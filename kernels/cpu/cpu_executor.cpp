// CPU reference executor: per row and KV head one (K or V) segment, merged into runs.
#include "cpu/cpu_executor.hpp"

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
  initialized_ = true;
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
    copy_layer(direction, copies, layer);
  }
  return {};
}

void CpuExecutor::copy_layer(Direction direction, std::span<const RowCopy> copies,
                             std::uint32_t layer) const noexcept {
  const std::size_t head_bytes = layout_.head_bytes();
  const std::size_t half = layout_.half_row_bytes();
  std::byte* const k_base = host_ptr(layout_.k_base[layer]);
  std::byte* const v_base = host_ptr(layout_.v_base[layer]);
  const bool offload = direction == Direction::kOffload;
  RunCopier copier;
  for (const RowCopy& copy : copies) {
    std::byte* const row = pool_.row(layer, copy.pool_slot);
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
  out.layer = layer;
  out.rows = static_cast<std::uint32_t>(rows);
  out.half_row_bytes = half;
  out.order = order;
  out.positions.assign(positions.begin(), positions.end());
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
