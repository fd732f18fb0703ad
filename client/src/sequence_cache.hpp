// SequenceCache: the client library's side of one sequence's tiering. It holds the engine's KV
// layout, the copy executor bound to it and the pool, and which pool slot holds each T1 token,
// so it can execute plans and stage a layer's T1 rows without the engine's help.
//
// Thread-safety: one thread at a time (the owning Client's).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "kvtier/kernels/executor.hpp"
#include "kvtier/kernels/kv_layout.hpp"
#include "kvtier/kvtier.h"

namespace kvtier::client {

class SequenceCache {
 public:
  static Result<std::unique_ptr<SequenceCache>> create(const kvtier_kv_layout& layout, const kernels::PoolView& pool);

  // All copies of the plan, or none (everything is validated first).
  Status execute(const kvtier_plan& plan, std::span<const std::uint32_t> hbm_slots);
  Result<kvtier_staged_layer> stage(std::uint32_t layer, kvtier_staging_order order, void* buffer, std::size_t capacity);
  std::size_t t1_rows() const { return t1_.size(); }
  std::size_t stage_bytes() const { return t1_.size() * row_bytes_; }

 private:
  SequenceCache(std::unique_ptr<kernels::CopyExecutor> executor, std::size_t row_bytes)
      : executor_(std::move(executor)), row_bytes_(row_bytes) {}

  std::unique_ptr<kernels::CopyExecutor> executor_;
  std::size_t row_bytes_;
  // (Re)builds the staging lists for `order` from t1_; a no-op while they are current.
  void build_lists(kvtier_staging_order order);

  std::map<std::uint32_t, std::uint32_t> t1_;  // position -> pool slot, ascending positions
  kernels::StagingBuffer staging_;
  // What every layer of a step stages: the T1 rows as pool slots and their positions, in the
  // order of lists_order_. Built once per residency change (execute), not once per layer.
  std::vector<std::uint32_t> list_slots_, list_positions_;
  std::optional<kvtier_staging_order> lists_order_;
};

}  // namespace kvtier::client
