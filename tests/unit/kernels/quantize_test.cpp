// Int8 tier: the documented block layout, argument checks, per-element error bounds and the
// round-trip error on random normal and heavy-tailed (Qwen-like outlier key channels, student-t
// values) inputs, reported as test properties and on stdout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kvtier/kernels/quantize.hpp"

namespace kvtier::kernels {
namespace {

constexpr Int8Geometry kQwen7b{4, 128, KvDtype::kBf16, 32};  // KV heads, head_dim, dtype, G

std::vector<std::byte> to_rows(const Int8Geometry& g, const std::vector<float>& values) {
  std::vector<std::byte> rows(values.size() * dtype_bytes(g.dtype));
  from_f32(g.dtype, values.data(), rows.data(), values.size());
  return rows;
}

std::vector<float> to_floats(const Int8Geometry& g, const std::vector<std::byte>& rows) {
  std::vector<float> values(rows.size() / dtype_bytes(g.dtype));
  to_f32(g.dtype, rows.data(), values.data(), values.size());
  return values;
}

std::vector<std::byte> round_trip(const Int8Geometry& g, const std::vector<std::byte>& rows) {
  const std::size_t count = rows.size() / g.row_bytes();
  std::vector<std::byte> blocks(g.blocks_bytes(count));
  EXPECT_TRUE(quantize_rows(g, rows, blocks).has_value());
  std::vector<std::byte> back(rows.size());
  EXPECT_TRUE(dequantize_rows(g, blocks, count, back).has_value());
  return back;
}

// count rows; element [r][kv][h][d] at r·2HD + kv·HD + h·D + d.
std::vector<float> normal_rows(const Int8Geometry& g, std::size_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::vector<float> x(count * 2 * g.channels());
  for (float& v : x) v = n01(rng);
  return x;
}

// Keys: a per-channel bias N(0, 2) plus student-t(3) noise, ×20 on 4 outlier channels per head
// (the massive key channels of Qwen models). Values: student-t(3) per element.
std::vector<float> heavy_tailed_rows(const Int8Geometry& g, std::size_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> bias_dist(0.0f, 2.0f);
  std::student_t_distribution<float> t3(3.0f);
  const std::size_t channels = g.channels();
  std::vector<float> bias(channels), scale(channels, 1.0f);
  for (std::size_t c = 0; c < channels; ++c) {
    bias[c] = bias_dist(rng);
    const std::size_t d = c % g.head_dim;
    if (d == 3 || d == 17 || d == 64 || d == 100) scale[c] = 20.0f;
  }
  std::vector<float> x(count * 2 * channels);
  for (std::size_t r = 0; r < count; ++r) {
    float* row = &x[r * 2 * channels];
    for (std::size_t c = 0; c < channels; ++c) row[c] = bias[c] + scale[c] * t3(rng);
    for (std::size_t c = 0; c < channels; ++c) row[channels + c] = t3(rng);
  }
  return x;
}

TEST(Int8Layout, BlockSizesMatchTheDocumentedLayout) {
  EXPECT_EQ(kQwen7b.row_bytes(), 2048u);
  EXPECT_EQ(kQwen7b.key_params_bytes(), 4096u);
  EXPECT_EQ(kQwen7b.int8_row_bytes(), 1056u);
  EXPECT_EQ(kQwen7b.block_bytes(), 37888u);
  EXPECT_EQ(kQwen7b.blocks_bytes(33), 2 * 37888u);
  const Int8Geometry odd{3, 10, KvDtype::kF16, 5};
  EXPECT_EQ(odd.key_params_bytes(), 256u);  // 8·30 = 240, padded to 64
  EXPECT_EQ(odd.int8_row_bytes(), 96u);     // 24 + 60 = 84, padded to 16
  EXPECT_EQ(odd.block_bytes(), 256u + 5 * 96u);
}

TEST(Int8Layout, ScalesMinimaAndCodesSitAtTheDocumentedOffsets) {
  // f32 rows, H = 4, D = 128, G = 32; two rows. Key channel (h 1, d 2) is 0 in row 0 and 255 in
  // row 1: key_scale 1, key_min 0, codes 0 and 255. Value head 2 of row 0 is d (0..127):
  // value_scale 127/255, value_min 0, code of d = 127 is 255.
  Int8Geometry g = kQwen7b;
  g.dtype = KvDtype::kF32;
  std::vector<float> x(2 * 2 * g.channels(), 0.0f);
  x[1 * 128 + 2] = 0.0f;
  x[2 * g.channels() + 1 * 128 + 2] = 255.0f;
  for (std::size_t d = 0; d < 128; ++d) x[g.channels() + 2 * 128 + d] = static_cast<float>(d);
  const std::vector<std::byte> rows = to_rows(g, x);
  std::vector<std::byte> block(g.block_bytes());
  const std::byte* ptrs[] = {rows.data(), rows.data() + g.row_bytes()};
  ASSERT_TRUE(quantize_block(g, ptrs, block).has_value());

  auto f32_at = [&](std::size_t offset) {
    float v;
    std::memcpy(&v, block.data() + offset, sizeof v);
    return v;
  };
  auto u8_at = [&](std::size_t offset) { return std::to_integer<unsigned>(block[offset]); };
  const std::size_t channel = 1 * 128 + 2;
  EXPECT_EQ(f32_at(4 * channel), 1.0f);                    // key_scale[1][2]
  EXPECT_EQ(f32_at(4 * 512 + 4 * channel), 0.0f);          // key_min[1][2]
  const std::size_t p = 4096;
  EXPECT_EQ(u8_at(p + 8 * 4 + channel), 0u);               // row 0 key code
  EXPECT_EQ(u8_at(p + 1056 + 8 * 4 + channel), 255u);      // row 1 key code
  EXPECT_FLOAT_EQ(f32_at(p + 4 * 2), 127.0f / 255.0f);     // row 0 value_scale[2]
  EXPECT_EQ(f32_at(p + 4 * 4 + 4 * 2), 0.0f);              // row 0 value_min[2]
  EXPECT_EQ(u8_at(p + 8 * 4 + 512 + 2 * 128 + 127), 255u); // row 0 value code (h 2, d 127)
  EXPECT_EQ(u8_at(p + 8 * 4 + 512 + 2 * 128 + 0), 0u);
}

TEST(Int8Quantize, RejectsBadArguments) {
  std::vector<std::byte> block(kQwen7b.block_bytes());
  std::vector<std::byte> row(kQwen7b.row_bytes());
  const std::byte* one[] = {row.data()};
  EXPECT_FALSE(quantize_block(kQwen7b, {}, block).has_value());
  EXPECT_FALSE(quantize_block(kQwen7b, one, std::span(block).first(100)).has_value());
  std::vector<const std::byte*> too_many(33, row.data());
  EXPECT_FALSE(quantize_block(kQwen7b, too_many, block).has_value());
  Int8Geometry bad = kQwen7b;
  bad.group_tokens = 0;
  EXPECT_FALSE(validate(bad).has_value());
  bad = kQwen7b;
  bad.head_dim = 0;
  EXPECT_FALSE(quantize_block(bad, one, block).has_value());
  std::byte* out[] = {row.data()};
  const std::uint32_t beyond[] = {32};
  EXPECT_FALSE(dequantize_block(kQwen7b, block, beyond, out).has_value());
  std::vector<std::byte> blocks(kQwen7b.blocks_bytes(33));  // two blocks
  EXPECT_FALSE(quantize_rows(kQwen7b, std::span(row).first(100), blocks).has_value());
  EXPECT_FALSE(quantize_rows(kQwen7b, row, blocks).has_value());  // 1 row needs 1 block
}

TEST(Int8Quantize, ConstantChannelsAndPartialBlocksRestoreExactly) {
  Int8Geometry g{2, 8, KvDtype::kBf16, 4};
  std::vector<float> x(7 * 2 * g.channels(), 1.5f);  // 7 rows: blocks of 4 and 3
  const std::vector<std::byte> rows = to_rows(g, x);
  EXPECT_EQ(round_trip(g, rows), rows);
}

TEST(Int8Quantize, DequantizeBlockRestoresSelectedRows) {
  const Int8Geometry g = kQwen7b;
  const std::vector<std::byte> rows = to_rows(g, normal_rows(g, 32, 3));
  std::vector<std::byte> blocks(g.blocks_bytes(32));
  ASSERT_TRUE(quantize_rows(g, rows, blocks).has_value());
  std::vector<std::byte> all(rows.size());
  ASSERT_TRUE(dequantize_rows(g, blocks, 32, all).has_value());
  std::vector<std::byte> two(2 * g.row_bytes());
  const std::uint32_t which[] = {17, 5};
  std::byte* out[] = {two.data(), two.data() + g.row_bytes()};
  ASSERT_TRUE(dequantize_block(g, blocks, which, out).has_value());
  EXPECT_EQ(std::memcmp(two.data(), all.data() + 17 * g.row_bytes(), g.row_bytes()), 0);
  EXPECT_EQ(std::memcmp(two.data() + g.row_bytes(), all.data() + 5 * g.row_bytes(), g.row_bytes()), 0);
}

// The scheme of quantize.hpp written plainly, one element at a time: float clamp to [0, 255]
// (NaN to 0), +0.5, truncation; x̂ = min + code · scale rounded by the scalar converters. The
// library's vectorized loops must give these bytes exactly. Inputs must hold no zeros (the order
// in which a range meets +0 and -0 is the library's own, documented in quantize.cpp).
struct ReferenceInt8 {
  static std::uint8_t encode(float x, float lo, float inv) {
    float v = (x - lo) * inv;
    v = v > 0.0f ? v : 0.0f;
    v = v < 255.0f ? v : 255.0f;
    return static_cast<std::uint8_t>(static_cast<std::int32_t>(v + 0.5f));
  }
  static void put(std::vector<std::byte>& out, std::size_t offset, float f) {
    std::memcpy(out.data() + offset, &f, sizeof f);
  }
  // Blocks of `values` (count rows of 2·H·D f32, already representable in g.dtype).
  static std::vector<std::byte> quantize(const Int8Geometry& g, const std::vector<float>& x) {
    const std::size_t c_n = g.channels();
    const std::size_t count = x.size() / (2 * c_n);
    std::vector<std::byte> out(g.blocks_bytes(count));
    for (std::size_t first = 0, b = 0; first < count; first += g.group_tokens, ++b) {
      const std::size_t n = std::min<std::size_t>(g.group_tokens, count - first);
      const std::size_t base = b * g.block_bytes();
      std::vector<float> lo(c_n), inv(c_n);
      for (std::size_t c = 0; c < c_n; ++c) {
        float l = x[first * 2 * c_n + c];
        float h = l;
        for (std::size_t r = 1; r < n; ++r) {
          const float v = x[(first + r) * 2 * c_n + c];
          l = v < l ? v : l;
          h = v > h ? v : h;
        }
        lo[c] = l;
        inv[c] = h - l > 0.0f ? 255.0f / (h - l) : 0.0f;
        put(out, base + 4 * c, (h - l) / 255.0f);
        put(out, base + 4 * (c_n + c), l);
      }
      for (std::size_t r = 0; r < n; ++r) {
        const float* row = &x[(first + r) * 2 * c_n];
        const std::size_t at = base + g.key_params_bytes() + r * g.int8_row_bytes();
        for (std::size_t c = 0; c < c_n; ++c) {
          out[at + 8 * g.num_kv_heads + c] = std::byte{encode(row[c], lo[c], inv[c])};
        }
        for (std::size_t h = 0; h < g.num_kv_heads; ++h) {
          const float* v = row + c_n + h * g.head_dim;
          float l = v[0];
          float hi = v[0];
          for (std::size_t d = 1; d < g.head_dim; ++d) {
            l = v[d] < l ? v[d] : l;
            hi = v[d] > hi ? v[d] : hi;
          }
          const float range = hi - l;
          const float i = range > 0.0f ? 255.0f / range : 0.0f;
          put(out, at + 4 * h, range / 255.0f);
          put(out, at + 4 * (g.num_kv_heads + h), l);
          for (std::size_t d = 0; d < g.head_dim; ++d) {
            out[at + 8 * g.num_kv_heads + c_n + h * g.head_dim + d] = std::byte{encode(v[d], l, i)};
          }
        }
      }
    }
    return out;
  }
  static float get(const std::vector<std::byte>& in, std::size_t offset) {
    float f;
    std::memcpy(&f, in.data() + offset, sizeof f);
    return f;
  }
  // Rows restored from `blocks`, as f32 values before the dtype rounding.
  static std::vector<float> restore(const Int8Geometry& g, const std::vector<std::byte>& blocks,
                                    std::size_t count) {
    const std::size_t c_n = g.channels();
    std::vector<float> x(count * 2 * c_n);
    for (std::size_t r = 0; r < count; ++r) {
      const std::size_t base = r / g.group_tokens * g.block_bytes();
      const std::size_t at = base + g.key_params_bytes() + r % g.group_tokens * g.int8_row_bytes();
      const auto code = [&](std::size_t i) {
        return static_cast<float>(std::to_integer<std::uint8_t>(blocks[at + 8 * g.num_kv_heads + i]));
      };
      for (std::size_t c = 0; c < c_n; ++c) {
        x[r * 2 * c_n + c] = get(blocks, base + 4 * (c_n + c)) + code(c) * get(blocks, base + 4 * c);
      }
      for (std::size_t c = 0; c < c_n; ++c) {
        const std::size_t h = c / g.head_dim;
        x[r * 2 * c_n + c_n + c] = get(blocks, at + 4 * (g.num_kv_heads + h)) +
                                   code(c_n + c) * get(blocks, at + 4 * h);
      }
    }
    return x;
  }
};

TEST(Int8Quantize, MatchesTheScalarDefinitionBitForBit) {
  struct Case {
    Int8Geometry g;
    std::size_t rows;
  };
  const Case cases[] = {{kQwen7b, 70},
                        {{3, 17, KvDtype::kF16, 5}, 23},
                        {{2, 40, KvDtype::kF32, 8}, 19},
                        {{1, 1, KvDtype::kBf16, 3}, 7}};
  for (const Case& c : cases) {
    const Int8Geometry& g = c.g;
    std::vector<float> x = heavy_tailed_rows(g, c.rows, 21);
    if (g.dtype == KvDtype::kF32) {
      // Edge ranges: a key channel and a value head whose range is so small that 255 / range
      // overflows to +inf, and a key channel whose range overflows to +inf.
      for (std::size_t r = 0; r < c.rows; ++r) {
        float* row = &x[r * 2 * g.channels()];
        row[1] = 1e-39f * static_cast<float>(1 + r % 3);
        row[2] = r % 2 == 0 ? -3e38f : 3e38f;
        for (std::size_t d = 0; d < g.head_dim; ++d) {
          row[g.channels() + d] = 2e-39f + 1e-45f * static_cast<float>(d % 4);
        }
      }
    }
    x = to_floats(g, to_rows(g, x));  // representable in the dtype
    for (float& v : x) v = v == 0.0f ? 1.0f : v;
    const std::vector<std::byte> rows = to_rows(g, x);
    std::vector<std::byte> blocks(g.blocks_bytes(c.rows));
    ASSERT_TRUE(quantize_rows(g, rows, blocks).has_value());
    const std::vector<std::byte> expected = ReferenceInt8::quantize(g, x);
    ASSERT_EQ(blocks.size(), expected.size());
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      ASSERT_EQ(blocks[i], expected[i]) << dtype_name(g.dtype) << " block byte " << i;
    }
    std::vector<std::byte> back(rows.size());
    ASSERT_TRUE(dequantize_rows(g, blocks, c.rows, back).has_value());
    EXPECT_EQ(back, to_rows(g, ReferenceInt8::restore(g, blocks, c.rows))) << dtype_name(g.dtype);
  }
}

// Clients write the T1 rows the daemon quantizes, NaN included. tests/fuzz (client_channel) found
// the NaN reaching a float -> int conversion (undefined behaviour); it now gets code 0, as in the
// scalar definition, in both the in-range and the tiny-range (inv = +inf) paths.
TEST(Int8Quantize, NanElementsGetTheScalarDefinitionsCodes) {
  const Int8Geometry g{2, 16, KvDtype::kF32, 4};
  std::vector<float> x = heavy_tailed_rows(g, 7, 5);
  for (std::size_t r = 0; r < 7; ++r) {
    float* row = &x[r * 2 * g.channels()];
    row[1] = 1e-39f * static_cast<float>(1 + r % 3);  // a tiny key range: inv = +inf
    if (r % 4 != 0) {  // never a block's first row, so the ranges stay those of the finite values
      row[0] = std::numeric_limits<float>::quiet_NaN();
      row[1] = std::numeric_limits<float>::quiet_NaN();
      row[g.channels() + 3] = std::numeric_limits<float>::quiet_NaN();  // a value, not its head's first
    }
  }
  for (float& v : x) v = v == 0.0f ? 1.0f : v;
  std::vector<std::byte> blocks(g.blocks_bytes(7));
  ASSERT_TRUE(quantize_rows(g, to_rows(g, x), blocks).has_value());
  EXPECT_EQ(blocks, ReferenceInt8::quantize(g, x));
}

// Half an ulp of the dtype at |v| (an upper bound), for the output rounding.
double half_ulp(KvDtype dtype, double v) {
  switch (dtype) {
    case KvDtype::kBf16: return std::fabs(v) * 0x1p-8 + 0x1p-133;
    case KvDtype::kF16: return std::fabs(v) * 0x1p-11 + 0x1p-25;
    case KvDtype::kF32: return std::fabs(v) * 0x1p-24 + 0x1p-149;
  }
  return 0.0;
}

TEST(Int8Quantize, EveryElementIsWithinHalfAStepOfItsRange) {
  for (KvDtype dtype : {KvDtype::kBf16, KvDtype::kF16, KvDtype::kF32}) {
    Int8Geometry g = kQwen7b;
    g.dtype = dtype;
    const std::size_t count = 70;  // blocks of 32, 32, 6
    const std::vector<std::byte> rows = to_rows(g, heavy_tailed_rows(g, count, 11));
    const std::vector<float> x = to_floats(g, rows);
    const std::vector<float> y = to_floats(g, round_trip(g, rows));
    const std::size_t c2 = 2 * g.channels();
    auto check = [&](std::size_t at, double lo, double hi) {
      const double step = (hi - lo) / 255.0;
      const double bound = step * (0.5 + 1e-3) + 4e-7 * std::max(std::fabs(lo), std::fabs(hi)) +
                           half_ulp(dtype, y[at]);
      ASSERT_LE(std::fabs(static_cast<double>(y[at]) - x[at]), bound)
          << dtype_name(dtype) << " element " << at;
    };
    for (std::size_t first = 0; first < count; first += 32) {
      const std::size_t last = std::min(count, first + 32);
      for (std::size_t c = 0; c < g.channels(); ++c) {  // keys: per channel over the block
        double lo = INFINITY, hi = -INFINITY;
        for (std::size_t r = first; r < last; ++r) {
          lo = std::min(lo, double{x[r * c2 + c]});
          hi = std::max(hi, double{x[r * c2 + c]});
        }
        for (std::size_t r = first; r < last; ++r) check(r * c2 + c, lo, hi);
      }
    }
    for (std::size_t r = 0; r < count; ++r) {  // values: per token and head
      for (std::size_t h = 0; h < g.num_kv_heads; ++h) {
        const std::size_t base = r * c2 + g.channels() + h * g.head_dim;
        const auto [lo, hi] = std::minmax_element(&x[base], &x[base] + g.head_dim);
        for (std::size_t d = 0; d < g.head_dim; ++d) check(base + d, *lo, *hi);
      }
    }
  }
}

// The authors' T2 (research/seed-algorithms.md §4): one min-max grid over the whole K (or V)
// tensor of all heads and tokens, for contrast in the report.
std::vector<float> per_tensor_fake_quant(const Int8Geometry& g, std::vector<float> x) {
  const std::size_t c = g.channels();
  for (std::size_t kv = 0; kv < 2; ++kv) {
    float lo = INFINITY, hi = -INFINITY;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if ((i / c) % 2 == kv) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
      }
    }
    const float step = (hi - lo) / 255.0f;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if ((i / c) % 2 == kv && step > 0) x[i] = lo + std::round((x[i] - lo) / step) * step;
    }
  }
  return x;
}

void report(const char* name, const QuantErrorReport& r) {
  ::testing::Test::RecordProperty(std::string(name) + "_keys_max_rel", std::to_string(r.keys.max_rel));
  ::testing::Test::RecordProperty(std::string(name) + "_keys_mean_rel", std::to_string(r.keys.mean_rel));
  ::testing::Test::RecordProperty(std::string(name) + "_values_max_rel", std::to_string(r.values.max_rel));
  ::testing::Test::RecordProperty(std::string(name) + "_values_mean_rel", std::to_string(r.values.mean_rel));
  std::printf("[ int8 error ] %-26s keys max_rel %.5f mean_rel %.5f | values max_rel %.5f mean_rel %.5f\n",
              name, r.keys.max_rel, r.keys.mean_rel, r.values.max_rel, r.values.mean_rel);
}

struct Case {
  const char* name;
  bool heavy;
  KvDtype dtype;
  double max_rel_bound;   // on keys and values
  double mean_rel_bound;
};

TEST(Int8Quantize, RoundTripErrorOnNormalAndHeavyTailedInputs) {
  // 1,024 tokens of a 4-KV-head, head_dim-128 layer (R1-Distill-Qwen-7B), G = 32.
  const Case cases[] = {
      {"normal_bf16", false, KvDtype::kBf16, 0.02, 0.01},
      {"normal_f32", false, KvDtype::kF32, 0.02, 0.01},
      {"heavy_tailed_bf16", true, KvDtype::kBf16, 0.08, 0.02},
      {"heavy_tailed_f32", true, KvDtype::kF32, 0.08, 0.02},
  };
  for (const Case& c : cases) {
    Int8Geometry g = kQwen7b;
    g.dtype = c.dtype;
    const std::vector<float> x = c.heavy ? heavy_tailed_rows(g, 1024, 5) : normal_rows(g, 1024, 5);
    const std::vector<std::byte> rows = to_rows(g, x);
    auto r = measure_error(g, rows, round_trip(g, rows));
    ASSERT_TRUE(r.has_value());
    report(c.name, *r);
    EXPECT_EQ(r->keys.vectors, 1024u * 4u);
    EXPECT_LT(r->keys.max_rel, c.max_rel_bound) << c.name;
    EXPECT_LT(r->values.max_rel, c.max_rel_bound) << c.name;
    EXPECT_LT(r->keys.mean_rel, c.mean_rel_bound) << c.name;
    EXPECT_LT(r->values.mean_rel, c.mean_rel_bound) << c.name;
    if (c.heavy && c.dtype == KvDtype::kF32) {
      const std::vector<std::byte> naive = to_rows(g, per_tensor_fake_quant(g, to_floats(g, rows)));
      auto t = measure_error(g, rows, naive);
      ASSERT_TRUE(t.has_value());
      report("heavy_tailed_per_tensor", *t);
      EXPECT_GT(t->keys.mean_rel, 3 * r->keys.mean_rel);  // why the paper's T2 collapsed
    }
  }
}

}  // namespace
}  // namespace kvtier::kernels
