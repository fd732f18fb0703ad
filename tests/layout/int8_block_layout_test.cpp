// Pins the int8 (T2) block format (shm/include/kvtier/shm/int8_block.hpp) and checks that the
// quantizer (kernels/quantize.hpp) writes and reads blocks exactly where shm says: the daemon
// places blocks by shm's arithmetic and the client's kernels read them, so the two must never
// drift. If a pin fails, the layout changed: bump kLayoutVersion, update shm/LAYOUT.md, then
// the numbers here.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kvtier/kernels/quantize.hpp"
#include "kvtier/shm/int8_block.hpp"
#include "kvtier/shm/int8_pool_geometry.hpp"

namespace kvtier::shm {
namespace {

struct PinnedBlock {
  Int8BlockShape shape;
  std::uint64_t key_min, key_params, value_min, key_codes, value_codes, row_used, row, block;
};

// H, D, G; then the offsets and sizes of LAYOUT.md's formulas, worked out by hand.
constexpr PinnedBlock kPinned[] = {
    {{1, 1, 1}, 4, 64, 4, 8, 9, 10, 16, 80},
    {{3, 5, 7}, 60, 128, 12, 24, 39, 54, 64, 576},
    {{5, 3, 16}, 60, 128, 20, 40, 55, 70, 80, 1408},
    {{4, 128, 32}, 2048, 4096, 16, 32, 544, 1056, 1056, 37888},  // R1-Distill-Qwen-7B
    {{8, 128, 32}, 4096, 8192, 32, 64, 1088, 2112, 2112, 75776},
    {{2, 64, 1024}, 512, 1024, 8, 16, 144, 272, 272, 279552},
};

TEST(ShmLayout, Int8BlockConstantsArePinned) {
  EXPECT_EQ(kMaxInt8GroupTokens, 1024u);
  EXPECT_EQ(kInt8KeyParamsAlign, 64u);
  EXPECT_EQ(kInt8RowAlign, 16u);
  EXPECT_EQ(kernels::kMaxKeyGroup, kMaxInt8GroupTokens);
}

TEST(ShmLayout, Int8BlockSizesAndOffsetsArePinned) {
  for (const PinnedBlock& p : kPinned) {
    const Int8BlockShape& s = p.shape;
    SCOPED_TRACE(testing::Message() << "H=" << s.num_kv_heads << " D=" << s.head_dim << " G=" << s.group_tokens);
    EXPECT_EQ(Int8BlockShape::key_scale_offset(), 0u);
    EXPECT_EQ(s.key_min_offset(), p.key_min);
    EXPECT_EQ(s.key_params_used_bytes(), 2 * p.key_min);
    EXPECT_EQ(s.key_params_bytes(), p.key_params);
    EXPECT_EQ(Int8BlockShape::value_scale_offset(), 0u);
    EXPECT_EQ(s.value_min_offset(), p.value_min);
    EXPECT_EQ(s.key_codes_offset(), p.key_codes);
    EXPECT_EQ(s.value_codes_offset(), p.value_codes);
    EXPECT_EQ(s.row_used_bytes(), p.row_used);
    EXPECT_EQ(s.int8_row_bytes(), p.row);
    EXPECT_EQ(s.row_offset(0), p.key_params);
    EXPECT_EQ(s.row_offset(s.group_tokens - 1), p.key_params + (s.group_tokens - 1) * p.row);
    EXPECT_EQ(s.block_bytes(), p.block);
  }
}

TEST(ShmLayout, Int8PoolPlacesBlocksLayerByLayer) {
  const Int8PoolGeometry g{2, 3, 5, 7, 4};  // 2 layers of 4 blocks of 576 bytes
  EXPECT_EQ(g.block_shape(), (Int8BlockShape{3, 5, 7}));
  EXPECT_EQ(g.block_bytes(), 576u);
  EXPECT_EQ(g.slots(), 28u);
  EXPECT_EQ(g.layer_stride(), 2304u);
  EXPECT_EQ(g.total_bytes(), 4608u);
  EXPECT_EQ(g.block_offset(0, 0), 0u);
  EXPECT_EQ(g.block_offset(0, 3), 1728u);
  EXPECT_EQ(g.block_offset(1, 2), 3456u);
}

// The quantizer's sizes are shm's for every geometry and pool dtype.
TEST(ShmLayout, Int8BlockSizesMatchTheQuantizer) {
  for (const PinnedBlock& p : kPinned) {
    for (kernels::KvDtype dtype : {kernels::KvDtype::kF16, kernels::KvDtype::kBf16, kernels::KvDtype::kF32}) {
      const Int8BlockShape& s = p.shape;
      const kernels::Int8Geometry k{s.num_kv_heads, s.head_dim, dtype, s.group_tokens};
      SCOPED_TRACE(testing::Message() << "H=" << s.num_kv_heads << " D=" << s.head_dim << " G=" << s.group_tokens
                                      << " dtype=" << static_cast<int>(dtype));
      ASSERT_TRUE(kernels::validate(k).has_value());
      EXPECT_EQ(k.block_shape(), s);
      EXPECT_EQ(k.channels(), s.channels());
      EXPECT_EQ(k.key_params_bytes(), p.key_params);
      EXPECT_EQ(k.int8_row_bytes(), p.row);
      EXPECT_EQ(k.block_bytes(), p.block);
      EXPECT_EQ(k.blocks_bytes(1), p.block);
      EXPECT_EQ(k.blocks_bytes(2 * std::size_t{s.group_tokens} + 1), 3 * p.block);
      const Int8PoolGeometry pool{1, s.num_kv_heads, s.head_dim, s.group_tokens, 3};
      EXPECT_EQ(k.blocks_bytes(pool.slots()), pool.layer_stride());
    }
  }
}

float read_f32(const std::vector<std::byte>& block, std::uint64_t at) {
  float f;
  std::memcpy(&f, block.data() + at, sizeof f);
  return f;
}

std::uint8_t read_u8(const std::vector<std::byte>& block, std::uint64_t at) {
  return static_cast<std::uint8_t>(block.at(at));
}

// f32 rows of shape s: K[c] = c + r over channels c, V[h][d] = 100 h + d + r. So per key
// channel min c, range G − 1; per value head min 100 h + r, range D − 1; codes 0 at the minimum
// and 255 at the maximum.
std::vector<float> ramp_rows(const Int8BlockShape& s) {
  const std::size_t channels = s.channels();
  std::vector<float> rows(std::size_t{s.group_tokens} * 2 * channels);
  for (std::size_t r = 0; r < s.group_tokens; ++r) {
    float* row = rows.data() + r * 2 * channels;
    for (std::size_t c = 0; c < channels; ++c) {
      row[c] = static_cast<float>(c + r);
      row[channels + c] = static_cast<float>(100 * (c / s.head_dim) + c % s.head_dim + r);
    }
  }
  return rows;
}

TEST(ShmLayout, Int8QuantizerWritesAtTheBlockOffsets) {
  const Int8BlockShape s{3, 5, 7};
  const kernels::Int8Geometry k{s.num_kv_heads, s.head_dim, kernels::KvDtype::kF32, s.group_tokens};
  const std::vector<float> rows = ramp_rows(s);
  std::vector<const std::byte*> row_ptrs;
  for (std::size_t r = 0; r < s.group_tokens; ++r) {
    row_ptrs.push_back(reinterpret_cast<const std::byte*>(rows.data() + r * 2 * s.channels()));
  }
  std::vector<std::byte> block(s.block_bytes(), std::byte{0xAB});
  const Status short_block = kernels::quantize_block(k, row_ptrs, {block.data(), block.size() - 1});
  ASSERT_FALSE(short_block.has_value());  // one byte short of shm's block
  EXPECT_EQ(short_block.error().code, Errc::kInvalidArgument);
  ASSERT_TRUE(kernels::quantize_block(k, row_ptrs, block).has_value());

  const float key_scale = static_cast<float>(s.group_tokens - 1) / 255.0f;
  const float key_inv = 255.0f / static_cast<float>(s.group_tokens - 1);
  const float value_scale = static_cast<float>(s.head_dim - 1) / 255.0f;
  for (std::uint64_t c = 0; c < s.channels(); ++c) {
    EXPECT_EQ(read_f32(block, Int8BlockShape::key_scale_offset() + 4 * c), key_scale) << c;
    EXPECT_EQ(read_f32(block, s.key_min_offset() + 4 * c), static_cast<float>(c)) << c;
  }
  for (std::uint64_t at = s.key_params_used_bytes(); at < s.key_params_bytes(); ++at) {
    EXPECT_EQ(read_u8(block, at), 0u) << at;
  }
  for (std::uint32_t r = 0; r < s.group_tokens; ++r) {
    const std::uint64_t row = s.row_offset(r);
    for (std::uint32_t h = 0; h < s.num_kv_heads; ++h) {
      EXPECT_EQ(read_f32(block, row + Int8BlockShape::value_scale_offset() + 4 * h), value_scale);
      EXPECT_EQ(read_f32(block, row + s.value_min_offset() + 4 * h), static_cast<float>(100 * h + r));
      EXPECT_EQ(read_u8(block, row + s.value_codes_offset() + h * s.head_dim), 0u);
      EXPECT_EQ(read_u8(block, row + s.value_codes_offset() + h * s.head_dim + s.head_dim - 1), 255u);
    }
    // Every channel of row r is r above its minimum: code round(r · 255 / (G − 1)), half up.
    const auto key_code = static_cast<std::uint8_t>(static_cast<float>(r) * key_inv + 0.5f);
    for (std::uint64_t c = 0; c < s.channels(); ++c) EXPECT_EQ(read_u8(block, row + s.key_codes_offset() + c), key_code);
    for (std::uint64_t at = s.row_used_bytes(); at < s.int8_row_bytes(); ++at) EXPECT_EQ(read_u8(block, row + at), 0u);
  }
}

TEST(ShmLayout, Int8DequantizerReadsAtTheBlockOffsets) {
  // A block written by hand at shm's offsets: key_scale 1, key_min c; row r: value_scale 2,
  // value_min 10 h, key codes r + c, value codes r + d. Restored (f32, exact): K = c + r + c,
  // V = 10 h + 2 (r + d).
  const Int8BlockShape s{3, 5, 7};
  const kernels::Int8Geometry k{s.num_kv_heads, s.head_dim, kernels::KvDtype::kF32, s.group_tokens};
  std::vector<std::byte> block(s.block_bytes());
  const auto put_f32 = [&](std::uint64_t at, float f) { std::memcpy(block.data() + at, &f, sizeof f); };
  for (std::uint64_t c = 0; c < s.channels(); ++c) {
    put_f32(Int8BlockShape::key_scale_offset() + 4 * c, 1.0f);
    put_f32(s.key_min_offset() + 4 * c, static_cast<float>(c));
  }
  for (std::uint32_t r = 0; r < s.group_tokens; ++r) {
    const std::uint64_t row = s.row_offset(r);
    for (std::uint32_t h = 0; h < s.num_kv_heads; ++h) {
      put_f32(row + Int8BlockShape::value_scale_offset() + 4 * h, 2.0f);
      put_f32(row + s.value_min_offset() + 4 * h, static_cast<float>(10 * h));
    }
    for (std::uint64_t c = 0; c < s.channels(); ++c) {
      block[row + s.key_codes_offset() + c] = static_cast<std::byte>(r + c);
      block[row + s.value_codes_offset() + c] = static_cast<std::byte>(r + c % s.head_dim);
    }
  }
  std::vector<float> out(std::size_t{s.group_tokens} * 2 * s.channels(), -1.0f);
  std::vector<std::uint32_t> which;
  std::vector<std::byte*> out_rows;
  for (std::uint32_t r = 0; r < s.group_tokens; ++r) {
    which.push_back(r);
    out_rows.push_back(reinterpret_cast<std::byte*>(out.data() + r * 2 * s.channels()));
  }
  ASSERT_TRUE(kernels::dequantize_block(k, block, which, out_rows).has_value());
  for (std::uint32_t r = 0; r < s.group_tokens; ++r) {
    const float* row = out.data() + r * 2 * s.channels();
    for (std::uint64_t c = 0; c < s.channels(); ++c) {
      EXPECT_EQ(row[c], static_cast<float>(2 * c + r)) << "K r=" << r << " c=" << c;
      EXPECT_EQ(row[s.channels() + c], static_cast<float>(10 * (c / s.head_dim) + 2 * (r + c % s.head_dim)))
          << "V r=" << r << " c=" << c;
    }
  }
}

}  // namespace
}  // namespace kvtier::shm
