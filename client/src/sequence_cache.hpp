// SequenceCache: the client library's side of one sequence's tiering. It holds the engine's KV
// layout, the copy executor bound to it and the pool, and which host row holds each T1 token
// (a T1 pool slot) and each T2 token (an int8 pool slot), so it can execute plans and stage a
// layer's host rows without the engine's help.
//
// Staging: T1 rows go through the executor (exact copies). When T2 rows are present they are
// dequantized on the CPU and merged into the same list (position order: one list sorted by
// position; compact: T1 rows by pool slot, then T2 rows by int8 slot); the GPU dequantize path
// is not wired yet (issue #4), so the CUDA backend refuses a stage with T2 rows and T2 -> T0
// moves with kBadState.
//
// Thread-safety: one thread at a time (the owning Client's).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "int8_rows.hpp"
#include "kvtier/kernels/executor.hpp"
#include "kvtier/kernels/kv_layout.hpp"
#include "kvtier/kvtier.h"

namespace kvtier::client {

class SequenceCache {
 public:
  // `int8`: the client's int8 pool when it has one (must outlive the cache).
  static Result<std::unique_ptr<SequenceCache>> create(const kvtier_kv_layout& layout, const kernels::PoolView& pool,
                                                       const std::optional<shm::Int8PoolView>& int8 = std::nullopt);

  // All copies of the plan, or none (everything is validated first).
  Status execute(const kvtier_plan& plan, std::span<const std::uint32_t> hbm_slots);
  Result<kvtier_staged_layer> stage(std::uint32_t layer, kvtier_staging_order order, void* buffer, std::size_t capacity);
  // Rows a stage returns: T1 and T2.
  std::size_t staged_rows() const { return t1_.size() + t2_.size(); }
  std::size_t stage_bytes() const { return staged_rows() * row_bytes_; }
  std::size_t t2_rows() const { return t2_.size(); }

 private:
  SequenceCache(std::unique_ptr<kernels::CopyExecutor> executor, kernels::KvLayout layout, const kernels::PoolView& pool,
                std::optional<Int8Rows> int8)
      : executor_(std::move(executor)),
        layout_(std::move(layout)),
        pool_(pool),
        row_bytes_(pool.row_bytes),
        int8_(std::move(int8)) {}

  // (Re)builds the staging lists for `order` from t1_ and t2_; a no-op while they are current.
  void build_lists(kvtier_staging_order order);
  // Stage with T2 rows present (sequence_cache_t2.cpp): CPU gather of T1 rows, dequantize T2.
  Result<kvtier_staged_layer> stage_merged(std::uint32_t layer, void* buffer, std::size_t capacity);
  // T2 -> T0 (sequence_cache_t2.cpp), copies[i] = {hbm slot, i} restoring int8 slot slots[i].
  // prepare checks the copies and dequantizes every layer's rows into restore_scratch_ (the
  // engine's cache is not touched); restore_t2 then writes them into the engine's slots.
  Status prepare_t2_restores(std::span<const kernels::RowCopy> copies, std::span<const std::uint32_t> slots);
  Status restore_t2(std::span<const kernels::RowCopy> copies);

  std::unique_ptr<kernels::CopyExecutor> executor_;
  kernels::KvLayout layout_;
  kernels::PoolView pool_;
  std::size_t row_bytes_;
  std::optional<Int8Rows> int8_;

  std::map<std::uint32_t, std::uint32_t> t1_;  // position -> pool slot, ascending positions
  std::map<std::uint32_t, std::uint32_t> t2_;  // position -> int8 slot, ascending positions
  kernels::StagingBuffer staging_;
  // What every layer of a step stages: the host rows as slots and their positions, in the order
  // of lists_order_. Built once per residency change (execute), not once per layer. With T2
  // rows, list_t2_[i] says row i is an int8 slot, and t2_slots_ / t2_out_ list those rows (in
  // list order) with their dequantize destinations in t2_scratch_.
  std::vector<std::uint32_t> list_slots_, list_positions_;
  std::vector<std::uint8_t> list_t2_;
  std::vector<std::uint32_t> t2_slots_;
  std::vector<std::byte*> t2_out_;
  std::vector<std::byte> t2_scratch_;
  std::optional<kvtier_staging_order> lists_order_;
  // T2 -> T0 scratch: every layer's dequantized rows, restored by a CPU executor bound to it.
  std::vector<std::byte> restore_scratch_;
  std::unique_ptr<kernels::CopyExecutor> restore_executor_;
};

}  // namespace kvtier::client
