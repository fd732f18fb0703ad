// The copy kernels of the CUDA backend, as CUTLASS-style operations:
// can_implement(args) -> initialize(args) -> run(stream).
//
//  - KvRowCopy: offload or restore of whole tokens (K and V, every KV head, a range of layers)
//    between the engine's cache in HBM, addressed through the KvLayout strides (HF, paged NHD,
//    paged HND, ...), and pool rows in mapped pinned host memory. The kernel reads (restore) or
//    writes (offload) host memory directly over PCIe: one token-layer is a few hundred bytes to a
//    few KiB, far too small for a DMA descriptor each (copy_runs.hpp).
//  - PoolRowGather: prefetch's gather of scattered pool rows of one layer into a staging buffer
//    in HBM, split into K rows then V rows (staging.hpp).
//
// Both run on at most `max_blocks` blocks of kCopyThreads threads, so a copy never takes more
// than that many SMs from the model; each thread keeps kCopyUnroll loads of vector_bytes in
// flight (bandwidth over PCIe = bytes in flight / round trip, perf-anchors §1.5).
//
// Addresses are integers (device-visible addresses; the pool's mapped device address, not its
// host address); no CUDA types appear here. `stream` is a cudaStream_t cast to an integer (0: the
// legacy default stream). Errors: kInvalidArgument from can_implement, kBadState from run before
// a successful initialize, kUnavailable when the launch fails.
// Thread-safety: an operation object is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvtier/kernels/copy_plan.hpp"
#include "kvtier/kernels/cuda/copy_runs.hpp"
#include "kvtier/base/error.hpp"

namespace kvtier::kernels::cuda {

// Default grid: 4 blocks of 1024 threads, i.e. at most 4 SMs (goal: decode slows <= 5% with a
// prefetch running; ~256 KiB in flight is enough to fill a Gen5 x16 link at ~2 us round trip).
inline constexpr std::uint32_t kDefaultCopyBlocks = 4;
inline constexpr std::uint32_t kCopyThreads = 1024;
inline constexpr std::uint32_t kCopyUnroll = 4;

struct KvRowCopyArguments {
  Direction direction = Direction::kOffload;
  // Engine cache (KvLayout fields): device arrays of per-layer K and V base addresses.
  std::uintptr_t k_bases = 0;
  std::uintptr_t v_bases = 0;
  std::uint32_t num_kv_heads = 0;
  std::uint32_t num_slots = 0;  // below 2^31
  std::uint32_t block_size = 0;
  std::size_t head_bytes = 0;
  std::size_t token_stride = 0;
  std::size_t head_stride = 0;
  std::size_t block_stride = 0;
  // Pool (PoolView fields); `pool` is the device-visible address of row (layer 0, slot 0).
  std::uintptr_t pool = 0;
  std::size_t row_bytes = 0;
  std::size_t layer_stride = 0;
  // Work: device array of num_copies RowCopy, for layers [first_layer, first_layer + num_layers).
  std::uintptr_t copies = 0;
  std::uint32_t num_copies = 0;
  std::uint32_t first_layer = 0;
  std::uint32_t num_layers = 0;
  // Access width in bytes (1, 2, 4, 8 or 16) dividing every base address and stride above
  // (common_vector_bytes); the executor computes it once per layout.
  std::uint32_t vector_bytes = 1;
  std::uint32_t max_blocks = kDefaultCopyBlocks;
};

class KvRowCopy {
 public:
  static Status can_implement(const KvRowCopyArguments& args);
  Status initialize(const KvRowCopyArguments& args);
  // Enqueues the copy on `stream`; a no-op for zero copies.
  Status run(std::uintptr_t stream) const;

 private:
  KvRowCopyArguments args_{};
  bool initialized_ = false;
};

struct PoolRowGatherArguments {
  std::uintptr_t pool = 0;  // device-visible address of pool row (layer 0, slot 0)
  std::size_t row_bytes = 0;
  std::size_t layer_stride = 0;
  std::uint32_t layer = 0;
  std::uintptr_t rows = 0;         // device array of num_rows StagedRow
  std::uint32_t num_rows = 0;      // rows this kernel gathers
  std::uint32_t staged_rows = 0;   // rows the staging buffer holds in all (V rows start after)
  std::uintptr_t staging = 0;      // device address of the staging buffer
  std::uint32_t vector_bytes = 1;  // divides pool, strides, half rows and staging
  std::uint32_t max_blocks = kDefaultCopyBlocks;
};

class PoolRowGather {
 public:
  static Status can_implement(const PoolRowGatherArguments& args);
  Status initialize(const PoolRowGatherArguments& args);
  Status run(std::uintptr_t stream) const;

 private:
  PoolRowGatherArguments args_{};
  bool initialized_ = false;
};

}  // namespace kvtier::kernels::cuda
