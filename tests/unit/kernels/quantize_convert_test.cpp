// f16 / bf16 <-> f32 conversion: exhaustive round trips and round-to-nearest-even at every
// midpoint between neighbouring finite values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kvtier/kernels/quantize.hpp"

namespace kvtier::kernels {
namespace {

bool is_nan_f16(std::uint16_t h) { return (h & 0x7C00u) == 0x7C00u && (h & 0x3FFu) != 0; }
bool is_nan_bf16(std::uint16_t b) { return (b & 0x7F80u) == 0x7F80u && (b & 0x7Fu) != 0; }

// The f16 value by its definition: subnormals m·2^-24, normals (1 + m/1024)·2^(e − 15).
double f16_value(std::uint16_t h) {
  const int e = (h >> 10) & 0x1F;
  const int m = h & 0x3FF;
  const double sign = (h & 0x8000u) != 0 ? -1.0 : 1.0;
  if (e == 0) return sign * std::ldexp(m, -24);
  if (e == 31) return m == 0 ? sign * INFINITY : NAN;
  return sign * std::ldexp(1024 + m, e - 25);
}

TEST(HalfConvert, F16ToF32MatchesTheDefinitionForEveryPattern) {
  for (std::uint32_t h = 0; h <= 0xFFFFu; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    const float f = f16_to_f32(bits);
    if (is_nan_f16(bits)) {
      ASSERT_TRUE(std::isnan(f)) << h;
    } else {
      ASSERT_EQ(static_cast<double>(f), f16_value(bits)) << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000u) != 0) << h;
    }
  }
}

TEST(HalfConvert, F16RoundTripsThroughF32ForEveryPattern) {
  for (std::uint32_t h = 0; h <= 0xFFFFu; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    const std::uint16_t back = f32_to_f16(f16_to_f32(bits));
    if (is_nan_f16(bits)) {
      ASSERT_TRUE(is_nan_f16(back)) << h;
    } else {
      ASSERT_EQ(back, bits) << h;
    }
  }
}

TEST(HalfConvert, F32ToF16RoundsMidpointsToEvenAndNeighboursToTheNearer) {
  // Every pair of neighbouring positive finite f16 values a < b (including max → inf).
  for (std::uint32_t h = 0; h < 0x7C00u; ++h) {
    const auto a = static_cast<std::uint16_t>(h);
    const auto b = static_cast<std::uint16_t>(h + 1);
    const double mid = h + 1 == 0x7C00u ? 65520.0 : (f16_value(a) + f16_value(b)) / 2;
    const auto m = static_cast<float>(mid);  // exact: f16 midpoints need 12 significant bits
    ASSERT_EQ(static_cast<double>(m), mid);
    const std::uint16_t even = (a & 1u) == 0 ? a : b;
    ASSERT_EQ(f32_to_f16(m), even) << h;
    ASSERT_EQ(f32_to_f16(std::nextafter(m, 0.0f)), a) << h;
    ASSERT_EQ(f32_to_f16(std::nextafter(m, INFINITY)), b) << h;
    ASSERT_EQ(f32_to_f16(-m), static_cast<std::uint16_t>(even | 0x8000u)) << h;
  }
}

TEST(HalfConvert, F32ToF16HandlesSpecialValues) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3C00u);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFFu);
  EXPECT_EQ(f32_to_f16(1e10f), 0x7C00u);
  EXPECT_EQ(f32_to_f16(-INFINITY), 0xFC00u);
  EXPECT_TRUE(is_nan_f16(f32_to_f16(NAN)));
  EXPECT_EQ(f32_to_f16(1e-10f), 0x0000u);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000u);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001u);
}

TEST(Bf16Convert, RoundTripsThroughF32ForEveryPattern) {
  for (std::uint32_t b = 0; b <= 0xFFFFu; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float f = bf16_to_f32(bits);
    if (is_nan_bf16(bits)) {
      ASSERT_TRUE(std::isnan(f)) << b;
      ASSERT_TRUE(is_nan_bf16(f32_to_bf16(f))) << b;
    } else {
      ASSERT_EQ(f32_to_bf16(f), bits) << b;
    }
  }
}

TEST(Bf16Convert, RoundsMidpointsToEven) {
  for (std::uint32_t b = 0; b < 0x7F80u; ++b) {
    const auto lo = static_cast<std::uint16_t>(b);
    // The midpoint between lo and lo + 1 is lo's f32 pattern with bit 15 set.
    const float mid = std::bit_cast<float>((std::uint32_t{lo} << 16) | 0x8000u);
    const std::uint16_t even = (lo & 1u) == 0 ? lo : static_cast<std::uint16_t>(lo + 1);
    ASSERT_EQ(f32_to_bf16(mid), even) << b;
    ASSERT_EQ(f32_to_bf16(std::nextafter(mid, 0.0f)), lo) << b;
    ASSERT_EQ(f32_to_bf16(std::nextafter(mid, INFINITY)), lo + 1) << b;
  }
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7F80u);
  EXPECT_EQ(f32_to_bf16(3.4e38f), 0x7F80u);  // above bf16 max rounds to inf
}

TEST(BulkConvert, MatchesTheScalarFunctions) {
  const std::vector<float> values = {0.0f, -1.5f, 3.14159f, 65504.0f, 1e-6f, -2e5f};
  for (KvDtype dtype : {KvDtype::kF16, KvDtype::kBf16, KvDtype::kF32}) {
    std::vector<std::byte> bytes(values.size() * dtype_bytes(dtype));
    from_f32(dtype, values.data(), bytes.data(), values.size());
    std::vector<float> back(values.size());
    to_f32(dtype, bytes.data(), back.data(), values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
      const float expected = dtype == KvDtype::kF16    ? f16_to_f32(f32_to_f16(values[i]))
                             : dtype == KvDtype::kBf16 ? bf16_to_f32(f32_to_bf16(values[i]))
                                                       : values[i];
      EXPECT_EQ(back[i], expected) << dtype_name(dtype) << " " << i;
    }
  }
}

}  // namespace
}  // namespace kvtier::kernels
