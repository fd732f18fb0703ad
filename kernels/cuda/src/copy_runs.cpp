// Copy planning for the CUDA backend (see copy_runs.hpp for the rule).
#include "kvtier/kernels/cuda/copy_runs.hpp"

#include <utility>

namespace kvtier::kernels::cuda {
namespace {

// Collects (dst, src, bytes) segments, merging one that continues the pending run on both sides,
// exactly like the CPU reference's RunCopier merges its memcpy calls.
class SegmentMerger {
 public:
  explicit SegmentMerger(std::vector<DmaCopy>& out) : out_(out) {}
  SegmentMerger(const SegmentMerger&) = delete;
  SegmentMerger& operator=(const SegmentMerger&) = delete;
  ~SegmentMerger() { flush(); }

  void add(std::uintptr_t dst, std::uintptr_t src, std::size_t bytes) {
    if (pending_.bytes != 0 && dst == pending_.dst + pending_.bytes &&
        src == pending_.src + pending_.bytes) {
      pending_.bytes += bytes;
      return;
    }
    flush();
    pending_ = DmaCopy{dst, src, bytes};
  }

  void flush() {
    if (pending_.bytes != 0) out_.push_back(pending_);
    pending_ = DmaCopy{};
  }

 private:
  std::vector<DmaCopy>& out_;
  DmaCopy pending_;
};

// The merged segments of `run` in one layer, in the order the CPU reference copies them.
void layer_segments(const KvLayout& layout, const PoolView& pool, Direction direction,
                    std::span<const RowCopy> run, std::uint32_t layer, std::vector<DmaCopy>& out) {
  const std::size_t head_bytes = layout.head_bytes();
  const std::size_t half = layout.half_row_bytes();
  const bool offload = direction == Direction::kOffload;
  SegmentMerger merger(out);
  for (const RowCopy& copy : run) {
    const auto row = reinterpret_cast<std::uintptr_t>(pool.row(layer, copy.pool_slot));
    const std::size_t slot_offset = layout.slot_offset(copy.hbm_slot);
    for (int kv = 0; kv < 2; ++kv) {
      const std::uintptr_t base =
          (kv == 0 ? layout.k_base[layer] : layout.v_base[layer]) + slot_offset;
      const std::uintptr_t row_half = row + (kv == 0 ? 0 : half);
      for (std::uint32_t h = 0; h < layout.num_kv_heads; ++h) {
        const std::uintptr_t cache = base + h * layout.head_stride;
        const std::uintptr_t pooled = row_half + h * head_bytes;
        if (offload) {
          merger.add(pooled, cache, head_bytes);
        } else {
          merger.add(cache, pooled, head_bytes);
        }
      }
    }
  }
}

// Length of the run of entries starting at `first` whose two slots both advance by one.
template <class Slots>
std::size_t run_length(std::size_t first, std::size_t size, Slots slots_at) {
  std::size_t n = 1;
  while (first + n < size) {
    const auto [a0, b0] = slots_at(first);
    const auto [a1, b1] = slots_at(first + n);
    if (std::size_t{a1} != std::size_t{a0} + n || std::size_t{b1} != std::size_t{b0} + n) break;
    ++n;
  }
  return n;
}

// plan_staging over `count` entries, entry k staging pool slot row_at(k).slot as staged row
// row_at(k).index of `staged_rows`.
template <class RowAt>
StagingPlan plan_staging_rows(const PoolView& pool, std::uint32_t layer, std::size_t count,
                              std::size_t staged_rows, RowAt row_at, std::uintptr_t staging,
                              std::size_t min_run_bytes) {
  StagingPlan plan;
  const std::size_t half = pool.row_bytes / 2;
  std::size_t i = 0;
  while (i < count) {
    const std::size_t n = run_length(i, count, [&](std::size_t k) {
      const StagedRow row = row_at(k);
      return std::pair{row.slot, row.index};
    });
    const StagedRow first = row_at(i);
    if (n * pool.row_bytes >= min_run_bytes) {
      const auto src = reinterpret_cast<std::uintptr_t>(pool.row(layer, first.slot));
      plan.dma.push_back(DmaCopy2d{staging + first.index * half, half, src, pool.row_bytes, half, n});
      plan.dma.push_back(DmaCopy2d{staging + (staged_rows + first.index) * half, half, src + half,
                                   pool.row_bytes, half, n});
    } else {
      for (std::size_t k = i; k < i + n; ++k) plan.kernel_rows.push_back(row_at(k));
    }
    i += n;
  }
  return plan;
}

}  // namespace

CopyPlan plan_copies(const KvLayout& layout, const PoolView& pool, Direction direction,
                     std::span<const RowCopy> copies, std::uint32_t first_layer,
                     std::uint32_t end_layer, std::size_t min_run_bytes) {
  CopyPlan plan;
  std::vector<DmaCopy> run_segments;
  std::size_t i = 0;
  while (i < copies.size()) {
    const std::size_t n = run_length(i, copies.size(), [&](std::size_t k) {
      return std::pair{copies[k].hbm_slot, copies[k].pool_slot};
    });
    const auto run = copies.subspan(i, n);
    // Quick reject: a run shorter than one DMA run cannot merge into one.
    bool dma = n * layout.row_bytes() >= min_run_bytes;
    run_segments.clear();
    for (std::uint32_t layer = first_layer; dma && layer < end_layer; ++layer) {
      const std::size_t before = run_segments.size();
      layer_segments(layout, pool, direction, run, layer, run_segments);
      for (std::size_t s = before; s < run_segments.size(); ++s) {
        if (run_segments[s].bytes < min_run_bytes) {
          dma = false;
          break;
        }
      }
    }
    if (dma) {
      plan.dma.insert(plan.dma.end(), run_segments.begin(), run_segments.end());
    } else {
      plan.kernel_copies.insert(plan.kernel_copies.end(), run.begin(), run.end());
    }
    i += n;
  }
  return plan;
}

StagingPlan plan_staging(const PoolView& pool, std::uint32_t layer,
                         std::span<const std::uint32_t> pool_slots, std::uintptr_t staging,
                         std::size_t min_run_bytes) {
  return plan_staging_rows(
      pool, layer, pool_slots.size(), pool_slots.size(),
      [&](std::size_t k) { return StagedRow{static_cast<std::uint32_t>(k), pool_slots[k]}; },
      staging, min_run_bytes);
}

StagingPlan plan_staging(const PoolView& pool, std::uint32_t layer, std::span<const StagedRow> rows,
                         std::size_t staged_rows, std::uintptr_t staging,
                         std::size_t min_run_bytes) {
  return plan_staging_rows(
      pool, layer, rows.size(), staged_rows, [&](std::size_t k) { return rows[k]; }, staging,
      min_run_bytes);
}

std::uint32_t common_vector_bytes(std::initializer_list<std::size_t> values) noexcept {
  std::uint32_t width = 16;
  for (const std::size_t value : values) {
    while (width > 1 && value % width != 0) width /= 2;
  }
  return width;
}

std::uint32_t common_vector_bytes(std::span<const std::uintptr_t> values,
                                  std::uint32_t start) noexcept {
  std::uint32_t width = start;
  for (const std::uintptr_t value : values) {
    while (width > 1 && value % width != 0) width /= 2;
  }
  return width;
}

}  // namespace kvtier::kernels::cuda
