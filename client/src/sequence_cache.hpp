// SequenceCache: the client library's side of one sequence's tiering. It holds the engine's KV
// layout, the copy executor bound to it and the pool, and which host row holds each T1 token
// (a T1 pool slot) and each T2 token (an int8 pool slot), so it can execute plans and stage a
// layer's host rows without the engine's help.
//
// Staging: T1 rows go through the executor (exact copies). When T2 rows are present the
// executor stages one merged list (prefetch_mixed: T1 rows copied, T2 rows dequantized into the
// model dtype, on the CPU or by the GPU dequantize kernel, bit for bit the same; position order:
// one list sorted by position; compact: T1 rows by pool slot, then T2 rows by int8 slot). T2 ->
// T0 moves dequantize through the executor too (restore_int8). The int8 pool is bound to the
// executor once (CUDA: registered pinned) when the cache is created, until it is destroyed.
//
// Layer-wise double buffering: prefetch(layer) issues a layer's staging (asynchronous on the CUDA
// copy stream), wait(layer) completes it (with a compute stream set, that stream waits, not the
// host) and returns the rows. Up to kStagesInFlight layers are in flight, so an engine prefetches
// layer l + 1 while layer l computes and staging holds two layers. stage() is prefetch + wait.
//
// Thread-safety: one thread at a time (the owning Client's).
#pragma once

#include <array>
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

  // The engine moved or grew its cache (it copied the T0 rows to the same slots first): binds
  // `layout` and keeps which host rows hold the sequence's T1/T2 tokens. Same layers, KV heads,
  // head_dim, dtype and backend (else kInvalidArgument); kBadState while a layer is in flight or
  // a hand-off peer is set; the error of can_implement when the backend cannot reach the new
  // memory (the old layout stays bound).
  Status relocate(const kvtier_kv_layout& layout);

  // All copies of the plan, or none (everything is validated first).
  Status execute(const kvtier_plan& plan, std::span<const std::uint32_t> hbm_slots);
  static constexpr std::size_t kStagesInFlight = 2;
  // kBadState for a layer already in flight or a third one; the view wait() returns stays valid
  // until the slot is reused (with prefetch(l + 1) issued before wait(l): until prefetch(l + 2)).
  Status prefetch(std::uint32_t layer, kvtier_staging_order order, void* buffer, std::size_t capacity);
  // kBadState when `layer` was not prefetched.
  Result<kvtier_staged_layer> wait(std::uint32_t layer);
  Result<kvtier_staged_layer> stage(std::uint32_t layer, kvtier_staging_order order, void* buffer, std::size_t capacity);
  // Layer `layer`'s T1 and T2 rows straight to their positions in the engine's `target` (the
  // executor's stage_at: CPU backend only). kBadState while a layer is in flight.
  Status stage_at(std::uint32_t layer, const kernels::PositionTarget& target);
  // A decode query's attention over one layer's rows where they live: the first t0_tokens tokens
  // of the engine's cache slots t0_slots, then the T1 and T2 rows in ascending positions (the
  // executor's attend: CPU backend only). kBadState while a layer is in flight.
  Status attend(std::uint32_t layer, std::span<const std::uint32_t> t0_slots, std::size_t t0_tokens,
                const kernels::HostQuery& query, const kernels::AttendOutput& out);
  // The engine's compute stream (CUDA: a cudaStream_t; the CPU backend ignores it).
  void set_compute_stream(std::uintptr_t stream) noexcept { executor_->set_compute_stream(stream); }
  // Rows a stage returns: T1 and T2.
  std::size_t staged_rows() const { return t1_.size() + t2_.size(); }
  std::size_t stage_bytes() const { return staged_rows() * row_bytes_; }
  std::size_t t2_rows() const { return t2_.size(); }

  // Hand-off (an adopted sequence): the exporter's cache as this process reaches it, read by an
  // executor of `backend` (kCpu: host memory, kCuda: device memory). Its geometry (layers, KV
  // heads, head_dim, dtype) must equal this cache's, else kInvalidArgument. execute() takes
  // KVTIER_TPEER moves (sequence_cache.cpp); the owner clears the peer once the hand-off plan ran.
  Status set_peer(kernels::KvLayout layout, kernels::Backend backend);
  void clear_peer() noexcept { peer_.reset(); }
  bool has_peer() const noexcept { return peer_.has_value(); }
  const kernels::KvLayout& layout() const noexcept { return layout_; }
  kernels::Backend backend() const noexcept { return executor_->backend(); }

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
  // Prefetch with T2 rows present (sequence_cache_t2.cpp): the executor's prefetch_mixed.
  Status prefetch_merged(std::uint32_t layer, kernels::StagingBuffer& out);
  // T2 -> T0 (sequence_cache_t2.cpp), copies[i] = {hbm slot, i} restoring int8 slot slots[i].
  // prepare checks the copies (nothing is written) and keeps them as t2_restores_; restore_t2
  // then has the executor dequantize every layer's rows into the engine's slots.
  Status prepare_t2_restores(std::span<const kernels::RowCopy> copies, std::span<const std::uint32_t> slots);
  Status restore_t2(std::span<const kernels::RowCopy> copies);
  // Binds int8_ to executor_ (create() does, once).
  Status bind_int8();
  // Before stage_at and attend: no layer in flight (else kBadState), the lists in position
  // order, the int8 pool bound when T2 rows exist. from_int8: their flags (empty without T2).
  Status host_rows_at_rest();
  std::span<const std::uint8_t> from_int8() const;
  // Hand-off moves (sequence_cache.cpp). check_peer_moves validates every KVTIER_TPEER move and
  // lists the T0 ones as {hbm slot, peer slot}; copy_from_peer copies those rows.
  Status check_peer_moves(const kvtier_plan& plan, std::span<const std::uint32_t> hbm_slots,
                          std::vector<kernels::RowCopy>& peer_copies);
  Status copy_from_peer(std::span<const kernels::RowCopy> peer_copies);

  struct Peer {
    kernels::KvLayout layout;
    kernels::Backend backend;
  };

  std::unique_ptr<kernels::CopyExecutor> executor_;
  kernels::KvLayout layout_;
  kernels::PoolView pool_;
  std::size_t row_bytes_;
  std::optional<Int8Rows> int8_;

  std::map<std::uint32_t, std::uint32_t> t1_;  // position -> pool slot, ascending positions
  std::map<std::uint32_t, std::uint32_t> t2_;  // position -> int8 slot, ascending positions
  // Staging slots: a layer in flight between prefetch and wait, and its rows after.
  struct Stage {
    std::optional<std::uint32_t> layer;  // in flight
    kernels::StagingBuffer buffer;
  };
  std::array<Stage, kStagesInFlight> stages_;
  // What every layer of a step stages: the host rows as slots and their positions, in the order
  // of lists_order_. Built once per residency change (execute), not once per layer. With T2
  // rows, list_t2_[i] says row i is an int8 slot (prefetch_mixed's from_int8).
  std::vector<std::uint32_t> list_slots_, list_positions_;
  std::vector<std::uint8_t> list_t2_;
  std::optional<kvtier_staging_order> lists_order_;
  // T2 -> T0 moves of the plan being executed: {hbm slot, int8 slot}.
  std::vector<kernels::RowCopy> t2_restores_;
  bool int8_bound_ = false;
  // The exporter's cache while a hand-off plan is pending (set_peer).
  std::optional<Peer> peer_;
};

}  // namespace kvtier::client
