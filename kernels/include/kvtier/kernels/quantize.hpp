// The int8 tier (T2): KIVI-style 8-bit quantization of pool rows, its CPU reference, error
// measurement, and f16/bf16 <-> f32 conversion (no external dependencies).
//
// Source rows have the pool's layout (shm/LAYOUT.md): one token of one layer, K of every KV head
// then V of every KV head, each head_dim elements of the pool dtype (f16, bf16 or f32).
//
// Scheme (research/seed-algorithms.md §4, §9.10): asymmetric min-max with 8-bit unsigned codes,
//   code = round((x − min) / scale) in 0..255, x̂ = min + code · scale, scale = (max − min) / 255
//   (scale 0 and every code 0 when max == min, so a constant is restored exactly).
//   Keys: per channel (KV head h, dim d) over the rows of one block (a group of up to G tokens,
//   G = group_tokens, default 32), so an outlier channel gets its own range (Qwen keys).
//   Values: per token and KV head over head_dim.
// Quantize once: a block is written when its rows are demoted and never re-quantized.
// Rounding: (x − min)·(255 / (max − min)) in f32, then +0.5 and truncation (half up); the
// restored value is computed in f32 and rounded to the pool dtype (nearest even), so
//   |x̂ − x| <= scale / 2 + (f32 rounding) + (one half ulp of the dtype at x̂).
// Non-finite inputs give unspecified (but defined) codes; the tier is meant for finite KV.
//
// Int8 block: the format, its sizes and offsets are shm's (shm/include/kvtier/shm/int8_block.hpp,
// shm::Int8BlockShape): the daemon places blocks in the int8 pool segment by that definition, so
// the quantizer and the kernels take every size and offset from it too, never from arithmetic of
// their own. Little-endian; a block holds 1..G rows, rows beyond those are unused.
//
// Example: H = 4, D = 128, G = 32 (R1-Distill-Qwen-7B): P = 4,096, row = 1,056, block = 37,888
// bytes = 1,184 per token against 2,048 for the bf16 row (57.8%).
//
// Speed: the loops are explicit SIMD (AVX-512 or AVX2 on x86-64, else portable scalar code),
// chosen once per process from the CPU, so they are as fast in an -O2 build as at -O3; every
// instruction set writes the same bytes (int8_isa() names the one in use).
//
// Thread-safety: pure functions; concurrent calls must not share destinations.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "kvtier/kernels/kv_layout.hpp"
#include "kvtier/base/error.hpp"
#include "kvtier/shm/int8_block.hpp"

namespace kvtier::kernels {

// ---- scalar conversions: round to nearest even, overflow to ±inf, NaN stays NaN (quiet) ----

inline float f16_to_f32(std::uint16_t h) noexcept {
  const std::uint32_t sign = std::uint32_t{h & 0x8000u} << 16;
  const std::uint32_t em = h & 0x7FFFu;
  // Normals and subnormals: move the bits into f32 position and rescale by 2^(127 − 15) (exact).
  float mag = std::bit_cast<float>(em << 13) * 0x1p112f;
  if (em >= 0x7C00u) mag = std::bit_cast<float>((em << 13) | 0x7F800000u);  // inf, NaN
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(mag) | sign);
}

inline std::uint16_t f32_to_f16(float f) noexcept {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  u &= 0x7FFFFFFFu;
  std::uint32_t out;
  if (u >= 0x47800000u) {  // |f| >= 2^16: inf (NaN becomes the canonical quiet NaN)
    out = u > 0x7F800000u ? 0x7E00u : 0x7C00u;
  } else if (u < 0x38800000u) {  // |f| < 2^-14: subnormal or zero; the FPU rounds (RNE)
    out = std::bit_cast<std::uint32_t>(std::bit_cast<float>(u) + 0.5f) - 0x3F000000u;
  } else {  // normal: rebias the exponent by −112, round the 13 dropped bits to nearest even
    u += 0xC8000FFFu + ((u >> 13) & 1u);
    out = u >> 13;  // a carry into exponent 31 gives inf, as it should
  }
  return static_cast<std::uint16_t>(out | sign);
}

inline float bf16_to_f32(std::uint16_t b) noexcept {
  return std::bit_cast<float>(std::uint32_t{b} << 16);
}

inline std::uint16_t f32_to_bf16(float f) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// ---- instruction sets of the bulk loops ----

// The instruction sets the loops below are written for. All write the same bytes.
enum class Int8Isa : std::uint8_t { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

// "scalar", "avx2" or "avx512".
std::string_view int8_isa_name(Int8Isa isa) noexcept;
// Whether this build has the loops for `isa` and this CPU and OS can run them (kScalar: always).
bool int8_isa_available(Int8Isa isa) noexcept;
// The set every function below uses: the widest available one, chosen on first use and fixed
// for the process.
Int8Isa int8_isa() noexcept;

// n elements of `dtype` at src (native byte order) to f32, and back.
void to_f32(KvDtype dtype, const std::byte* src, float* dst, std::size_t n) noexcept;
void from_f32(KvDtype dtype, const float* src, std::byte* dst, std::size_t n) noexcept;

// ---- int8 blocks ----

inline constexpr std::uint32_t kDefaultKeyGroup = 32;
inline constexpr std::uint32_t kMaxKeyGroup = shm::kMaxInt8GroupTokens;

struct Int8Geometry {
  std::uint32_t num_kv_heads = 0;
  std::uint32_t head_dim = 0;
  KvDtype dtype = KvDtype::kBf16;
  std::uint32_t group_tokens = kDefaultKeyGroup;

  // The block's format (shm's definition; the sizes below are its).
  constexpr shm::Int8BlockShape block_shape() const noexcept { return {num_kv_heads, head_dim, group_tokens}; }
  std::size_t channels() const noexcept { return block_shape().channels(); }
  // One native row (K then V): 2·H·D·dtype_bytes.
  std::size_t row_bytes() const noexcept { return 2 * channels() * dtype_bytes(dtype); }
  // P, R and P + G·R of int8_block.hpp.
  std::size_t key_params_bytes() const noexcept { return block_shape().key_params_bytes(); }
  std::size_t int8_row_bytes() const noexcept { return block_shape().int8_row_bytes(); }
  std::size_t block_bytes() const noexcept { return block_shape().block_bytes(); }
  // Bytes of the blocks holding `rows` rows packed G per block.
  std::size_t blocks_bytes(std::size_t rows) const noexcept {
    return (rows + group_tokens - 1) / group_tokens * block_bytes();
  }
};

// kInvalidArgument naming the field: num_kv_heads and head_dim in [1, 16384] with H·D <= 2^24,
// group_tokens in [1, kMaxKeyGroup], dtype a KvDtype.
Status validate(const Int8Geometry& geometry);

// Quantizes rows.size() native rows (1..group_tokens, each row_bytes) into one block of
// block_bytes at `block` (row i of the block = rows[i]; padding written as 0). kInvalidArgument
// for a bad geometry, a row count outside 1..G, or a block span shorter than block_bytes.
// Preconditions: every row pointer valid for row_bytes, none overlapping the block.
Status quantize_block(const Int8Geometry& geometry, std::span<const std::byte* const> rows,
                      std::span<std::byte> block);

// Restores rows `which[i]` of a block into out[i] (row_bytes each, pool dtype). kInvalidArgument
// for a bad geometry, which/out size mismatch, an index >= group_tokens or a short block span.
// Preconditions: out pointers valid for row_bytes, not overlapping the block.
Status dequantize_block(const Int8Geometry& geometry, std::span<const std::byte> block,
                        std::span<const std::uint32_t> which, std::span<std::byte* const> out);

// Contiguous forms: src holds count = src.size() / row_bytes rows; block b of dst holds rows
// [b·G, min((b+1)·G, count)). dst must hold blocks_bytes(count). dequantize_rows restores `count`
// rows from such blocks into dst (count·row_bytes). kInvalidArgument on any size mismatch.
Status quantize_rows(const Int8Geometry& geometry, std::span<const std::byte> src,
                     std::span<std::byte> dst);
Status dequantize_rows(const Int8Geometry& geometry, std::span<const std::byte> blocks,
                       std::size_t count, std::span<std::byte> dst);

// ---- error measurement ----

// Over the head vectors x (head_dim elements of one token, one KV head) of K or of V:
// relative error ‖x̂ − x‖₂ / ‖x‖₂ (vectors with ‖x‖ = 0 are skipped), its maximum and mean, and
// the largest absolute element error.
struct QuantError {
  double max_rel = 0.0;
  double mean_rel = 0.0;
  double max_abs = 0.0;
  std::size_t vectors = 0;
};

struct QuantErrorReport {
  QuantError keys;
  QuantError values;
};

// Compares `original` with `restored`, both count·row_bytes native rows (count = size /
// row_bytes). kInvalidArgument for a bad geometry or sizes that differ or are not whole rows.
Result<QuantErrorReport> measure_error(const Int8Geometry& geometry,
                                       std::span<const std::byte> original,
                                       std::span<const std::byte> restored);

}  // namespace kvtier::kernels
