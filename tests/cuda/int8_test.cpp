// Int8Quantize / Int8Dequantize against the CPU reference of kvtier/kernels/quantize.hpp
// (quantize_rows / dequantize_rows), byte for byte, for every KV dtype: a token count leaving a
// partial last block, an outlier key channel, blocks in device memory and in mapped pinned host
// memory (the T2 pool), outputs as contiguous rows and in the staging layout; the slot-indexed
// gather (arbitrary int8 slots of a multi-layer pool to arbitrary output rows).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_support.hpp"
#include "kvtier/kernels/cuda/int8_ops.hpp"
#include "kvtier/kernels/quantize.hpp"

namespace kvtier::kernels::cuda {
namespace {

constexpr std::size_t kCount = 75;  // blocks of 32: 32 + 32 + 11 rows

Int8Geometry geometry(KvDtype dtype) { return Int8Geometry{4, 48, dtype, kDefaultKeyGroup}; }

// Native rows (K then V), random in [-4, 4] (never zero in practice), channel 7 scaled by 40.
std::vector<std::byte> random_rows(const Int8Geometry& g, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-4.0f, 4.0f);
  std::vector<float> x(kCount * 2 * g.channels());
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = value(rng) * (i % g.channels() == 7 ? 40.0f : 1.0f);
  }
  std::vector<std::byte> rows(kCount * g.row_bytes());
  from_f32(g.dtype, x.data(), rows.data(), x.size());
  return rows;
}

std::string dtype_test_name(const ::testing::TestParamInfo<KvDtype>& param_info) {
  return std::string(dtype_name(param_info.param));
}

class Int8Test : public ::testing::TestWithParam<KvDtype> {
 protected:
  void SetUp() override { KVTIER_SKIP_WITHOUT_CUDA_DEVICE(); }
};

TEST_P(Int8Test, QuantizeWritesTheSameBlocksAsTheCpuReference) {
  const Int8Geometry g = geometry(GetParam());
  const std::vector<std::byte> rows = random_rows(g, 1);
  std::vector<std::byte> want(g.blocks_bytes(kCount), std::byte{0xCD});
  ASSERT_TRUE(quantize_rows(g, rows, want));

  auto d_rows = DeviceBuffer::allocate(rows.size());
  auto d_blocks = DeviceBuffer::allocate(want.size());
  ASSERT_TRUE(d_rows && d_blocks);
  ASSERT_TRUE(d_rows->upload(rows.data(), rows.size()));
  ASSERT_TRUE(d_blocks->fill(0xCD));  // rows past the count stay untouched, as on the CPU
  Int8Quantize op;
  const auto init = op.initialize({g, d_rows->address(), kCount, d_blocks->address()});
  ASSERT_TRUE(init) << init.error().message;
  ASSERT_TRUE(op.run(0));
  ASSERT_TRUE(device_synchronize());
  std::vector<std::byte> got(want.size());
  ASSERT_TRUE(d_blocks->download(got.data(), got.size()));
  EXPECT_TRUE(got == want);
}

TEST_P(Int8Test, DequantizeFromPinnedHostBlocksMatchesTheCpuReferenceInBothLayouts) {
  const Int8Geometry g = geometry(GetParam());
  const std::vector<std::byte> rows = random_rows(g, 2);
  std::vector<std::byte> blocks(g.blocks_bytes(kCount));
  ASSERT_TRUE(quantize_rows(g, rows, blocks));
  std::vector<std::byte> want(kCount * g.row_bytes());
  ASSERT_TRUE(dequantize_rows(g, blocks, kCount, want));

  auto pinned = PinnedBuffer::allocate(blocks.size());  // the T2 pool, read over PCIe
  ASSERT_TRUE(pinned);
  std::memcpy(pinned->data(), blocks.data(), blocks.size());
  auto mapped = pinned->device_address();
  ASSERT_TRUE(mapped);
  auto out = DeviceBuffer::allocate(want.size());
  ASSERT_TRUE(out && out->fill(0));
  const std::size_t half = g.row_bytes() / 2;
  const std::uintptr_t base = out->address();

  Int8Dequantize rows_op;  // contiguous native rows
  ASSERT_TRUE(
      rows_op.initialize({g, *mapped, kCount, base, g.row_bytes(), base + half, g.row_bytes()}));
  ASSERT_TRUE(rows_op.run(0));
  std::vector<std::byte> got(want.size());
  ASSERT_TRUE(out->download(got.data(), got.size()));
  EXPECT_TRUE(got == want);

  ASSERT_TRUE(out->fill(0));
  Int8Dequantize staging_op;  // K rows of every token, then V rows
  ASSERT_TRUE(staging_op.initialize({g, *mapped, kCount, base, half, base + kCount * half, half}));
  ASSERT_TRUE(staging_op.run(0));
  ASSERT_TRUE(out->download(got.data(), got.size()));
  for (std::size_t i = 0; i < kCount; ++i) {
    EXPECT_EQ(std::memcmp(got.data() + i * half, want.data() + i * g.row_bytes(), half), 0) << i;
    EXPECT_EQ(
        std::memcmp(got.data() + (kCount + i) * half, want.data() + i * g.row_bytes() + half, half),
        0)
        << i;
  }
}

// A pool of kLayers layers of blocks (layer_stride leaves a gap after the blocks) holding kCount
// random rows per layer; some slots of each layer listed in random order to random output rows.
TEST_P(Int8Test, GatherDequantizeOfScatteredSlotsMatchesTheCpuReferenceRowByRow) {
  constexpr std::uint32_t kLayers = 3;
  const Int8Geometry g = geometry(GetParam());
  const std::size_t blocks_bytes = g.blocks_bytes(kCount), layer_stride = blocks_bytes + 64;
  std::vector<std::byte> pool(kLayers * layer_stride, std::byte{0x5A});
  for (std::uint32_t l = 0; l < kLayers; ++l) {
    const std::vector<std::byte> rows = random_rows(g, 10 + l);
    ASSERT_TRUE(quantize_rows(g, rows, {pool.data() + l * layer_stride, blocks_bytes}));
  }
  // 40 distinct slots in random order, to a permutation of 50 output rows (10 stay untouched).
  std::mt19937 rng(7);
  std::vector<std::uint32_t> slots(kCount), index(50);
  std::iota(slots.begin(), slots.end(), 0u);
  std::iota(index.begin(), index.end(), 0u);
  std::shuffle(slots.begin(), slots.end(), rng);
  std::shuffle(index.begin(), index.end(), rng);
  std::vector<StagedRow> list;
  for (std::uint32_t i = 0; i < 40; ++i) list.push_back({index[i], slots[i]});
  const std::size_t out_rows = index.size(), half = g.row_bytes() / 2;
  const std::size_t out_layer = out_rows * g.row_bytes();

  auto pinned = PinnedBuffer::allocate(pool.size());
  ASSERT_TRUE(pinned);
  std::memcpy(pinned->data(), pool.data(), pool.size());
  auto mapped = pinned->device_address();
  auto table = DeviceBuffer::allocate(list.size() * sizeof(StagedRow));
  auto out = DeviceBuffer::allocate(kLayers * out_layer);
  ASSERT_TRUE(mapped && table && out);
  ASSERT_TRUE(table->upload(list.data(), list.size() * sizeof(StagedRow)));
  const std::vector<std::byte> filler = testing::random_bytes(kLayers * out_layer, 3);
  ASSERT_TRUE(out->upload(filler.data(), filler.size()));

  // Every layer at once, staging layout per layer (K rows, then V rows).
  Int8GatherDequantizeArguments args;
  args.geometry = g;
  args.pool = *mapped;
  args.layer_stride = layer_stride;
  args.num_layers = kLayers;
  args.rows = table->address();
  args.num_rows = static_cast<std::uint32_t>(list.size());
  args.k = out->address();
  args.k_stride = half;
  args.v = out->address() + out_rows * half;
  args.v_stride = half;
  args.out_layer_stride = out_layer;
  Int8GatherDequantize op;
  const auto init = op.initialize(args);
  ASSERT_TRUE(init) << init.error().message;
  ASSERT_TRUE(op.run(0));
  ASSERT_TRUE(device_synchronize());
  std::vector<std::byte> got(filler.size());
  ASSERT_TRUE(out->download(got.data(), got.size()));

  std::vector<std::byte> want = filler;
  std::vector<std::byte> row(g.row_bytes());
  for (std::uint32_t l = 0; l < kLayers; ++l) {
    for (const StagedRow& r : list) {
      std::byte* dst = row.data();
      const std::uint32_t which = r.slot % g.group_tokens;
      const std::span<const std::byte> block(pool.data() + l * layer_stride + (r.slot / g.group_tokens) * g.block_bytes(),
                                             g.block_bytes());
      ASSERT_TRUE(dequantize_block(g, block, {&which, 1}, {&dst, 1}));
      std::memcpy(want.data() + l * out_layer + r.index * half, row.data(), half);
      std::memcpy(want.data() + l * out_layer + (out_rows + r.index) * half, row.data() + half, half);
    }
  }
  EXPECT_TRUE(got == want);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Int8Test,
                         ::testing::Values(KvDtype::kF32, KvDtype::kF16, KvDtype::kBf16),
                         dtype_test_name);

TEST(Int8Ops, RunBeforeInitializeIsABadStateAndBadGeometryIsRejected) {
  EXPECT_EQ(Int8Quantize{}.run(0).error().code, Errc::kBadState);
  EXPECT_EQ(Int8Dequantize{}.run(0).error().code, Errc::kBadState);
  EXPECT_EQ(Int8GatherDequantize{}.run(0).error().code, Errc::kBadState);
  Int8QuantizeArguments args{Int8Geometry{0, 48, KvDtype::kF16, 32}, 16, 1, 16};
  EXPECT_EQ(Int8Quantize::can_implement(args).error().code, Errc::kInvalidArgument);
  args.geometry.num_kv_heads = 4;
  args.blocks = 8;  // not 16-byte aligned
  EXPECT_EQ(Int8Quantize::can_implement(args).error().code, Errc::kInvalidArgument);
  Int8GatherDequantizeArguments gather;
  gather.geometry = Int8Geometry{4, 48, KvDtype::kF16, 32};
  gather.pool = 8;  // not 16-byte aligned
  gather.rows = gather.k = gather.v = 64;
  gather.num_rows = 1;
  gather.k_stride = gather.v_stride = 4 * 48 * 2;
  EXPECT_EQ(Int8GatherDequantize::can_implement(gather).error().code, Errc::kInvalidArgument);
  gather.pool = 16;
  EXPECT_TRUE(Int8GatherDequantize::can_implement(gather));
  gather.k_stride = 2;  // below one K half
  EXPECT_EQ(Int8GatherDequantize::can_implement(gather).error().code, Errc::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::kernels::cuda
