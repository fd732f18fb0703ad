// Int8 tier: every instruction set's loops (kernels/cpu/quantize_loops.hpp) that this CPU runs
// write exactly the bytes of the scalar loops: blocks, restored rows and bulk conversions, for
// f16, bf16 and f32, lengths with vector tails, and inputs full of ±0, NaN (any payload and sign),
// ±inf, subnormals and huge values. Together with Int8Quantize.MatchesTheScalarDefinitionBitForBit
// (the default set against the plain definition) this ties every set to the definition.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kvtier/kernels/quantize.hpp"
#include "quantize_blocks.hpp"
#include "quantize_loops.hpp"

namespace kvtier::kernels {
namespace {

using detail::Int8Loops;

std::vector<const Int8Loops*> simd_tables() {
  std::vector<const Int8Loops*> tables;
  for (Int8Isa isa : {Int8Isa::kAvx2, Int8Isa::kAvx512}) {
    if (const Int8Loops* loops = detail::int8_loops_for(isa)) tables.push_back(loops);
  }
  if (tables.empty()) std::printf("[ int8 isa ] no SIMD set on this CPU or build: scalar only\n");
  return tables;
}

// One f32 bit pattern: with probability `special` one of ±0, NaN, ±inf, subnormal, huge or
// random bits; otherwise a normal value of a scale that varies by channel.
std::uint32_t f32_bits(std::mt19937_64& rng, double special, float scale) {
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  const auto sign = static_cast<std::uint32_t>(rng() & 1u) << 31;
  if (u01(rng) >= special) return std::bit_cast<std::uint32_t>(n01(rng) * scale);
  switch (rng() % 6) {
    case 0: return sign;                                                     // ±0
    case 1: return sign | 0x7F800000u | (1u + static_cast<std::uint32_t>(rng() % 0x7FFFFFu));  // NaN
    case 2: return sign | 0x7F800000u;                                       // ±inf
    case 3: return sign | static_cast<std::uint32_t>(1u + rng() % 0x7FFFFFu);  // subnormal
    case 4: return sign | (0x7F000000u + static_cast<std::uint32_t>(rng() % 0x7FFFFFu));  // huge
    default: return static_cast<std::uint32_t>(rng());
  }
}

// `count` rows of g.dtype built from f32_bits; f16 gets raw half patterns for its specials.
std::vector<std::byte> adversarial_rows(const Int8Geometry& g, std::size_t count, double special,
                                        std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  const std::size_t per_row = 2 * g.channels();
  std::vector<std::byte> rows(count * g.row_bytes());
  for (std::size_t i = 0; i < count * per_row; ++i) {
    const float scale = i % per_row % 7 == 0 ? 300.0f : 1.0f;
    std::uint32_t bits = f32_bits(rng, special, scale);
    if (g.dtype == KvDtype::kF32) {
      std::memcpy(rows.data() + 4 * i, &bits, 4);
      continue;
    }
    std::uint16_t half;
    if (g.dtype == KvDtype::kBf16) {
      half = static_cast<std::uint16_t>(bits >> 16);
    } else if (u01(rng) < special) {
      half = static_cast<std::uint16_t>(rng());  // any pattern: NaNs, infs, subnormals, zeros
    } else {
      half = f32_to_f16(std::bit_cast<float>(bits));
    }
    std::memcpy(rows.data() + 2 * i, &half, 2);
  }
  return rows;
}

std::vector<Int8Geometry> geometries() {
  std::vector<Int8Geometry> out;
  const std::uint32_t shapes[][3] = {{4, 128, 32}, {3, 17, 5}, {2, 40, 8}, {1, 1, 3},  {1, 16, 4},
                                     {2, 33, 7},   {5, 24, 32}, {1, 31, 1}, {2, 64, 9}, {1, 200, 6}};
  for (const auto& s : shapes) {
    for (KvDtype dtype : {KvDtype::kF16, KvDtype::kBf16, KvDtype::kF32}) {
      out.push_back({s[0], s[1], dtype, s[2]});
    }
  }
  return out;
}

// "" when equal, else the first differing byte (gtest would print whole buffers).
std::string difference(const std::vector<std::byte>& got, const std::vector<std::byte>& want) {
  if (got.size() != want.size()) return "sizes differ";
  const auto at = std::mismatch(got.begin(), got.end(), want.begin());
  if (at.first == got.end()) return "";
  return "byte " + std::to_string(at.first - got.begin()) + ": " +
         std::to_string(std::to_integer<unsigned>(*at.first)) + " vs " +
         std::to_string(std::to_integer<unsigned>(*at.second));
}

std::string describe(const Int8Geometry& g, const Int8Loops& loops, double special) {
  return std::string(int8_isa_name(loops.isa)) + " " + std::string(dtype_name(g.dtype)) + " H=" +
         std::to_string(g.num_kv_heads) + " D=" + std::to_string(g.head_dim) +
         " G=" + std::to_string(g.group_tokens) + " special=" + std::to_string(special);
}

TEST(Int8Isa, DefaultIsTheWidestAvailableSet) {
  EXPECT_TRUE(int8_isa_available(Int8Isa::kScalar));
  const Int8Isa expected = int8_isa_available(Int8Isa::kAvx512) ? Int8Isa::kAvx512
                           : int8_isa_available(Int8Isa::kAvx2) ? Int8Isa::kAvx2
                                                                : Int8Isa::kScalar;
  EXPECT_EQ(int8_isa(), expected) << int8_isa_name(int8_isa());
  std::printf("[ int8 isa ] in use: %s\n", std::string(int8_isa_name(int8_isa())).c_str());
}

TEST(Int8Isa, EverySetWritesTheScalarBlocksAndRestoredRows) {
  const Int8Loops& scalar = detail::scalar_int8_loops();
  for (const Int8Loops* simd : simd_tables()) {
    std::uint64_t seed = 1;
    for (const Int8Geometry& g : geometries()) {
      for (double special : {0.0, 0.02, 0.3}) {
        const std::size_t count = 2 * g.group_tokens + 3;  // a partial last block
        const std::vector<std::byte> rows = adversarial_rows(g, count, special, ++seed);
        std::vector<std::byte> expected(g.blocks_bytes(count)), got(expected.size());
        detail::quantize_rows_checked(g, rows, expected.data(), scalar);
        detail::quantize_rows_checked(g, rows, got.data(), *simd);
        ASSERT_EQ(difference(got, expected), "") << "blocks, " << describe(g, *simd, special);

        std::vector<std::byte> back_expected(rows.size()), back(rows.size());
        detail::dequantize_rows_checked(g, expected.data(), count, back_expected.data(), scalar);
        detail::dequantize_rows_checked(g, expected.data(), count, back.data(), *simd);
        ASSERT_EQ(difference(back, back_expected), "") << "rows, " << describe(g, *simd, special);
      }
    }
  }
}

// Blocks are pool bytes: dequantize must agree on any parameters, NaN and ±inf scales included.
TEST(Int8Isa, EverySetRestoresArbitraryBlockBytesAsTheScalarLoops) {
  const Int8Loops& scalar = detail::scalar_int8_loops();
  for (const Int8Loops* simd : simd_tables()) {
    std::mt19937_64 rng(7);
    for (const Int8Geometry& g : geometries()) {
      std::vector<std::byte> block(g.block_bytes());
      for (std::size_t i = 0; i < block.size(); i += 4) {  // f32 patterns, random codes alike
        const std::uint32_t bits = f32_bits(rng, 0.2, 10.0f);
        std::memcpy(block.data() + i, &bits, std::min<std::size_t>(4, block.size() - i));
      }
      const std::uint32_t which[] = {g.group_tokens - 1, 0, g.group_tokens / 2};
      std::vector<std::byte> expected(3 * g.row_bytes()), got(expected.size());
      std::byte* expected_out[] = {expected.data(), expected.data() + g.row_bytes(),
                                   expected.data() + 2 * g.row_bytes()};
      std::byte* got_out[] = {got.data(), got.data() + g.row_bytes(), got.data() + 2 * g.row_bytes()};
      detail::dequantize_checked(g, block.data(), which, expected_out, scalar);
      detail::dequantize_checked(g, block.data(), which, got_out, *simd);
      ASSERT_EQ(difference(got, expected), "") << describe(g, *simd, 0.2);
    }
  }
}

TEST(Int8Isa, EverySetConvertsLikeTheScalarLoops) {
  const Int8Loops& scalar = detail::scalar_int8_loops();
  // Every 16-bit pattern, then lengths 0..40 for the tails.
  std::vector<std::uint16_t> halves(65536 + 7);
  for (std::size_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<std::uint16_t>(i * 40503u);
  std::mt19937_64 rng(3);
  std::vector<std::uint32_t> floats(65536 + 9);
  for (std::uint32_t& f : floats) f = f32_bits(rng, 0.3, 1e4f);
  // Halfway cases and the edges of the f16 ranges (rounding, subnormal, overflow).
  for (std::uint32_t i = 0; i < 4096; ++i) floats[i] = 0x33000000u + i * 0x00081000u + (i & 1u) * 0x1000u;
  std::vector<float> values(floats.size());
  std::memcpy(values.data(), floats.data(), floats.size() * sizeof(float));
  for (const Int8Loops* simd : simd_tables()) {
    for (KvDtype dtype : {KvDtype::kF16, KvDtype::kBf16, KvDtype::kF32}) {
      const auto* src = reinterpret_cast<const std::byte*>(dtype == KvDtype::kF32
                                                               ? static_cast<const void*>(values.data())
                                                               : static_cast<const void*>(halves.data()));
      const std::size_t total = dtype == KvDtype::kF32 ? floats.size() : halves.size();
      for (std::size_t n : {total, std::size_t{0}, std::size_t{1}, std::size_t{15}, std::size_t{17},
                            std::size_t{40}}) {
        std::vector<float> want(n), got(n);
        scalar.of(dtype).to_f32(src, want.data(), n);
        simd->of(dtype).to_f32(src, got.data(), n);
        // Bytes, not floats (NaN payloads must match too); empty vectors may hold no buffer.
        ASSERT_TRUE(n == 0 || std::memcmp(want.data(), got.data(), n * sizeof(float)) == 0)
            << int8_isa_name(simd->isa) << " to_f32 " << dtype_name(dtype) << " n=" << n;
        const std::size_t m = std::min(n, values.size());
        std::vector<std::byte> out_want(m * dtype_bytes(dtype)), out_got(out_want.size());
        scalar.of(dtype).from_f32(values.data(), out_want.data(), m);
        simd->of(dtype).from_f32(values.data(), out_got.data(), m);
        ASSERT_EQ(difference(out_got, out_want), "") << int8_isa_name(simd->isa) << " from_f32 "
                                     << dtype_name(dtype) << " n=" << m;
      }
    }
  }
}

}  // namespace
}  // namespace kvtier::kernels
