// Private to the int8 tier: the block code of quantize.cpp behind the checked public API of
// quantize.hpp (argument checks and errors: quantize_support.cpp), and the element helpers of
// the scalar loops, which the SIMD loops also use for their tails (dtype loads and stores, the
// code of one element). Preconditions, not checked here: validate(g) passed; spans and pointers are as
// large as the public functions require.
// Thread-safety: pure functions; concurrent calls must not share destinations.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "kvtier/kernels/quantize.hpp"

namespace kvtier::kernels::detail {

struct Int8Loops;  // quantize_loops.hpp

// The entry points' loops with the table `loops` (the public functions pass
// default_int8_loops()). quantize_block: rows.size() in 1..group_tokens; block holds block_bytes.
void quantize_checked(const Int8Geometry& g, std::span<const std::byte* const> rows,
                      std::byte* block, const Int8Loops& loops);
// dequantize_block: every which[i] < group_tokens; which and out of equal size.
void dequantize_checked(const Int8Geometry& g, const std::byte* block,
                        std::span<const std::uint32_t> which, std::span<std::byte* const> out,
                        const Int8Loops& loops);
// quantize_rows: src whole rows; dst holds blocks_bytes(rows).
void quantize_rows_checked(const Int8Geometry& g, std::span<const std::byte> src, std::byte* dst,
                           const Int8Loops& loops);
// dequantize_rows: blocks of `count` rows; dst holds count rows.
void dequantize_rows_checked(const Int8Geometry& g, const std::byte* blocks, std::size_t count,
                             std::byte* dst, const Int8Loops& loops);

// ---- element helpers of the loops (quantize.cpp) ----

inline constexpr float kLevels = 255.0f;

// f32_to_bf16 / f32_to_f16 without early returns: every path computed, the right one selected.
inline std::uint16_t bf16_select(float f) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const std::uint32_t nan = (u >> 16) | 0x0040u;
  return static_cast<std::uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? nan : rounded);
}

inline std::uint16_t f16_select(float f) noexcept {
  const std::uint32_t all = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (all >> 16) & 0x8000u;
  const std::uint32_t u = all & 0x7FFFFFFFu;
  const std::uint32_t big = u > 0x7F800000u ? 0x7E00u : 0x7C00u;
  const std::uint32_t tiny = std::bit_cast<std::uint32_t>(std::bit_cast<float>(u) + 0.5f) - 0x3F000000u;
  const std::uint32_t normal = (u + 0xC8000FFFu + ((u >> 13) & 1u)) >> 13;
  const std::uint32_t out = u >= 0x47800000u ? big : u < 0x38800000u ? tiny : normal;
  return static_cast<std::uint16_t>(out | sign);
}

inline std::uint16_t load_u16(const std::byte* p) noexcept {
  std::uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return bits;
}

// Element i of a row in dtype D, as f32 (exact).
template <KvDtype D>
inline float load(const std::byte* src, std::size_t i) noexcept {
  if constexpr (D == KvDtype::kF32) {
    float f;
    std::memcpy(&f, src + 4 * i, sizeof f);
    return f;
  } else if constexpr (D == KvDtype::kBf16) {
    return std::bit_cast<float>(std::uint32_t{load_u16(src + 2 * i)} << 16);  // a shift
  } else {
    return f16_to_f32(load_u16(src + 2 * i));
  }
}

// Element i of a row in dtype D from f32 (round to nearest even, as f32_to_bf16 / f32_to_f16).
// kNoNaN: the caller knows x is not NaN, so bf16 needs only the rounding (the NaN select of
// bf16_select would pick the rounded value anyway).
template <KvDtype D, bool kNoNaN = false>
inline void store(std::byte* dst, std::size_t i, float x) noexcept {
  if constexpr (D == KvDtype::kF32) {
    std::memcpy(dst + 4 * i, &x, sizeof x);
  } else if constexpr (D == KvDtype::kBf16 && kNoNaN) {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
    const auto bits = static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    std::memcpy(dst + 2 * i, &bits, sizeof bits);
  } else {
    const std::uint16_t bits = D == KvDtype::kBf16 ? bf16_select(x) : f16_select(x);
    std::memcpy(dst + 2 * i, &bits, sizeof bits);
  }
}

// round((x − lo)·inv) clamped to 0..255, half up; NaN gives 0. Written as: v = max(v, 0) (also
// NaN → 0), v = min(v, 255) (also +inf), +0.5, truncate. Clamping in float before the conversion
// keeps it defined for every input (a float → int conversion out of range, +inf or v >= 2^31, is
// undefined behaviour; tests/fuzz client_channel found a client's rows reaching it) and still
// vectorizes to max/min/add/cvt.
inline std::uint8_t encode(float x, float lo, float inv_scale) noexcept {
  float v = (x - lo) * inv_scale;
  v = v > 0.0f ? v : 0.0f;
  v = v < 255.0f ? v : 255.0f;
  return static_cast<std::uint8_t>(static_cast<std::int32_t>(v + 0.5f));
}

inline bool is_finite(float x) noexcept {
  return (std::bit_cast<std::uint32_t>(x) & 0x7F800000u) != 0x7F800000u;
}

// encode() of an x from the very values whose range [lo, hi] gave inv (or of a NaN among them),
// when inv is finite. Then x − lo lies in [0, hi − lo] (rounding is monotone), v = (x − lo)·inv
// in [0, 255·(1 + 2^-24)²], and v + 0.5 truncates into 0..255: the clamps never bite. Only a NaN
// (a NaN element of the rows, which clients write) needs one: t = max(t, 0) turns it into 0,
// encode()'s code for NaN, before the conversion, for which a NaN is undefined behaviour (tests/fuzz
// client_channel). Only inv = +inf (a range below 255 / FLT_MAX) needs encode(). Vectorizes to
// sub/mul/add/max/cvt/narrow: GCC turns the selects of encode() into byte-mask chains.
inline std::uint8_t encode_in_range(float x, float lo, float inv_scale) noexcept {
  const float v = (x - lo) * inv_scale;
  const float t = v + 0.5f;
  return static_cast<std::uint8_t>(static_cast<std::int32_t>(t >= 0.0f ? t : 0.0f));
}

}  // namespace kvtier::kernels::detail
