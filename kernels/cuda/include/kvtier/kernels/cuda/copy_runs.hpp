// Copy planning for the CUDA backend: which bytes of an offload, restore or prefetch move by DMA
// (copy engine) and which by a copy kernel reading or writing mapped pinned host memory.
//
// The rule (research/perf-anchors.md §1.4): a DMA descriptor costs about a microsecond, so a
// small row moved by DMA crawls far below the link; only runs of at least kDmaMinRunBytes go to
// the copy engine, everything else to a kernel whose threads load 16-byte words and keep many in
// flight. A "run" is a maximal stretch of consecutive entries whose slots both advance by one:
//  - copy lists (offload/restore): a run goes to DMA when, in every layer, its bytes merge into
//    contiguous segments on both sides that are each at least kDmaMinRunBytes long (e.g. a cache
//    laid out exactly like pool rows). HF and paged caches interleave heads or K/V differently
//    from pool rows, so their runs stay on the kernel, which reads the layout's strides itself.
//  - staging (prefetch): consecutive pool slots are contiguous in the pool, but staging splits
//    each row into a K half and a V half; a run of at least kDmaMinRunBytes becomes two strided
//    (2D) copies, one per half.
//
// CUDA-free and pure, so the decisions are unit-tested on machines without a GPU (tests/cuda).
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "kvtier/kernels/copy_plan.hpp"
#include "kvtier/kernels/kv_layout.hpp"
#include "kvtier/kernels/pool_view.hpp"

namespace kvtier::kernels::cuda {

// Shortest run handed to the copy engine (perf-anchors §1.4: batched DMA nears the link only
// from ~28-64 KiB per descriptor). To be re-tuned from kvtier-gpu-bench figures.
inline constexpr std::size_t kDmaMinRunBytes = 64 * 1024;

// One contiguous copy; addresses as the executor's CPU sees them (the pool side is a host
// address of the registered mapping, the cache side a device address).
struct DmaCopy {
  std::uintptr_t dst = 0;
  std::uintptr_t src = 0;
  std::size_t bytes = 0;

  friend bool operator==(const DmaCopy&, const DmaCopy&) = default;
};

// `height` rows of `width` bytes, rows `dst_pitch` / `src_pitch` bytes apart (cudaMemcpy2D).
struct DmaCopy2d {
  std::uintptr_t dst = 0;
  std::size_t dst_pitch = 0;
  std::uintptr_t src = 0;
  std::size_t src_pitch = 0;
  std::size_t width = 0;
  std::size_t height = 0;

  friend bool operator==(const DmaCopy2d&, const DmaCopy2d&) = default;
};

struct CopyPlan {
  std::vector<DmaCopy> dma;            // for every layer of the range, in token order
  std::vector<RowCopy> kernel_copies;  // moved by the row-copy kernel for every layer of the range
};

// Splits a validated copy list (validate_copies) for layers [first_layer, end_layer) by the rule
// above. Every byte of every copy lands in exactly one of the two parts.
CopyPlan plan_copies(const KvLayout& layout, const PoolView& pool, Direction direction,
                     std::span<const RowCopy> copies, std::uint32_t first_layer,
                     std::uint32_t end_layer, std::size_t min_run_bytes = kDmaMinRunBytes);

// Staged row `index` is filled from pool slot `slot` by the gather kernel.
struct StagedRow {
  std::uint32_t index = 0;
  std::uint32_t slot = 0;

  friend bool operator==(const StagedRow&, const StagedRow&) = default;
};

struct StagingPlan {
  std::vector<DmaCopy2d> dma;          // K halves and V halves of long runs
  std::vector<StagedRow> kernel_rows;  // everything else, in staging order
};

// Plans prefetch(layer, pool_slots) into staging memory at `staging` (layout in staging.hpp):
// row i's K half goes to staging + i * half, its V half to staging + n * half + i * half.
// Preconditions: validate_staging passed.
StagingPlan plan_staging(const PoolView& pool, std::uint32_t layer,
                         std::span<const std::uint32_t> pool_slots, std::uintptr_t staging,
                         std::size_t min_run_bytes = kDmaMinRunBytes);

// The same for rows with explicit places (the T1 rows of a stage that also holds T2 rows): pool
// slot rows[k].slot goes to staged row rows[k].index of a buffer of `staged_rows` rows; a run is
// a stretch of entries whose indices and slots both advance by one. kernel_rows keeps the
// entries' own indices. Preconditions: every index < staged_rows, slots validated.
StagingPlan plan_staging(const PoolView& pool, std::uint32_t layer, std::span<const StagedRow> rows,
                         std::size_t staged_rows, std::uintptr_t staging,
                         std::size_t min_run_bytes = kDmaMinRunBytes);

// Widest access (16, 8, 4, 2 or 1 bytes) that divides every value: the vector width a copy
// kernel may use when all its addresses and strides are among them.
std::uint32_t common_vector_bytes(std::initializer_list<std::size_t> values) noexcept;
std::uint32_t common_vector_bytes(std::span<const std::uintptr_t> values,
                                  std::uint32_t start = 16) noexcept;

}  // namespace kvtier::kernels::cuda
