// Copy planning of the CUDA backend, on the CPU: whatever the plan sends to DMA (applied here with
// memcpy) plus what it leaves to the kernel (applied with the CPU executor) must reproduce the
// CPU reference exactly, for every layout and threshold; and the run-length rule picks DMA only
// for long contiguous runs.
#include "kvtier/kernels/cuda/copy_runs.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "kvtier/kernels/executor.hpp"
#include "kvtier/kernels/executor_factory.hpp"
#include "random_bytes.hpp"

namespace kvtier::kernels::cuda {
namespace {

using testing::random_bytes;

enum class Kind { kHf, kPagedNhd, kPagedHnd, kPoolShaped };

constexpr std::uint32_t kLayers = 3;
constexpr std::uint32_t kHeads = 2;
constexpr std::uint32_t kDim = 8;
constexpr std::uint32_t kBlocks = 8;
constexpr std::uint32_t kBlockSize = 8;
constexpr std::uint32_t kSlots = kBlocks * kBlockSize;
constexpr std::uint32_t kPoolSlots = 80;

// An engine cache and a pool in host memory, both filled with random non-zero bytes.
struct HostWorld {
  std::vector<std::vector<std::byte>> tensors;
  std::vector<std::byte> pool_bytes;
  KvLayout layout;
  PoolView pool;
};

HostWorld make_world(Kind kind, std::uint64_t seed) {
  HostWorld w;
  const std::size_t hb = kDim * 2;  // f16
  const std::size_t row = 2 * kHeads * hb;
  std::vector<std::uintptr_t> k, v;
  for (std::uint32_t l = 0; l < kLayers; ++l) {
    if (kind == Kind::kPoolShaped) {  // K and V of a token interleaved exactly like a pool row
      w.tensors.push_back(random_bytes(kSlots * row, seed + l));
      const auto base = reinterpret_cast<std::uintptr_t>(w.tensors.back().data());
      k.push_back(base);
      v.push_back(base + row / 2);
    } else {
      for (int kv = 0; kv < 2; ++kv) {
        w.tensors.push_back(random_bytes(kSlots * kHeads * hb, seed + 2 * l + kv));
        (kv == 0 ? k : v).push_back(reinterpret_cast<std::uintptr_t>(w.tensors.back().data()));
      }
    }
  }
  switch (kind) {
    case Kind::kHf:
      w.layout = make_hf_layout(kLayers, kHeads, kDim, KvDtype::kF16, kSlots, k, v);
      break;
    case Kind::kPagedNhd:
      w.layout = make_paged_layout(kLayers, kHeads, kDim, KvDtype::kF16, kBlocks, kBlockSize, k, v);
      break;
    case Kind::kPagedHnd:
      w.layout =
          make_paged_hnd_layout(kLayers, kHeads, kDim, KvDtype::kF16, kBlocks, kBlockSize, k, v);
      break;
    case Kind::kPoolShaped:
      w.layout = make_hf_layout(kLayers, kHeads, kDim, KvDtype::kF16, kSlots, k, v);
      w.layout.token_stride = row;
      w.layout.head_stride = hb;
      break;
  }
  const std::size_t layer_stride = kPoolSlots * row + 32;
  w.pool_bytes = random_bytes(layer_stride * kLayers, seed + 100);
  w.pool = PoolView{w.pool_bytes.data(), row, layer_stride, kPoolSlots, kLayers};
  return w;
}

std::unique_ptr<CopyExecutor> cpu_executor(const HostWorld& w) {
  auto made = make_executor(Backend::kCpu);
  EXPECT_TRUE(made);
  EXPECT_TRUE((*made)->initialize(w.layout, w.pool));
  return std::move(*made);
}

// Runs of consecutive tokens (long and short) and scattered tokens, destinations distinct.
std::vector<RowCopy> mixed_copies() {
  std::vector<RowCopy> copies;
  for (std::uint32_t i = 0; i < 20; ++i) copies.push_back({4 + i, 30 + i});  // crosses blocks
  copies.push_back({40, 2});
  copies.push_back({41, 3});
  copies.push_back({63, 0});
  for (std::uint32_t i = 0; i < 6; ++i) copies.push_back({50 + i, 60 + i});
  copies.push_back({1, 79});
  return copies;
}

using PlanParam = std::tuple<Kind, Direction, std::size_t>;

class PlanCopiesTest : public ::testing::TestWithParam<PlanParam> {};

std::string plan_test_name(const ::testing::TestParamInfo<PlanParam>& param_info) {
  static const char* const kKinds[] = {"Hf", "PagedNhd", "PagedHnd", "PoolShaped"};
  const auto [kind, direction, min_run] = param_info.param;
  return std::string(kKinds[static_cast<int>(kind)]) +
         (direction == Direction::kOffload ? "Offload" : "Restore") + "Min" +
         std::to_string(min_run);
}

TEST_P(PlanCopiesTest, DmaPartPlusKernelPartReproducesTheCpuExecutor) {
  const auto [kind, direction, min_run] = GetParam();
  HostWorld reference = make_world(kind, 11);
  HostWorld planned = make_world(kind, 11);
  const std::vector<RowCopy> copies = mixed_copies();
  ASSERT_TRUE(cpu_executor(reference)->copy_layers(direction, copies, 1, 2));

  const CopyPlan plan = plan_copies(planned.layout, planned.pool, direction, copies, 1, 3, min_run);
  for (const DmaCopy& c : plan.dma) {
    EXPECT_GE(c.bytes, min_run);
    std::memcpy(reinterpret_cast<void*>(c.dst), reinterpret_cast<const void*>(c.src), c.bytes);
  }
  ASSERT_TRUE(cpu_executor(planned)->copy_layers(direction, plan.kernel_copies, 1, 2));

  EXPECT_EQ(planned.pool_bytes, reference.pool_bytes);
  ASSERT_EQ(planned.tensors.size(), reference.tensors.size());
  for (std::size_t t = 0; t < planned.tensors.size(); ++t) {
    EXPECT_EQ(planned.tensors[t], reference.tensors[t]) << "tensor " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(
    LayoutsDirectionsThresholds, PlanCopiesTest,
    ::testing::Combine(::testing::Values(Kind::kHf, Kind::kPagedNhd, Kind::kPagedHnd,
                                         Kind::kPoolShaped),
                       ::testing::Values(Direction::kOffload, Direction::kRestore),
                       ::testing::Values(std::size_t{1}, std::size_t{3 * 64}, kDmaMinRunBytes)),
    plan_test_name);

TEST(PlanCopies, PoolShapedLongRunsGoToDmaAndTheRestToTheKernel) {
  HostWorld w = make_world(Kind::kPoolShaped, 3);
  const std::size_t row = w.pool.row_bytes;
  std::vector<RowCopy> copies;
  for (std::uint32_t i = 0; i < 8; ++i) copies.push_back({i, 10 + i});
  copies.push_back({20, 3});
  copies.push_back({30, 40});
  const CopyPlan plan =
      plan_copies(w.layout, w.pool, Direction::kOffload, copies, 0, kLayers, 4 * row);
  ASSERT_EQ(plan.dma.size(), kLayers);  // one merged run per layer
  for (std::uint32_t l = 0; l < kLayers; ++l) {
    EXPECT_EQ(plan.dma[l].bytes, 8 * row);
    EXPECT_EQ(plan.dma[l].dst, reinterpret_cast<std::uintptr_t>(w.pool.row(l, 10)));
    EXPECT_EQ(plan.dma[l].src, w.layout.k_base[l]);
  }
  EXPECT_EQ(plan.kernel_copies, (std::vector<RowCopy>{{20, 3}, {30, 40}}));
}

TEST(PlanCopies, HfAndPagedRunsStayOnTheKernelAtTheDefaultThreshold) {
  for (const Kind kind : {Kind::kHf, Kind::kPagedNhd, Kind::kPagedHnd}) {
    HostWorld w = make_world(kind, 5);
    std::vector<RowCopy> copies;
    for (std::uint32_t i = 0; i < kSlots; ++i) copies.push_back({i, i});
    const CopyPlan plan = plan_copies(w.layout, w.pool, Direction::kRestore, copies, 0, kLayers);
    EXPECT_TRUE(plan.dma.empty());
    EXPECT_EQ(plan.kernel_copies.size(), copies.size());
  }
}

TEST(PlanStaging, DmaPartPlusKernelPartReproducesTheCpuPrefetch) {
  for (const std::size_t min_run : {std::size_t{1}, std::size_t{4 * 64}, kDmaMinRunBytes}) {
    HostWorld w = make_world(Kind::kHf, 9);
    const std::vector<std::uint32_t> slots{7, 8, 9, 10, 11, 12, 3, 50, 51, 0, 79, 20, 21, 22, 23};
    std::vector<std::byte> want(slots.size() * w.pool.row_bytes);
    std::vector<std::byte> got(want.size(), std::byte{0});
    StagingBuffer buffer;
    buffer.data = reinterpret_cast<std::uintptr_t>(want.data());
    buffer.capacity_bytes = want.size();
    ASSERT_TRUE(cpu_executor(w)->prefetch(2, slots, {}, StagingOrder::kCompact, buffer));

    const auto base = reinterpret_cast<std::uintptr_t>(got.data());
    const StagingPlan plan = plan_staging(w.pool, 2, slots, base, min_run);
    const std::size_t half = w.pool.row_bytes / 2;
    for (const DmaCopy2d& c : plan.dma) {
      EXPECT_GE(c.width * c.height, min_run / 2);
      for (std::size_t r = 0; r < c.height; ++r) {
        std::memcpy(reinterpret_cast<void*>(c.dst + r * c.dst_pitch),
                    reinterpret_cast<const void*>(c.src + r * c.src_pitch), c.width);
      }
    }
    for (const StagedRow& r : plan.kernel_rows) {
      const std::byte* row = w.pool.row(2, r.slot);
      std::memcpy(got.data() + r.index * half, row, half);
      std::memcpy(got.data() + (slots.size() + r.index) * half, row + half, half);
    }
    EXPECT_EQ(got, want) << "min_run " << min_run;
  }
}

TEST(PlanStaging, ALongRunBecomesOneStridedCopyPerHalf) {
  HostWorld w = make_world(Kind::kHf, 1);
  const std::size_t row = w.pool.row_bytes, half = row / 2;
  const std::vector<std::uint32_t> slots{5, 40, 41, 42, 43, 9};
  const std::uintptr_t staging = 0x10000;
  const StagingPlan plan = plan_staging(w.pool, 1, slots, staging, 4 * row);
  const auto src = reinterpret_cast<std::uintptr_t>(w.pool.row(1, 40));
  ASSERT_EQ(plan.dma.size(), 2u);
  EXPECT_EQ(plan.dma[0], (DmaCopy2d{staging + 1 * half, half, src, row, half, 4}));
  EXPECT_EQ(plan.dma[1], (DmaCopy2d{staging + (6 + 1) * half, half, src + half, row, half, 4}));
  EXPECT_EQ(plan.kernel_rows, (std::vector<StagedRow>{{0, 5}, {5, 9}}));
}

// The T1 rows of a stage that also holds T2 rows go to their own list indices: runs need both
// the indices and the slots consecutive, and V halves start after every staged row.
TEST(PlanStaging, RowsWithExplicitIndicesLandAtThoseIndices) {
  HostWorld w = make_world(Kind::kHf, 1);
  const std::size_t row = w.pool.row_bytes, half = row / 2;
  // 10 staged rows; indices 1, 6, 9 are T2 rows (not listed here).
  const std::vector<StagedRow> rows{{0, 12}, {2, 40}, {3, 41}, {4, 42}, {5, 43}, {7, 44}, {8, 45}};
  const std::uintptr_t staging = 0x10000;
  const StagingPlan plan = plan_staging(w.pool, 1, rows, 10, staging, 4 * row);
  const auto src = reinterpret_cast<std::uintptr_t>(w.pool.row(1, 40));
  ASSERT_EQ(plan.dma.size(), 2u);
  EXPECT_EQ(plan.dma[0], (DmaCopy2d{staging + 2 * half, half, src, row, half, 4}));
  EXPECT_EQ(plan.dma[1], (DmaCopy2d{staging + (10 + 2) * half, half, src + half, row, half, 4}));
  // 44 follows 43 in the pool but index 7 does not follow 5: its own (short) run.
  EXPECT_EQ(plan.kernel_rows, (std::vector<StagedRow>{{0, 12}, {7, 44}, {8, 45}}));
}

TEST(PlanStaging, ExplicitIndicesInListOrderPlanLikeTheSlotList) {
  HostWorld w = make_world(Kind::kHf, 2);
  const std::vector<std::uint32_t> slots{7, 8, 9, 10, 11, 12, 3, 50, 51, 0, 79, 20, 21, 22, 23};
  std::vector<StagedRow> rows;
  for (std::uint32_t i = 0; i < slots.size(); ++i) rows.push_back({i, slots[i]});
  for (const std::size_t min_run : {std::size_t{1}, 4 * w.pool.row_bytes, kDmaMinRunBytes}) {
    const StagingPlan by_slots = plan_staging(w.pool, 2, slots, 0x2000, min_run);
    const StagingPlan by_rows = plan_staging(w.pool, 2, rows, slots.size(), 0x2000, min_run);
    EXPECT_EQ(by_rows.dma, by_slots.dma) << min_run;
    EXPECT_EQ(by_rows.kernel_rows, by_slots.kernel_rows) << min_run;
  }
}

TEST(CommonVectorBytes, IsTheWidestPowerOfTwoUpTo16DividingEveryValue) {
  EXPECT_EQ(common_vector_bytes({32, 48, 0}), 16u);
  EXPECT_EQ(common_vector_bytes({256, 6}), 2u);
  EXPECT_EQ(common_vector_bytes({24}), 8u);
  EXPECT_EQ(common_vector_bytes({3, 16}), 1u);
  const std::vector<std::uintptr_t> addresses{0x1000, 0x1004};
  EXPECT_EQ(common_vector_bytes(addresses), 4u);
  EXPECT_EQ(common_vector_bytes(addresses, 2), 2u);
}

}  // namespace
}  // namespace kvtier::kernels::cuda
