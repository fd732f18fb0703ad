// KvLayout and PoolView: the constructors' strides and every validation error.
#include "kvtier/kernels/kv_layout.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kvtier/kernels/pool_view.hpp"

namespace kvtier::kernels {
namespace {

// Fake, aligned, never dereferenced addresses.
std::vector<std::uintptr_t> bases(std::uint32_t layers, std::uintptr_t start) {
  std::vector<std::uintptr_t> out;
  for (std::uint32_t l = 0; l < layers; ++l) out.push_back(start + l * 0x100000);
  return out;
}

KvLayout hf() {
  return make_hf_layout(2, 4, 64, KvDtype::kF16, 100, bases(2, 0x10000), bases(2, 0x900000));
}
KvLayout nhd() {
  return make_paged_layout(2, 4, 64, KvDtype::kBf16, 8, 16, bases(2, 0x10000), bases(2, 0x900000));
}

void expect_invalid(const KvLayout& layout, const std::string& fragment) {
  const Status s = validate(layout);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, Errc::kInvalidArgument);
  EXPECT_NE(s.error().message.find(fragment), std::string::npos) << s.error().message;
}

TEST(KvLayout, HfLayoutIsHeadsOutsideTokens) {
  const KvLayout layout = hf();
  ASSERT_TRUE(validate(layout)) << validate(layout).error().message;
  EXPECT_EQ(layout.token_stride, 128u);
  EXPECT_EQ(layout.head_stride, 128u * 100);
  EXPECT_EQ(layout.slot_offset(7), 7u * 128);
  EXPECT_EQ(layout.row_bytes(), 2u * 4 * 64 * 2);
  EXPECT_EQ(layer_extent_bytes(layout), 4u * 100 * 128);
}

TEST(KvLayout, PagedSlotMapsToBlockAndOffset) {
  const KvLayout layout = nhd();
  ASSERT_TRUE(validate(layout));
  EXPECT_EQ(layout.num_slots, 128u);
  EXPECT_EQ(layout.slot_offset(17), 1 * layout.block_stride + 1 * layout.token_stride);
  EXPECT_EQ(layout.block_stride, 16u * 4 * 64 * 2);
  EXPECT_EQ(layer_extent_bytes(layout), 8u * 16 * 4 * 64 * 2);
}

TEST(KvLayout, AnExtentBeyond64BitsIsRefusedAndLayerExtentSaturates) {
  KvLayout layout = nhd();
  layout.block_stride = std::size_t{1} << 60;  // 32 blocks of 2^60 bytes: beyond 2^64
  layout.num_slots = 16 * 32;
  expect_invalid(layout, "overflow");
  EXPECT_EQ(layer_extent_bytes(layout), ~std::size_t{0});
}

TEST(KvLayout, PagedHndLayoutIsValid) {
  const KvLayout layout =
      make_paged_hnd_layout(1, 8, 128, KvDtype::kF32, 4, 16, bases(1, 0x1000), bases(1, 0x800000));
  ASSERT_TRUE(validate(layout));
  EXPECT_EQ(layout.head_stride, 16u * 128 * 4);
  EXPECT_EQ(layer_extent_bytes(layout), 4u * 8 * 16 * 128 * 4);
}

// Found by tests/fuzz (kv_layout): num_blocks * block_size wrapped in 32 bits, giving a valid
// layout of 65536 slots for a cache of 2^32 + 65536.
TEST(KvLayout, PagedConstructorsRefuseMoreSlotsThanA32BitIndex) {
  const KvLayout nhd = make_paged_layout(1, 1, 1, KvDtype::kF16, 65536, 65537, bases(1, 0x1000), bases(1, 0x2000));
  EXPECT_EQ(nhd.num_slots, 0u);
  expect_invalid(nhd, "num_slots is 0");
  const KvLayout hnd = make_paged_hnd_layout(1, 1, 1, KvDtype::kF16, 65536, 65537, bases(1, 0x1000), bases(1, 0x2000));
  expect_invalid(hnd, "num_slots is 0");
}

TEST(KvLayout, ConstructorStridesBeyond64BitsAreRefused) {
  // head_dim 2^31 f32 elements (2^33 bytes) over 2^31 slots: a head spans 2^64 bytes.
  const KvLayout layout =
      make_hf_layout(1, 2, 1u << 31, KvDtype::kF32, 1u << 31, bases(1, 0x1000), bases(1, 0x2000));
  EXPECT_EQ(layout.head_stride, ~std::size_t{0});
  expect_invalid(layout, "overflow");
}

// Found by tests/fuzz (kv_layout): an executor adds offsets up to the layer extent to a base.
TEST(KvLayout, PointerWhoseLayerWrapsTheAddressSpaceIsRejected) {
  KvLayout layout = hf();
  layout.v_base[1] = ~std::uintptr_t{0} - 0xfff;  // aligned, but the layer runs past 2^64
  expect_invalid(layout, "v_base[1] plus the layer's");
}

TEST(KvLayout, NullPointerIsRejected) {
  KvLayout layout = hf();
  layout.v_base[1] = 0;
  expect_invalid(layout, "v_base[1] is null");
}

TEST(KvLayout, MissingLayerPointersAreRejected) {
  KvLayout layout = hf();
  layout.k_base.pop_back();
  expect_invalid(layout, "k_base has 1 layer pointers, expected 2");
}

TEST(KvLayout, ZeroSizesAreRejected) {
  KvLayout layout = hf();
  layout.head_dim = 0;
  expect_invalid(layout, "head_dim is 0");
  layout = hf();
  layout.num_kv_heads = 0;
  expect_invalid(layout, "num_kv_heads is 0");
  layout = nhd();
  layout.block_size = 0;
  expect_invalid(layout, "block_size is 0");
}

TEST(KvLayout, MisalignedPointerIsRejected) {
  KvLayout layout = hf();
  layout.k_base[0] += 1;
  expect_invalid(layout, "not aligned");
}

TEST(KvLayout, TokenStrideSmallerThanAHeadIsRejected) {
  KvLayout layout = hf();
  layout.token_stride = 64;
  expect_invalid(layout, "token_stride 64 < head bytes 128");
}

TEST(KvLayout, OverlappingHeadsAndTokensAreRejected) {
  KvLayout layout = nhd();
  layout.token_stride = 256;  // holds 2 of the 4 heads
  expect_invalid(layout, "overlap");
}

TEST(KvLayout, BlockStrideSmallerThanABlockIsRejected) {
  KvLayout layout = nhd();
  layout.block_stride -= 2;
  expect_invalid(layout, "block_stride");
}

TEST(PoolView, ValidationNamesTheBadField) {
  std::byte storage[64];
  PoolView pool{storage, 16, 32, 4, 2};
  EXPECT_FALSE(validate(pool));  // layer_stride 32 < 4 * 16
  EXPECT_NE(validate(pool).error().message.find("layer_stride 32"), std::string::npos);
  pool = PoolView{nullptr, 16, 64, 4, 2};
  EXPECT_NE(validate(pool).error().message.find("base is null"), std::string::npos);
  pool = PoolView{storage, 0, 64, 4, 2};
  EXPECT_NE(validate(pool).error().message.find("row_bytes is 0"), std::string::npos);
}

TEST(PoolView, RowIsLayerStridePlusSlotTimesRowBytes) {
  std::vector<std::byte> storage(4 << 20);
  const PoolView pool{storage.data(), 1024, 1 << 20, 512, 4};
  EXPECT_EQ(pool.row(3, 5), storage.data() + 3 * (1 << 20) + 5 * 1024);
}

TEST(PoolView, MustHoldExactlyOneTokenRowOfTheLayout) {
  std::byte storage[1];
  const KvLayout layout = hf();
  PoolView pool{storage, layout.row_bytes(), layout.row_bytes() * 8, 8, 2};
  EXPECT_TRUE(check_compatible(layout, pool));
  pool.row_bytes = layout.row_bytes() / 2;
  ASSERT_FALSE(check_compatible(layout, pool));
  EXPECT_NE(check_compatible(layout, pool).error().message.find("row_bytes"), std::string::npos);
  pool.row_bytes = layout.row_bytes();
  pool.num_layers = 3;
  EXPECT_FALSE(check_compatible(layout, pool));
}

}  // namespace
}  // namespace kvtier::kernels
