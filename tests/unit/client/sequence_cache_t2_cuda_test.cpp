// SequenceCache with an int8 (T2) pool on the CUDA backend against the same on the CPU backend:
// one engine cache twice (host memory for the CPU cache, device memory for the CUDA one, same
// bytes), two identical T1 pools, one int8 pool. The same plans must stage the same bytes (T1
// rows exact, T2 rows dequantized by the GPU kernel from the pinned pool, in both orders) and
// restore T2 tokens into the device cache exactly as the CPU restores them into host memory.
// Skips with "no CUDA device: ..." where no device is usable or CUDA was not built.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "kvtier/kernels/cuda/device.hpp"
#include "kvtier/kernels/quantize.hpp"
#include "kvtier/shm/int8_pool_segment.hpp"
#include "kvtier/shm/layout.hpp"
#include "sequence_cache.hpp"

namespace kvtier::client {
namespace {

constexpr std::uint32_t kLayers = 2, kHeads = 2, kDim = 16, kSlots = 32, kPoolSlots = 16, kGroup = 4;
constexpr std::size_t kHalf = std::size_t{kHeads} * kDim * sizeof(float), kRow = 2 * kHalf;
constexpr std::size_t kTensor = std::size_t{kHeads} * kSlots * kDim * sizeof(float);
constexpr std::size_t kPage = 4096;
constexpr std::uint8_t kT0 = KVTIER_T0, kT1 = KVTIER_T1, kT2 = KVTIER_T2;
constexpr std::uint32_t kNone = KVTIER_NO_SLOT;

using Bytes = std::vector<std::byte>;

struct Free {
  void operator()(std::byte* p) const { std::free(p); }
};
using PageBytes = std::unique_ptr<std::byte, Free>;

// Pages of their own: the CUDA executor registers whole pages of each pool.
PageBytes page_alloc(std::size_t bytes) {
  const std::size_t rounded = (bytes + kPage - 1) / kPage * kPage;
  PageBytes p(static_cast<std::byte*>(std::aligned_alloc(kPage, rounded)));
  std::memset(p.get(), 0, rounded);
  return p;
}

kvtier_kv_layout hf_layout(const std::vector<std::uintptr_t>& k, const std::vector<std::uintptr_t>& v,
                           kvtier_backend backend) {
  kvtier_kv_layout layout{};
  layout.struct_size = sizeof(layout);
  layout.backend = backend;
  layout.num_layers = kLayers;
  layout.num_kv_heads = kHeads;
  layout.head_dim = kDim;
  layout.dtype = KVTIER_DTYPE_F32;
  layout.num_slots = kSlots;
  layout.block_size = kSlots;
  layout.token_stride = kDim * sizeof(float);
  layout.head_stride = std::size_t{kSlots} * kDim * sizeof(float);
  layout.block_stride = kTensor;
  layout.k_base = k.data();
  layout.v_base = v.data();
  return layout;
}

class SequenceCacheT2Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto devices = kernels::cuda::device_count(); !devices) GTEST_SKIP() << devices.error().message;
    for (std::uint32_t l = 0; l < kLayers; ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        std::vector<float> x(kTensor / sizeof(float));
        for (std::size_t i = 0; i < x.size(); ++i) {  // irregular, never zero
          x[i] = static_cast<float>((i * 37 + l * 11 + kv * 5) % 101) * 0.05f - 2.51f;
        }
        host_.emplace_back(reinterpret_cast<const std::byte*>(x.data()),
                           reinterpret_cast<const std::byte*>(x.data()) + kTensor);
        auto buffer = kernels::cuda::DeviceBuffer::allocate(kTensor);
        ASSERT_TRUE(buffer && buffer->upload(x.data(), kTensor));
        device_.push_back(std::move(*buffer));
        (kv == 0 ? host_k_ : host_v_).push_back(reinterpret_cast<std::uintptr_t>(host_.back().data()));
        (kv == 0 ? device_k_ : device_v_).push_back(device_.back().address());
      }
    }
    const std::size_t pool_bytes = std::size_t{kLayers} * kPoolSlots * kRow;
    for (PageBytes* p : {&cpu_pool_bytes_, &gpu_pool_bytes_}) *p = page_alloc(pool_bytes);
    cpu_pool_ = {cpu_pool_bytes_.get(), kRow, kPoolSlots * kRow, kPoolSlots, kLayers};
    gpu_pool_ = {gpu_pool_bytes_.get(), kRow, kPoolSlots * kRow, kPoolSlots, kLayers};
    int8_geometry_ = {kLayers, kHeads, kDim, kGroup, 3};
    const std::size_t bytes = shm::kPoolRowsOffset + int8_geometry_.total_bytes();
    int8_bytes_ = page_alloc(bytes);
    int8_.emplace(shm::Int8PoolView::trusted({int8_bytes_.get(), bytes}, int8_geometry_));
    auto cpu = SequenceCache::create(hf_layout(host_k_, host_v_, KVTIER_BACKEND_CPU), cpu_pool_, int8_);
    ASSERT_TRUE(cpu) << cpu.error().message;
    cpu_ = std::move(*cpu);
    auto gpu = SequenceCache::create(hf_layout(device_k_, device_v_, KVTIER_BACKEND_CUDA), gpu_pool_, int8_);
    ASSERT_TRUE(gpu) << gpu.error().message;
    gpu_ = std::move(*gpu);
  }

  // Runs one plan on both caches.
  void run(std::vector<kvtier_plan_move> moves, std::vector<std::uint32_t> hbm) {
    hbm.resize(moves.size(), kNone);
    const kvtier_plan plan{++epoch_, 1, moves.size(), moves.data()};
    const auto on_cpu = cpu_->execute(plan, hbm);
    ASSERT_TRUE(on_cpu) << on_cpu.error().message;
    const auto on_gpu = gpu_->execute(plan, hbm);
    ASSERT_TRUE(on_gpu) << on_gpu.error().message;
  }

  // Offloads slots 0..7 (positions 100..107), the daemon quantizes pool rows 1, 3, 4, 6 into int8
  // block 1 (slots 4..7), and the plan moves those positions to T2 (out of slot order).
  void demote() {
    std::vector<kvtier_plan_move> offloads;
    std::vector<std::uint32_t> hbm;
    for (std::uint32_t i = 0; i < 8; ++i) {
      offloads.push_back({100 + i, kT0, kT1, 0, kNone, i});
      hbm.push_back(i);
    }
    run(offloads, hbm);
    ASSERT_EQ(std::memcmp(cpu_pool_bytes_.get(), gpu_pool_bytes_.get(), std::size_t{kLayers} * kPoolSlots * kRow), 0);
    const kernels::Int8Geometry g{kHeads, kDim, kernels::KvDtype::kF32, kGroup};
    for (std::uint32_t l = 0; l < kLayers; ++l) {
      std::vector<const std::byte*> rows;
      for (std::uint32_t s : {1u, 3u, 4u, 6u}) rows.push_back(cpu_pool_.row(l, s));
      ASSERT_TRUE(kernels::quantize_block(g, rows, int8_->block(l, 1)));
    }
    run({{106, kT1, kT2, 0, 6, 7}, {101, kT1, kT2, 0, 1, 4}, {104, kT1, kT2, 0, 4, 6}, {103, kT1, kT2, 0, 3, 5}}, {});
  }

  void expect_same_stage(std::uint32_t layer, kvtier_staging_order order) {
    const std::size_t bytes = cpu_->stage_bytes();
    ASSERT_EQ(gpu_->stage_bytes(), bytes);
    Bytes want(bytes);
    auto cpu = cpu_->stage(layer, order, want.data(), bytes);
    ASSERT_TRUE(cpu) << cpu.error().message;
    auto staging = kernels::cuda::DeviceBuffer::allocate(bytes);
    ASSERT_TRUE(staging && staging->fill(0));
    auto gpu = gpu_->stage(layer, order, reinterpret_cast<void*>(staging->address()), bytes);
    ASSERT_TRUE(gpu) << gpu.error().message;
    Bytes got(bytes);
    ASSERT_TRUE(staging->download(got.data(), bytes));
    EXPECT_TRUE(got == want) << "layer " << layer << " order " << order;
    ASSERT_EQ(gpu->rows, cpu->rows);
    EXPECT_EQ(std::vector<std::uint32_t>(gpu->positions, gpu->positions + gpu->rows),
              std::vector<std::uint32_t>(cpu->positions, cpu->positions + cpu->rows));
    EXPECT_EQ(static_cast<const std::byte*>(gpu->v) - static_cast<const std::byte*>(gpu->k),
              static_cast<const std::byte*>(cpu->v) - static_cast<const std::byte*>(cpu->k));
  }

  void expect_same_caches() {
    for (std::size_t t = 0; t < host_.size(); ++t) {
      Bytes got(kTensor);
      ASSERT_TRUE(device_[t].download(got.data(), kTensor));
      EXPECT_TRUE(got == host_[t]) << "tensor " << t;
    }
  }

  std::vector<Bytes> host_;
  std::vector<kernels::cuda::DeviceBuffer> device_;
  std::vector<std::uintptr_t> host_k_, host_v_, device_k_, device_v_;
  PageBytes cpu_pool_bytes_, gpu_pool_bytes_, int8_bytes_;
  kernels::PoolView cpu_pool_, gpu_pool_;
  shm::Int8PoolGeometry int8_geometry_{};
  std::optional<shm::Int8PoolView> int8_;
  std::unique_ptr<SequenceCache> cpu_, gpu_;
  std::uint64_t epoch_ = 0;
};

TEST_F(SequenceCacheT2Cuda, StagesTheSameBytesAsTheCpuBackendInBothOrders) {
  demote();
  ASSERT_EQ(gpu_->t2_rows(), 4u);
  for (std::uint32_t l = 0; l < kLayers; ++l) {
    expect_same_stage(l, KVTIER_STAGE_POSITION_ORDER);
    expect_same_stage(l, KVTIER_STAGE_COMPACT);
  }
}

TEST_F(SequenceCacheT2Cuda, T2ToT0RestoresTheSameRowsAsTheCpuBackend) {
  demote();
  // T2 -> T0 and T1 -> T0 in one plan, into slots the offload freed and fresh ones.
  run({{104, kT2, kT0, 0, 6, kNone}, {101, kT2, kT0, 0, 4, kNone}, {100, kT1, kT0, 0, 0, kNone}}, {20, 1, 21});
  expect_same_caches();
  EXPECT_EQ(gpu_->t2_rows(), 2u);
  expect_same_stage(1, KVTIER_STAGE_POSITION_ORDER);
}

TEST_F(SequenceCacheT2Cuda, ARefusedT2RestoreWritesNothingOnTheDevice) {
  demote();
  std::vector<kvtier_plan_move> moves{{104, kT2, kT0, 0, 6, kNone}, {106, kT2, kT0, 0, 7, kNone}};
  std::vector<std::uint32_t> hbm{20, kSlots};  // the second slot does not exist
  const kvtier_plan plan{++epoch_, 1, moves.size(), moves.data()};
  const Status refused = gpu_->execute(plan, hbm);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::kInvalidArgument);
  expect_same_caches();  // the CPU cache never ran it
  EXPECT_EQ(gpu_->t2_rows(), 4u);
}

}  // namespace
}  // namespace kvtier::client
