// CpuExecutor: the reference CopyExecutor. Host memory only; every operation is a sequence of
// memcpy calls finished before it returns, contiguous runs on both sides merged into one call.
// Private to kvtier_kernels; obtained through make_executor(Backend::kCpu).
#pragma once

#include <cstdint>
#include <span>

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
  Status wait(std::uint32_t layer) override;
  Status synchronize() override;

 private:
  Status require_initialized() const;
  void copy_layer(Direction direction, std::span<const RowCopy> copies,
                  std::uint32_t layer) const noexcept;

  KvLayout layout_;
  PoolView pool_;
  bool initialized_ = false;
};

}  // namespace kvtier::kernels
