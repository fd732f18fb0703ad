// CudaExecutor paths beyond the kernels: the DMA side of the run-length rule (batched copies for
// long contiguous runs, strided copies for long staging runs), ordering with an engine compute
// stream, executor-owned double-buffered staging, pool registration and host-memory layouts.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cuda_test_support.hpp"
#include "device_world.hpp"

namespace kvtier::kernels::cuda::testing {
namespace {

// A cache laid out exactly like pool rows, 512-byte rows: 128 consecutive tokens are 64 KiB.
Shape pool_shaped() { return Shape{Kind::kPoolShaped, KvDtype::kF16, 2, 64, 2, 32, 16, 600}; }

class ExecutorPathsTest : public ::testing::Test {
 protected:
  void SetUp() override { KVTIER_SKIP_WITHOUT_CUDA_DEVICE(); }
};

TEST_F(ExecutorPathsTest, LongContiguousRunsGoByDmaAndStillMatchTheCpuExecutor) {
  DeviceWorld world;
  ASSERT_TRUE(world.setup(pool_shaped(), 23));
  std::vector<RowCopy> copies;
  for (std::uint32_t i = 0; i < 300; ++i) copies.push_back({100 + i, 200 + i});  // 150 KiB run
  for (std::uint32_t i = 0; i < 40; ++i) copies.push_back({i * 2, 10 + i});      // scattered
  for (const Direction d : {Direction::kOffload, Direction::kRestore}) {
    ASSERT_TRUE(world.cpu->copy_layers(d, copies, 0, kAllLayers));
    const auto s = world.gpu->copy_layers(d, copies, 0, kAllLayers);
    ASSERT_TRUE(s) << s.error().message;
    const CopyStats stats = world.gpu->last_stats();
    EXPECT_EQ(stats.dma_copies, 2u);  // one merged run per layer
    EXPECT_EQ(stats.dma_bytes, 2u * 300 * 512);
    EXPECT_EQ(stats.kernel_units, 2u * 40);
  }
  ASSERT_TRUE(world.gpu->synchronize());
  world.expect_pools_equal();
  world.expect_caches_equal();
}

TEST_F(ExecutorPathsTest, LongStagingRunsGoByStridedDmaAndStillMatchTheCpuExecutor) {
  DeviceWorld world;
  ASSERT_TRUE(world.setup(pool_shaped(), 29));
  std::vector<std::uint32_t> slots{599, 3};
  for (std::uint32_t i = 0; i < 200; ++i) slots.push_back(300 + i);  // 100 KiB of rows
  slots.push_back(7);
  const std::size_t bytes = staging_bytes(world.gpu_pool, slots.size());
  auto device = DeviceBuffer::allocate(bytes);
  ASSERT_TRUE(device && device->fill(0));
  std::vector<std::byte> want(bytes), got(bytes);
  StagingBuffer cpu_buffer = staging_at(reinterpret_cast<std::uintptr_t>(want.data()), bytes);
  StagingBuffer gpu_buffer = staging_at(device->address(), bytes);
  ASSERT_TRUE(world.cpu->prefetch(1, slots, {}, StagingOrder::kCompact, cpu_buffer));
  ASSERT_TRUE(world.gpu->prefetch(1, slots, {}, StagingOrder::kCompact, gpu_buffer));
  EXPECT_EQ(world.gpu->last_stats().dma_copies, 2u);  // the run's K halves and V halves
  EXPECT_EQ(world.gpu->last_stats().kernel_units, 3u);
  ASSERT_TRUE(world.gpu->wait(1));
  ASSERT_TRUE(device->download(got.data(), bytes));
  EXPECT_TRUE(got == want);
}

TEST_F(ExecutorPathsTest, WaitOrdersTheComputeStreamAfterTheLayersStaging) {
  DeviceWorld world;
  ASSERT_TRUE(world.setup(Shape{}, 31));
  auto compute = Stream::create();
  ASSERT_TRUE(compute);
  world.gpu->set_compute_stream(compute->handle());
  const std::vector<std::uint32_t> slots{9, 4, 250, 17, 3};
  const std::size_t bytes = staging_bytes(world.gpu_pool, slots.size());
  auto device = DeviceBuffer::allocate(bytes);
  ASSERT_TRUE(device);
  std::vector<std::byte> want(bytes), got(bytes);
  StagingBuffer cpu_buffer = staging_at(reinterpret_cast<std::uintptr_t>(want.data()), bytes);
  StagingBuffer gpu_buffer = staging_at(device->address(), bytes);
  ASSERT_TRUE(world.cpu->prefetch(2, slots, {}, StagingOrder::kCompact, cpu_buffer));
  ASSERT_TRUE(world.gpu->prefetch(2, slots, {}, StagingOrder::kCompact, gpu_buffer));
  ASSERT_TRUE(world.gpu->wait(2));  // the compute stream waits; the host does not
  ASSERT_TRUE(compute->synchronize());
  ASSERT_TRUE(device->download(got.data(), bytes));
  EXPECT_TRUE(got == want);
  // Copies are ordered after the compute stream's queued work and it waits for them.
  const auto list = mixed_copies(Shape{}.slots(), Shape{}.pool_slots, 8);
  ASSERT_TRUE(world.cpu->restore(list));
  ASSERT_TRUE(world.gpu->restore(list));
  ASSERT_TRUE(compute->synchronize());
  world.expect_caches_equal();
  world.gpu->set_compute_stream(0);
}

TEST_F(ExecutorPathsTest, OwnedStagingAlternatesBetweenTwoBuffersByLayer) {
  DeviceWorld world;
  ASSERT_TRUE(world.setup(Shape{}, 37));
  EXPECT_FALSE(world.gpu->staging_for(0));  // nothing reserved yet
  ASSERT_TRUE(world.gpu->reserve_staging(64));
  auto b0 = world.gpu->staging_for(0), b1 = world.gpu->staging_for(1),
       b2 = world.gpu->staging_for(2);
  ASSERT_TRUE(b0 && b1 && b2);
  EXPECT_NE(b0->data, b1->data);
  EXPECT_EQ(b0->data, b2->data);
  EXPECT_EQ(b0->capacity_bytes, staging_bytes(world.gpu_pool, 64));
  const std::vector<std::uint32_t> slots{1, 2, 3, 80, 81, 40};
  const std::size_t bytes = staging_bytes(world.gpu_pool, slots.size());
  for (std::uint32_t layer = 0; layer < 2; ++layer) {
    StagingBuffer buffer = *world.gpu->staging_for(layer);
    ASSERT_TRUE(world.gpu->prefetch(layer, slots, {}, StagingOrder::kCompact, buffer));
  }
  for (std::uint32_t layer = 0; layer < 2; ++layer) {
    ASSERT_TRUE(world.gpu->wait(layer));
    std::vector<std::byte> want(bytes), got(bytes);
    StagingBuffer cpu_buffer = staging_at(reinterpret_cast<std::uintptr_t>(want.data()), bytes);
    ASSERT_TRUE(world.cpu->prefetch(layer, slots, {}, StagingOrder::kCompact, cpu_buffer));
    ASSERT_TRUE(copy_to_host(got.data(), world.gpu->staging_for(layer)->data, bytes));
    EXPECT_TRUE(got == want) << "layer " << layer;
  }
}

TEST_F(ExecutorPathsTest, ThePoolIsRegisteredWhileBoundAndUnregisteredAfterwards) {
  DeviceWorld world;
  ASSERT_TRUE(world.setup(Shape{}, 41));
  const void* pool = world.gpu_pool.base;
  EXPECT_EQ(host_memory_registered(pool).value_or(false), true);
  ASSERT_TRUE(world.gpu->initialize(world.device_layout, world.gpu_pool));  // rebind
  EXPECT_EQ(host_memory_registered(pool).value_or(false), true);
  world.gpu.reset();
  EXPECT_EQ(host_memory_registered(pool).value_or(true), false);
}

TEST_F(ExecutorPathsTest, HostMemoryLayoutsAreRejectedWithAReason) {
  DeviceWorld world;
  ASSERT_TRUE(world.setup(Shape{}, 43));
  CudaExecutor executor;
  const auto s = executor.initialize(world.host_layout, world.gpu_pool);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, Errc::kInvalidArgument);
  EXPECT_NE(s.error().message.find("not device memory"), std::string::npos);
  const std::vector<RowCopy> copies{{0, 0}};
  EXPECT_EQ(executor.offload(copies).error().code, Errc::kBadState);
}

}  // namespace
}  // namespace kvtier::kernels::cuda::testing
