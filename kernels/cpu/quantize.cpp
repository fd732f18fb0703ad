// CPU reference of the int8 tier: bulk dtype conversion, and one block = per-channel key ranges
// over its rows + per-token, per-head value ranges (see quantize.hpp for the scheme and layout).
//
// Speed: every hot loop runs over chunks of kLanes elements with a fixed trip count and no
// branches (selects only), which GCC and Clang vectorize at -O2 without -ffast-math; min/max are
// kept per lane and reduced once, so no floating-point reassociation is needed. Tails are scalar.
#include "kvtier/kernels/quantize.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace kvtier::kernels {
namespace {

constexpr std::size_t kLanes = 16;
constexpr float kLevels = 255.0f;

inline float bf16_bits_to_f32(std::uint16_t b) noexcept {
  return std::bit_cast<float>(std::uint32_t{b} << 16);
}

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

// Branch-free so the loops vectorize; NaN maps to code 0 instead of an undefined conversion.
inline std::uint8_t encode(float x, float lo, float inv_scale) noexcept {
  float v = (x - lo) * inv_scale;
  v = v > 0.0f ? v : 0.0f;
  v = v < kLevels ? v : kLevels;
  return static_cast<std::uint8_t>(static_cast<std::int32_t>(v + 0.5f));
}

// lo[i] = min(lo[i], x[i]), hi[i] = max(hi[i], x[i]) for i < n.
void widen_range(const float* __restrict x, std::size_t n, float* __restrict lo,
                 float* __restrict hi) noexcept {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (std::size_t k = 0; k < kLanes; ++k) {
      const float v = x[i + k];
      lo[i + k] = v < lo[i + k] ? v : lo[i + k];
      hi[i + k] = v > hi[i + k] ? v : hi[i + k];
    }
  }
  for (; i < n; ++i) {
    lo[i] = x[i] < lo[i] ? x[i] : lo[i];
    hi[i] = x[i] > hi[i] ? x[i] : hi[i];
  }
}

// Minimum and maximum of x[0..n), n >= 1, via per-lane ranges.
void range_of(const float* x, std::size_t n, float& lo, float& hi) noexcept {
  lo = x[0];
  hi = x[0];
  std::size_t i = 0;
  if (n >= kLanes) {
    float lanes_lo[kLanes];
    float lanes_hi[kLanes];
    std::copy_n(x, kLanes, lanes_lo);
    std::copy_n(x, kLanes, lanes_hi);
    for (i = kLanes; i + kLanes <= n; i += kLanes) widen_range(x + i, kLanes, lanes_lo, lanes_hi);
    for (std::size_t k = 0; k < kLanes; ++k) {
      lo = lanes_lo[k] < lo ? lanes_lo[k] : lo;
      hi = lanes_hi[k] > hi ? lanes_hi[k] : hi;
    }
  }
  for (; i < n; ++i) {
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
  }
}

void encode_n(const float* __restrict x, const float* __restrict lo,
              const float* __restrict inv, std::uint8_t* __restrict codes, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (std::size_t k = 0; k < kLanes; ++k) codes[i + k] = encode(x[i + k], lo[i + k], inv[i + k]);
  }
  for (; i < n; ++i) codes[i] = encode(x[i], lo[i], inv[i]);
}

void encode_n(const float* __restrict x, float lo, float inv, std::uint8_t* __restrict codes,
              std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (std::size_t k = 0; k < kLanes; ++k) codes[i + k] = encode(x[i + k], lo, inv);
  }
  for (; i < n; ++i) codes[i] = encode(x[i], lo, inv);
}

// x[i] = lo[i] + codes[i] · scale[i].
void decode_n(const std::uint8_t* __restrict codes, const float* __restrict lo,
              const float* __restrict scale, float* __restrict x, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (std::size_t k = 0; k < kLanes; ++k) {
      x[i + k] = lo[i + k] + static_cast<float>(codes[i + k]) * scale[i + k];
    }
  }
  for (; i < n; ++i) x[i] = lo[i] + static_cast<float>(codes[i]) * scale[i];
}

void decode_n(const std::uint8_t* __restrict codes, float lo, float scale, float* __restrict x,
              std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (std::size_t k = 0; k < kLanes; ++k) x[i + k] = lo + static_cast<float>(codes[i + k]) * scale;
  }
  for (; i < n; ++i) x[i] = lo + static_cast<float>(codes[i]) * scale;
}

Status check_block(const Int8Geometry& g, std::size_t block_size) {
  if (auto status = validate(g); !status) return status;
  if (block_size < g.block_bytes()) {
    return make_error(Errc::kInvalidArgument,
                      "int8 block: " + std::to_string(block_size) + " bytes, need " +
                          std::to_string(g.block_bytes()));
  }
  return {};
}

}  // namespace

void to_f32(KvDtype dtype, const std::byte* src, float* dst, std::size_t n) noexcept {
  if (dtype == KvDtype::kF32) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  const bool half = dtype == KvDtype::kF16;
  std::size_t i = 0;
  std::uint16_t bits[kLanes];
  for (; i + kLanes <= n; i += kLanes) {
    std::memcpy(bits, src + 2 * i, sizeof bits);
    if (half) {
      for (std::size_t k = 0; k < kLanes; ++k) dst[i + k] = f16_to_f32(bits[k]);
    } else {
      for (std::size_t k = 0; k < kLanes; ++k) dst[i + k] = bf16_bits_to_f32(bits[k]);
    }
  }
  for (; i < n; ++i) {
    std::memcpy(bits, src + 2 * i, 2);
    dst[i] = half ? f16_to_f32(bits[0]) : bf16_bits_to_f32(bits[0]);
  }
}

void from_f32(KvDtype dtype, const float* src, std::byte* dst, std::size_t n) noexcept {
  if (dtype == KvDtype::kF32) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  const bool half = dtype == KvDtype::kF16;
  std::size_t i = 0;
  std::uint16_t bits[kLanes];
  for (; i + kLanes <= n; i += kLanes) {
    if (half) {
      for (std::size_t k = 0; k < kLanes; ++k) bits[k] = f16_select(src[i + k]);
    } else {
      for (std::size_t k = 0; k < kLanes; ++k) bits[k] = bf16_select(src[i + k]);
    }
    std::memcpy(dst + 2 * i, bits, sizeof bits);
  }
  for (; i < n; ++i) {
    bits[0] = half ? f16_select(src[i]) : bf16_select(src[i]);
    std::memcpy(dst + 2 * i, bits, 2);
  }
}

Status quantize_block(const Int8Geometry& g, std::span<const std::byte* const> rows,
                      std::span<std::byte> block) {
  if (auto status = check_block(g, block.size()); !status) return status;
  const std::size_t count = rows.size();
  if (count == 0 || count > g.group_tokens) {
    return make_error(Errc::kInvalidArgument, "int8 block: " + std::to_string(count) +
                                                  " rows, need 1.." +
                                                  std::to_string(g.group_tokens));
  }
  const std::size_t heads = g.num_kv_heads;
  const std::size_t dim = g.head_dim;
  const std::size_t channels = g.channels();
  const std::size_t elem = dtype_bytes(g.dtype);
  const std::size_t row_stride = g.int8_row_bytes();
  std::byte* const params = block.data();
  std::byte* const first_row = block.data() + g.key_params_bytes();
  auto codes_of = [&](std::size_t r) {
    return reinterpret_cast<std::uint8_t*>(first_row + r * row_stride + 8 * heads);
  };

  // Keys: all rows to f32 ([r][h][d]), per-channel ranges over the rows, then codes.
  std::vector<float> x(count * channels);
  std::vector<float> lo(channels), hi(channels), scale(channels), inv(channels);
  for (std::size_t r = 0; r < count; ++r) to_f32(g.dtype, rows[r], &x[r * channels], channels);
  std::copy_n(x.data(), channels, lo.data());
  std::copy_n(x.data(), channels, hi.data());
  for (std::size_t r = 1; r < count; ++r) widen_range(&x[r * channels], channels, lo.data(), hi.data());
  for (std::size_t c = 0; c < channels; ++c) {
    const float range = hi[c] - lo[c];
    scale[c] = range / kLevels;
    inv[c] = range > 0.0f ? kLevels / range : 0.0f;
  }
  std::memset(params, 0, g.key_params_bytes());
  std::memcpy(params, scale.data(), channels * sizeof(float));
  std::memcpy(params + channels * sizeof(float), lo.data(), channels * sizeof(float));
  for (std::size_t r = 0; r < count; ++r) {
    std::memset(first_row + r * row_stride, 0, row_stride);
    encode_n(&x[r * channels], lo.data(), inv.data(), codes_of(r), channels);
  }

  // Values: per token and head over head_dim.
  for (std::size_t r = 0; r < count; ++r) {
    std::byte* row = first_row + r * row_stride;
    to_f32(g.dtype, rows[r] + channels * elem, x.data(), channels);
    std::uint8_t* codes = codes_of(r) + channels;
    for (std::size_t h = 0; h < heads; ++h) {
      const float* v = &x[h * dim];
      float v_lo;
      float v_hi;
      range_of(v, dim, v_lo, v_hi);
      const float range = v_hi - v_lo;
      const float v_scale = range / kLevels;
      const float v_inv = range > 0.0f ? kLevels / range : 0.0f;
      std::memcpy(row + h * sizeof(float), &v_scale, sizeof(float));
      std::memcpy(row + (heads + h) * sizeof(float), &v_lo, sizeof(float));
      encode_n(v, v_lo, v_inv, codes + h * dim, dim);
    }
  }
  return {};
}

Status dequantize_block(const Int8Geometry& g, std::span<const std::byte> block,
                        std::span<const std::uint32_t> which, std::span<std::byte* const> out) {
  if (auto status = check_block(g, block.size()); !status) return status;
  if (which.size() != out.size()) {
    return make_error(Errc::kInvalidArgument, "int8 block: " + std::to_string(which.size()) +
                                                  " row indices for " +
                                                  std::to_string(out.size()) + " outputs");
  }
  for (std::uint32_t index : which) {
    if (index >= g.group_tokens) {
      return make_error(Errc::kInvalidArgument, "int8 block: row index " +
                                                    std::to_string(index) + " >= group_tokens " +
                                                    std::to_string(g.group_tokens));
    }
  }
  const std::size_t heads = g.num_kv_heads;
  const std::size_t dim = g.head_dim;
  const std::size_t channels = g.channels();
  const std::size_t row_stride = g.int8_row_bytes();
  // The block may sit at any address: copy the f32 parameters out instead of aliasing them.
  std::vector<float> key_scale(channels), key_min(channels), x(2 * channels);
  std::vector<float> v_scale(heads), v_min(heads);
  std::memcpy(key_scale.data(), block.data(), channels * sizeof(float));
  std::memcpy(key_min.data(), block.data() + channels * sizeof(float), channels * sizeof(float));

  for (std::size_t i = 0; i < which.size(); ++i) {
    const std::byte* row = block.data() + g.key_params_bytes() + which[i] * row_stride;
    std::memcpy(v_scale.data(), row, heads * sizeof(float));
    std::memcpy(v_min.data(), row + heads * sizeof(float), heads * sizeof(float));
    const auto* k_codes = reinterpret_cast<const std::uint8_t*>(row + 8 * heads);
    const std::uint8_t* v_codes = k_codes + channels;
    decode_n(k_codes, key_min.data(), key_scale.data(), x.data(), channels);
    for (std::size_t h = 0; h < heads; ++h) {
      decode_n(v_codes + h * dim, v_min[h], v_scale[h], &x[channels + h * dim], dim);
    }
    from_f32(g.dtype, x.data(), out[i], 2 * channels);
  }
  return {};
}

}  // namespace kvtier::kernels
