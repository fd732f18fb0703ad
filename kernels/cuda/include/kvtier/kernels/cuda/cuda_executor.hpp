// CudaExecutor: the CUDA CopyExecutor (executor.hpp). The engine's cache (KvLayout) is device
// memory; the pool (PoolView) is host memory, normally the client's mapping of its shm pool.
//
// initialize(layout, pool) registers the pool's pages once (cudaHostRegister, mapped and
// portable) and keeps them registered until rebind or destruction, on every error path too
// (DESIGN.md §6: never per step, never pageable copies). It also creates the dedicated copy
// stream, one event per layer and the per-layer device arrays the kernels read.
//
// bind_int8(int8) registers the int8 (T2) pool's pages the same way, once, until the next
// bind_int8, initialize or destruction (every error path included). T2 rows never take the DMA
// path: Int8GatherDequantize (int8_ops.hpp) reads their bytes from the mapped pool and writes
// the model dtype, bit for bit the CPU reference.
//
// Every operation is asynchronous on the copy stream:
//  - copy_layers (offload/restore): plan_copies (copy_runs.hpp) splits the copies; runs of at
//    least dma_min_run_bytes contiguous go to the copy engine in one batched call, the rest to
//    KvRowCopy, which reads/writes the mapped pool from a few SMs.
//  - prefetch(layer): plan_staging splits the rows; long runs of consecutive slots become two
//    strided DMAs, the rest PoolRowGather; then the layer's event is recorded.
//  - prefetch_mixed(layer): the T1 rows as prefetch does, at their list indices (plan_staging
//    over StagedRow), then one Int8GatherDequantize launch writes the T2 rows at theirs.
//  - restore_int8: one Int8GatherDequantize launch dequantizes the rows of every layer into
//    device scratch (kept, grown as needed), then KvRowCopy restores them from there like T1 rows.
//  - wait(layer): with a compute stream, that stream waits for the layer's event (the host does
//    not block); without one, the host blocks until the layer's staging landed.
//  - synchronize(): the host blocks until everything issued so far is done. Call it before
//    acknowledging an offload: only then are the pool rows written.
//
// Ordering with the engine (set_compute_stream): before touching memory, copy_layers and
// prefetch make the copy stream wait for the work already queued on the compute stream (the
// attention that last read a staging buffer, the step that wrote a token being offloaded);
// after copy_layers the compute stream waits for the copies (restored tokens are complete
// before attention reads them, offloaded slots are not overwritten while still being read).
// Without a compute stream the caller orders device work itself.
//
// Double buffering: reserve_staging(rows) allocates two layers of device staging owned by the
// executor, and staging_for(layer) hands out buffer layer % 2, so peak HBM for staging is two
// layers; the engine calls prefetch(l + 1) while layer l computes. Caller-owned device staging
// works as well.
//
// Thread-safety: one thread at a time (CopyExecutor). The pool, cache and caller-owned staging
// must outlive the operations touching them (synchronize() or destruction waits for them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "kvtier/kernels/cuda/copy_ops.hpp"
#include "kvtier/kernels/cuda/copy_runs.hpp"
#include "kvtier/kernels/executor.hpp"

namespace kvtier::kernels::cuda {

struct CudaExecutorOptions {
  std::uint32_t copy_blocks = kDefaultCopyBlocks;  // copy kernels use at most this many SMs
  std::size_t dma_min_run_bytes = kDmaMinRunBytes;
};

// What the last copy_layers, prefetch, prefetch_mixed or restore_int8 sent where (tests and
// statistics).
struct CopyStats {
  std::size_t dma_copies = 0;  // DMA descriptors (a strided copy counts once)
  std::size_t dma_bytes = 0;
  std::size_t kernel_units = 0;  // token-layers (copy_layers) or T1 rows (prefetch) by kernel
  std::size_t kernel_bytes = 0;
  std::size_t int8_rows = 0;  // rows (prefetch_mixed) or token-layers (restore_int8) dequantized
};

class CudaExecutor final : public CopyExecutor {
 public:
  explicit CudaExecutor(CudaExecutorOptions options = {});
  ~CudaExecutor() override;  // waits for outstanding copies, then unregisters and frees

  Backend backend() const noexcept override { return Backend::kCuda; }
  // kUnavailable without a device; kInvalidArgument for a bad or mismatched pair.
  Status can_implement(const KvLayout& layout, const PoolView& pool) const override;
  // Releases a previous binding first; on failure the executor is left unbound.
  Status initialize(const KvLayout& layout, const PoolView& pool) override;
  Status copy_layers(Direction direction, std::span<const RowCopy> copies,
                     std::uint32_t first_layer, std::uint32_t count) override;
  Status prefetch(std::uint32_t layer, std::span<const std::uint32_t> pool_slots,
                  std::span<const std::uint32_t> positions, StagingOrder order,
                  StagingBuffer& out) override;
  // kInvalidArgument also when the pool's registered address is not 16-byte aligned.
  Status bind_int8(const Int8PoolDesc& int8) override;
  Status prefetch_mixed(std::uint32_t layer, std::span<const std::uint32_t> slots,
                        std::span<const std::uint8_t> from_int8,
                        std::span<const std::uint32_t> positions, StagingOrder order,
                        StagingBuffer& out) override;
  Status restore_int8(std::span<const RowCopy> copies) override;
  Status wait(std::uint32_t layer) override;
  Status synchronize() override;

  // The engine's compute stream (a cudaStream_t as an integer; 0 = none, the default). Applies
  // to operations issued afterwards; may be set before or after initialize.
  void set_compute_stream(std::uintptr_t stream) noexcept override;
  // The dedicated copy stream (0 before initialize).
  std::uintptr_t copy_stream() const noexcept;

  // Two device staging buffers of rows_per_layer rows each (kBadState before initialize).
  Status reserve_staging(std::size_t rows_per_layer);
  // Staging buffer layer % 2 for prefetch(layer, ...); kBadState without reserve_staging.
  Result<StagingBuffer> staging_for(std::uint32_t layer) const;

  CopyStats last_stats() const noexcept;

 private:
  struct State;
  Status require_initialized() const;
  // T1 staging rows on the copy stream: the plan's DMAs, then PoolRowGather for the rest.
  Status issue_staging(std::uint32_t layer, const StagingPlan& plan, std::size_t rows, std::uintptr_t staging);
  Status require_int8() const;
  // Enqueues KvRowCopy of `copies` (validated) between the cache and rows at device address
  // `pool` laid out like `view`, for layers [first_layer, end_layer).
  Status row_copy_kernel(Direction direction, std::uintptr_t pool, const PoolView& view,
                         std::span<const RowCopy> copies, std::uint32_t first_layer,
                         std::uint32_t end_layer);
  // After copy_layers or restore_int8: records completion, orders the compute stream after it.
  Status finish_copies();

  CudaExecutorOptions options_;
  std::uintptr_t compute_stream_ = 0;
  std::unique_ptr<State> state_;
};

// A CudaExecutor when a CUDA device is usable, else kUnavailable "no CUDA device: <reason>".
// make_executor(Backend::kCuda) calls this.
Result<std::unique_ptr<CopyExecutor>> make_cuda_executor(CudaExecutorOptions options = {});

}  // namespace kvtier::kernels::cuda
