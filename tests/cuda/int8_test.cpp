// Int8Quantize / Int8Dequantize against the CPU reference of kvtier/kernels/quantize.hpp
// (quantize_rows / dequantize_rows), byte for byte, for every KV dtype: a token count leaving a
// partial last block, an outlier key channel, blocks in device memory and in mapped pinned host
// memory (the T2 pool), outputs as contiguous rows and in the staging layout.
#include <gtest/gtest.h>

#include <cstring>
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

INSTANTIATE_TEST_SUITE_P(Dtypes, Int8Test,
                         ::testing::Values(KvDtype::kF32, KvDtype::kF16, KvDtype::kBf16),
                         dtype_test_name);

TEST(Int8Ops, RunBeforeInitializeIsABadStateAndBadGeometryIsRejected) {
  EXPECT_EQ(Int8Quantize{}.run(0).error().code, Errc::kBadState);
  EXPECT_EQ(Int8Dequantize{}.run(0).error().code, Errc::kBadState);
  Int8QuantizeArguments args{Int8Geometry{0, 48, KvDtype::kF16, 32}, 16, 1, 16};
  EXPECT_EQ(Int8Quantize::can_implement(args).error().code, Errc::kInvalidArgument);
  args.geometry.num_kv_heads = 4;
  args.blocks = 8;  // not 16-byte aligned
  EXPECT_EQ(Int8Quantize::can_implement(args).error().code, Errc::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::kernels::cuda
