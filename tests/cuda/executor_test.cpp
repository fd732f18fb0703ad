// CudaExecutor against the CPU reference executor, byte for byte, for HF, paged NHD and paged HND
// caches and several dtypes and head sizes (so 16-, 8-, 4- and 2-byte kernel accesses all run):
// offload, restore, partial layer ranges, round trips and prefetch in both staging orders.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "cuda_test_support.hpp"
#include "device_world.hpp"

namespace kvtier::kernels::cuda::testing {
namespace {

std::string shape_test_name(const ::testing::TestParamInfo<Shape>& param_info) {
  return shape_name(param_info.param);
}

class CudaExecutorTest : public ::testing::TestWithParam<Shape> {
 protected:
  void SetUp() override {
    KVTIER_SKIP_WITHOUT_CUDA_DEVICE();
    const auto s = world_.setup(GetParam(), 17);
    ASSERT_TRUE(s) << s.error().message;
  }

  std::vector<RowCopy> copies() const {
    return mixed_copies(GetParam().slots(), GetParam().pool_slots, 5);
  }

  DeviceWorld world_;
};

TEST_P(CudaExecutorTest, OffloadWritesThePoolExactlyLikeTheCpuExecutor) {
  const auto list = copies();
  ASSERT_TRUE(world_.cpu->offload(list));
  const auto s = world_.gpu->offload(list);
  ASSERT_TRUE(s) << s.error().message;
  ASSERT_TRUE(world_.gpu->synchronize());
  world_.expect_pools_equal();
  world_.expect_caches_equal();  // sources untouched
}

TEST_P(CudaExecutorTest, RestoreWritesTheCacheExactlyLikeTheCpuExecutor) {
  const auto list = copies();
  ASSERT_TRUE(world_.cpu->restore(list));
  const auto s = world_.gpu->restore(list);
  ASSERT_TRUE(s) << s.error().message;
  ASSERT_TRUE(world_.gpu->synchronize());
  world_.expect_caches_equal();
  world_.expect_pools_equal();
}

TEST_P(CudaExecutorTest, CopyLayersTouchesOnlyTheGivenLayers) {
  const auto list = copies();
  for (const Direction d : {Direction::kOffload, Direction::kRestore}) {
    ASSERT_TRUE(world_.cpu->copy_layers(d, list, 1, 1));
    ASSERT_TRUE(world_.gpu->copy_layers(d, list, 1, 1));
  }
  ASSERT_TRUE(world_.gpu->synchronize());
  world_.expect_pools_equal();
  world_.expect_caches_equal();
}

TEST_P(CudaExecutorTest, OffloadThenRestoreIntoOtherSlotsRoundTripsBitExactly) {
  const auto out = copies();
  std::vector<RowCopy> back;
  for (std::size_t i = 0; i < out.size(); ++i) {
    back.push_back({out[(i + 1) % out.size()].hbm_slot, out[i].pool_slot});
  }
  for (CopyExecutor* e : {world_.cpu.get(), static_cast<CopyExecutor*>(world_.gpu.get())}) {
    ASSERT_TRUE(e->offload(out));
    ASSERT_TRUE(e->restore(back));
  }
  ASSERT_TRUE(world_.gpu->synchronize());
  world_.expect_caches_equal();
  world_.expect_pools_equal();
}

TEST_P(CudaExecutorTest, PrefetchStagesRowsLikeTheCpuExecutorInBothOrders) {
  const std::uint32_t rows = 150;
  std::vector<std::uint32_t> slots, positions;
  for (std::uint32_t i = 0; i < rows; ++i) {
    slots.push_back((i * 37 + 11) % GetParam().pool_slots);  // distinct: 37 coprime to 300
    positions.push_back(1000 + 3 * i);
  }
  const std::size_t bytes = staging_bytes(world_.gpu_pool, rows);
  auto device = DeviceBuffer::allocate(bytes);
  ASSERT_TRUE(device);
  ASSERT_TRUE(device->fill(0));
  for (const StagingOrder order : {StagingOrder::kCompact, StagingOrder::kPositionOrder}) {
    for (std::uint32_t layer = 0; layer < GetParam().layers; ++layer) {
      std::vector<std::byte> want(bytes);
      StagingBuffer cpu_buffer = staging_at(reinterpret_cast<std::uintptr_t>(want.data()), bytes);
      ASSERT_TRUE(world_.cpu->prefetch(layer, slots, positions, order, cpu_buffer));
      StagingBuffer gpu_buffer = staging_at(device->address(), bytes);
      const auto s = world_.gpu->prefetch(layer, slots, positions, order, gpu_buffer);
      ASSERT_TRUE(s) << s.error().message;
      ASSERT_TRUE(world_.gpu->wait(layer));
      std::vector<std::byte> got(bytes);
      ASSERT_TRUE(device->download(got.data(), bytes));
      EXPECT_TRUE(got == want) << "layer " << layer;
      EXPECT_EQ(gpu_buffer.rows, rows);
      EXPECT_EQ(gpu_buffer.layer, layer);
      EXPECT_EQ(gpu_buffer.half_row_bytes, cpu_buffer.half_row_bytes);
      EXPECT_EQ(gpu_buffer.v() - gpu_buffer.k(), cpu_buffer.v() - cpu_buffer.k());
      EXPECT_EQ(gpu_buffer.positions, positions);
    }
  }
}

TEST_P(CudaExecutorTest, InvalidRequestsAreRejectedAndCopyNothing) {
  std::vector<RowCopy> bad{{1, 1}, {GetParam().slots(), 2}};
  const auto s = world_.gpu->offload(bad);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, Errc::kInvalidArgument);
  const std::vector<RowCopy> duplicate{{1, 7}, {2, 7}};
  EXPECT_FALSE(world_.gpu->offload(duplicate));
  EXPECT_FALSE(world_.gpu->copy_layers(Direction::kOffload, duplicate, GetParam().layers, 1));
  EXPECT_FALSE(world_.gpu->wait(GetParam().layers));
  ASSERT_TRUE(world_.gpu->synchronize());
  world_.expect_pools_equal();
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, CudaExecutorTest,
    ::testing::Values(Shape{Kind::kHf, KvDtype::kF16, 4, 64},  // 16-byte words
                      Shape{Kind::kHf, KvDtype::kF32, 2, 3},   // 12-byte heads: 4-byte words
                      Shape{Kind::kHf, KvDtype::kF16, 3, 3},   // 6-byte heads: 2-byte words
                      Shape{Kind::kPagedNhd, KvDtype::kBf16, 8, 128},
                      Shape{Kind::kPagedNhd, KvDtype::kF16, 2, 4},  // 8-byte words
                      Shape{Kind::kPagedHnd, KvDtype::kF16, 4, 32}),
    shape_test_name);

}  // namespace
}  // namespace kvtier::kernels::cuda::testing
