// CpuExecutor: the reference CopyExecutor. Host memory only; every operation is a sequence of
// memcpy calls finished before it returns, contiguous runs on both sides merged into one call.
// T2 rows are dequantized by the CPU reference (dequantize_block), one row at a time.
// Private to kvtier_kernels; obtained through make_executor(Backend::kCpu).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kvtier/kernels/executor.hpp"

namespace kvtier::kernels {

class CpuExecutor final : public CopyExecutor {
 public:
  CpuExecutor() = default;

  Backend backend() const noexcept override { return Backend::kCpu; }
  Status can_implement(const KvLayout& layout, const PoolView& pool) const override;
  Status initialize(const KvLayout& layout, const PoolView& pool) override;
  Status copy_layers(Direction direction, std::span<const RowCopy> copies,
                     std::uint32_t first_layer, std::uint32_t count) override;
  Status prefetch(std::uint32_t layer, std::span<const std::uint32_t> pool_slots,
                  std::span<const std::uint32_t> positions, StagingOrder order,
                  StagingBuffer& out) override;
  Status bind_int8(const Int8PoolDesc& int8) override;
  Status prefetch_mixed(std::uint32_t layer, std::span<const std::uint32_t> slots,
                        std::span<const std::uint8_t> from_int8,
                        std::span<const std::uint32_t> positions, StagingOrder order,
                        StagingBuffer& out) override;
  Status restore_int8(std::span<const RowCopy> copies) override;
  Status stage_at(std::uint32_t layer, std::span<const std::uint32_t> slots, std::span<const std::uint8_t> from_int8,
                  std::span<const std::uint32_t> positions, const PositionTarget& target) override;
  Status attend(std::uint32_t layer, std::span<const std::uint32_t> t0_slots, std::size_t t0_tokens,
                std::span<const std::uint32_t> slots, std::span<const std::uint8_t> from_int8, const HostQuery& query,
                const AttendOutput& out) override;
  Status wait(std::uint32_t layer) override;
  Status synchronize() override;

 private:
  Status require_initialized() const;
  Status require_int8() const;
  // Host row `slot` of one layer (K of every head, then V): the T1 pool's row, or with `int8` the
  // int8 slot dequantized into scratch_ (valid until the next call). Slots checked by the caller.
  Result<const std::byte*> host_row(std::uint32_t layer, std::uint32_t slot, bool int8);
  // Copies `copies` of one layer between the cache and `pool` (rows pool.row(layer, slot)).
  void copy_layer(Direction direction, const PoolView& pool, std::span<const RowCopy> copies,
                  std::uint32_t layer) const noexcept;

  KvLayout layout_;
  PoolView pool_;
  bool initialized_ = false;
  std::optional<Int8PoolDesc> int8_;
  std::vector<std::byte> scratch_;  // dequantized rows (T2 staging, restores and attention)
  std::vector<AttendRow> attend_rows_;  // attend's rows, kept to reuse the allocation
};

}  // namespace kvtier::kernels
