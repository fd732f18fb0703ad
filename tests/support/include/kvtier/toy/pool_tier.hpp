// PoolTier: a T1 tier for a ToyModel, backed by a host pool it owns (PoolView rows) and moved
// by a real kernels::CopyExecutor. It plays the client's part: offload = executor offload into
// free pool slots, then release the HBM slots; restore = admit free HBM slots, then executor
// restore; evict = forget T1 rows (T3). As the model's StagingSource it prefetches each layer's
// T1 rows through the executor, in position order or compact (pool-slot) order.
//
// Thread-safety: none; used with its model on one thread. The model and executor must outlive
// the tier.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <vector>

#include "kvtier/kernels/executor.hpp"
#include "kvtier/kernels/pool_view.hpp"
#include "kvtier/toy/toy_model.hpp"

namespace kvtier::toy {

class PoolTier final : public StagingSource {
 public:
  // Allocates a pool of `pool_slots` rows per layer matching model.layout() and initializes
  // `executor` with (model.layout(), pool).
  static Result<std::unique_ptr<PoolTier>> create(ToyModel& model, kernels::CopyExecutor& executor,
                                                  std::uint32_t pool_slots,
                                                  kernels::StagingOrder order);

  // T0 -> T1 for each position (all T0, distinct); kLimitExceeded when the pool is full.
  Status offload(std::span<const std::uint32_t> positions);
  // T1 -> T0 for each position (all T1, distinct), into the model's lowest free HBM slots.
  Status restore(std::span<const std::uint32_t> positions);
  // T1 -> T3: the rows are dropped and their pool slots freed.
  Status evict(std::span<const std::uint32_t> positions);

  Result<StagedRows> stage(std::uint32_t layer) override;

  void set_order(kernels::StagingOrder order) noexcept;
  const kernels::PoolView& pool() const noexcept { return pool_; }
  std::vector<std::uint32_t> t1_positions() const;  // ascending

 private:
  PoolTier(ToyModel& model, kernels::CopyExecutor& executor, std::uint32_t pool_slots,
           kernels::StagingOrder order);
  void plan_staging();

  ToyModel& model_;
  kernels::CopyExecutor& executor_;
  kernels::StagingOrder order_;
  std::vector<std::byte> storage_;
  kernels::PoolView pool_;
  std::map<std::uint32_t, std::uint32_t> rows_;  // position -> pool slot
  std::set<std::uint32_t> free_rows_;
  // Staging, re-planned when rows_ or order_ change.
  bool planned_ = false;
  std::vector<std::uint32_t> stage_slots_;
  std::vector<std::uint32_t> stage_positions_;
  std::vector<float> staging_;  // floats, so staged rows are read as the floats they are
  kernels::StagingBuffer buffer_;
};

}  // namespace kvtier::toy
