// CudaExecutor's int8 (T2) operations against the CPU reference executor, byte for byte, over one
// int8 pool of random quantized rows in page-aligned host memory (registered pinned by
// bind_int8): prefetch_mixed in both staging orders (T1 rows copied, T2 rows dequantized at
// their list indices) and restore_int8 (every layer dequantized into the cache's slots).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_support.hpp"
#include "device_world.hpp"

namespace kvtier::kernels::cuda::testing {
namespace {

constexpr std::uint32_t kGroup = 8, kBlocks = 6;  // 48 int8 slots per layer

std::string shape_test_name(const ::testing::TestParamInfo<Shape>& param_info) {
  return shape_name(param_info.param);
}

class CudaExecutorInt8Test : public ::testing::TestWithParam<Shape> {
 protected:
  void SetUp() override {
    KVTIER_SKIP_WITHOUT_CUDA_DEVICE();
    const Shape& s = GetParam();
    const auto made = world_.setup(s, 23);
    ASSERT_TRUE(made) << made.error().message;
    // Random native rows (finite, never zero), quantized block by block into every layer.
    const Int8Geometry g{s.heads, s.dim, s.dtype, kGroup};
    const std::size_t layer_stride = kBlocks * g.block_bytes() + 128;
    int8_bytes_ = std::make_unique<PageBuffer>(s.layers * layer_stride);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> value(-3.0f, 3.0f);
    std::vector<float> x(std::size_t{kBlocks} * kGroup * 2 * g.channels());
    std::vector<std::byte> rows(std::size_t{kBlocks} * kGroup * g.row_bytes());
    for (std::uint32_t l = 0; l < s.layers; ++l) {
      for (float& f : x) f = value(rng);
      from_f32(g.dtype, x.data(), rows.data(), x.size());
      ASSERT_TRUE(quantize_rows(g, rows, {int8_bytes_->data() + l * layer_stride, kBlocks * g.block_bytes()}));
    }
    int8_ = Int8PoolDesc{int8_bytes_->data(), g, layer_stride, kBlocks, s.layers};
    for (CopyExecutor* e : executors()) {
      const auto bound = e->bind_int8(int8_);
      ASSERT_TRUE(bound) << bound.error().message;
    }
  }

  std::vector<CopyExecutor*> executors() { return {world_.cpu.get(), world_.gpu.get()}; }

  // 30 rows: pool slots and int8 slots interleaved, a run of 6 consecutive pool slots (DMA with
  // a small threshold) among them; positions ascending.
  void make_list(std::vector<std::uint32_t>& slots, std::vector<std::uint8_t>& from_int8,
                 std::vector<std::uint32_t>& positions) const {
    std::mt19937 rng(11);
    std::vector<std::uint32_t> t2(kBlocks * kGroup);
    std::iota(t2.begin(), t2.end(), 0u);
    std::shuffle(t2.begin(), t2.end(), rng);
    for (std::uint32_t i = 0; i < 30; ++i) {
      const bool int8 = i % 3 == 1 && (i < 10 || i > 18);
      from_int8.push_back(int8 ? 1 : 0);
      slots.push_back(int8 ? t2[i] : (i >= 10 && i <= 18 ? 100 + i : (i * 37) % GetParam().pool_slots));
      positions.push_back(5 * i + 3);
    }
  }

  DeviceWorld world_;
  std::unique_ptr<PageBuffer> int8_bytes_;
  Int8PoolDesc int8_;
};

TEST_P(CudaExecutorInt8Test, MixedPrefetchStagesTheSameBytesAsTheCpuExecutorInBothOrders) {
  std::vector<std::uint32_t> slots, positions;
  std::vector<std::uint8_t> from_int8;
  make_list(slots, from_int8, positions);
  const std::size_t bytes = staging_bytes(world_.gpu_pool, slots.size());
  auto device = DeviceBuffer::allocate(bytes);
  ASSERT_TRUE(device);
  for (const StagingOrder order : {StagingOrder::kPositionOrder, StagingOrder::kCompact}) {
    for (std::uint32_t layer = 0; layer < GetParam().layers; ++layer) {
      std::vector<std::byte> want(bytes);
      StagingBuffer cpu_buffer = staging_at(reinterpret_cast<std::uintptr_t>(want.data()), bytes);
      ASSERT_TRUE(world_.cpu->prefetch_mixed(layer, slots, from_int8, positions, order, cpu_buffer));
      ASSERT_TRUE(device->fill(0));
      StagingBuffer gpu_buffer = staging_at(device->address(), bytes);
      const auto s = world_.gpu->prefetch_mixed(layer, slots, from_int8, positions, order, gpu_buffer);
      ASSERT_TRUE(s) << s.error().message;
      ASSERT_TRUE(world_.gpu->wait(layer));
      std::vector<std::byte> got(bytes);
      ASSERT_TRUE(device->download(got.data(), bytes));
      EXPECT_TRUE(got == want) << "layer " << layer;
      EXPECT_EQ(gpu_buffer.rows, slots.size());
      EXPECT_EQ(gpu_buffer.positions, positions);
      EXPECT_EQ(world_.gpu->last_stats().int8_rows, 7u);
    }
  }
}

TEST_P(CudaExecutorInt8Test, LongT1RunsGoByDmaAndStillLandAtTheirIndices) {
  CudaExecutorOptions options;
  options.dma_min_run_bytes = 4 * world_.gpu_pool.row_bytes;
  auto gpu = std::make_unique<CudaExecutor>(options);
  ASSERT_TRUE(gpu->initialize(world_.device_layout, world_.gpu_pool));
  ASSERT_TRUE(gpu->bind_int8(int8_));
  std::vector<std::uint32_t> slots, positions;
  std::vector<std::uint8_t> from_int8;
  make_list(slots, from_int8, positions);
  const std::size_t bytes = staging_bytes(world_.gpu_pool, slots.size());
  std::vector<std::byte> want(bytes), got(bytes);
  StagingBuffer cpu_buffer = staging_at(reinterpret_cast<std::uintptr_t>(want.data()), bytes);
  ASSERT_TRUE(world_.cpu->prefetch_mixed(1, slots, from_int8, positions, StagingOrder::kPositionOrder, cpu_buffer));
  auto device = DeviceBuffer::allocate(bytes);
  ASSERT_TRUE(device && device->fill(0));
  StagingBuffer gpu_buffer = staging_at(device->address(), bytes);
  ASSERT_TRUE(gpu->prefetch_mixed(1, slots, from_int8, positions, StagingOrder::kPositionOrder, gpu_buffer));
  ASSERT_TRUE(gpu->wait(1));
  EXPECT_EQ(gpu->last_stats().dma_copies, 2u);  // the run of pool slots 110..118
  ASSERT_TRUE(device->download(got.data(), bytes));
  EXPECT_TRUE(got == want);
}

TEST_P(CudaExecutorInt8Test, Int8RestoreWritesTheCacheExactlyLikeTheCpuExecutor) {
  const std::vector<RowCopy> copies{{3, 17}, {0, 0}, {GetParam().slots() - 1, 47}, {40, 8}, {41, 9}, {7, 30}};
  for (CopyExecutor* e : executors()) {
    const auto s = e->restore_int8(copies);
    ASSERT_TRUE(s) << s.error().message;
  }
  ASSERT_TRUE(world_.gpu->synchronize());
  world_.expect_caches_equal();
  world_.expect_pools_equal();  // T1 pools untouched
  // A second, larger batch reuses and grows the scratch.
  std::vector<RowCopy> more;
  for (std::uint32_t i = 0; i < 40; ++i) more.push_back({(i * 7 + 1) % GetParam().slots(), i});
  for (CopyExecutor* e : executors()) ASSERT_TRUE(e->restore_int8(more));
  ASSERT_TRUE(world_.gpu->synchronize());
  world_.expect_caches_equal();
}

TEST_P(CudaExecutorInt8Test, BadInt8RequestsAreRejectedAndWriteNothing) {
  const std::vector<RowCopy> out_of_pool{{1, 2}, {2, kBlocks * kGroup}};
  const std::vector<RowCopy> duplicate{{1, 2}, {1, 3}};
  for (const auto& copies : {out_of_pool, duplicate}) {
    const auto s = world_.gpu->restore_int8(copies);
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().code, Errc::kInvalidArgument);
  }
  const std::vector<std::uint32_t> slots{1, kBlocks * kGroup};
  const std::vector<std::uint8_t> from_int8{0, 1};
  auto device = DeviceBuffer::allocate(staging_bytes(world_.gpu_pool, 2));
  ASSERT_TRUE(device);
  StagingBuffer buffer = staging_at(device->address(), device->size());
  EXPECT_EQ(world_.gpu->prefetch_mixed(0, slots, from_int8, {}, StagingOrder::kCompact, buffer).error().code,
            Errc::kInvalidArgument);
  const std::vector<std::uint8_t> short_flags{0};
  EXPECT_EQ(world_.gpu->prefetch_mixed(0, slots, short_flags, {}, StagingOrder::kCompact, buffer).error().code,
            Errc::kInvalidArgument);
  ASSERT_TRUE(world_.gpu->synchronize());
  world_.expect_caches_equal();
  // An int8 pool of another model is refused and leaves the executor without one.
  Int8PoolDesc other = int8_;
  other.geometry.head_dim *= 2;
  EXPECT_EQ(world_.gpu->bind_int8(other).error().code, Errc::kInvalidArgument);
  EXPECT_EQ(world_.gpu->restore_int8(out_of_pool).error().code, Errc::kBadState);
}

TEST(CudaExecutorInt8, Int8OperationsNeedABoundPool) {
  KVTIER_SKIP_WITHOUT_CUDA_DEVICE();
  DeviceWorld world;
  ASSERT_TRUE(world.setup(Shape{}, 3));
  const std::vector<RowCopy> copies{{1, 1}};
  EXPECT_EQ(world.gpu->restore_int8(copies).error().code, Errc::kBadState);
  EXPECT_EQ(world.cpu->restore_int8(copies).error().code, Errc::kBadState);
  CudaExecutor unbound;
  EXPECT_EQ(unbound.bind_int8(Int8PoolDesc{}).error().code, Errc::kBadState);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaExecutorInt8Test,
    ::testing::Values(Shape{Kind::kHf, KvDtype::kF16, 4, 64, 3, 16, 16, 300},
                      Shape{Kind::kPagedNhd, KvDtype::kBf16, 2, 128, 2, 8, 16, 200},
                      Shape{Kind::kPagedHnd, KvDtype::kF32, 1, 24, 2, 4, 16, 160}),
    shape_test_name);

}  // namespace
}  // namespace kvtier::kernels::cuda::testing
