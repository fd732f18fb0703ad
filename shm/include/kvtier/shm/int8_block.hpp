// The int8 (T2) block format: where each part of one block of `group_tokens` quantized tokens
// lies (shm/LAYOUT.md, "Int8 (T2) pool segment"). This is the one definition of that arithmetic:
// the daemon places blocks in the int8 pool segment by it (int8_pool_geometry.hpp), and the
// quantizer that writes them and the kernels that read them (kernels/.../quantize.hpp, its CPU
// reference and CUDA kernels) take their sizes and offsets from it. What the bytes mean (the
// rounding rules) is the quantizer's; tests/layout pins the numbers.
//
//   block (one layer; H = num_kv_heads, D = head_dim, G = group_tokens):
//     0                    key_scale   f32[H][D]   per channel, over the block's rows
//     4·H·D                key_min     f32[H][D]
//     8·H·D                zero padding up to P = key_params_bytes = round_up(8·H·D, 64)
//     P + r·R              int8 row r (r < G), R = int8_row_bytes:
//       +0                   value_scale f32[H]      per token and KV head
//       +4·H                 value_min   f32[H]
//       +8·H                 key codes   u8[H][D]
//       +8·H + H·D           value codes u8[H][D]
//       +8·H + 2·H·D         zero padding up to R = round_up(8·H + 2·H·D, 16)
//   block_bytes = P + G·R
//
// Every f32 is 4-byte aligned when the block is; rows start 16-byte aligned when the block does.
// Std-only (no error type, no allocation) so CUDA sources can include it.
// Thread-safety: plain value.
#pragma once

#include <cstdint>
#include <type_traits>

namespace kvtier::shm {

inline constexpr std::uint32_t kMaxInt8GroupTokens = 1024;  // G: rows per block, at most
inline constexpr std::uint64_t kInt8KeyParamsAlign = 64;    // P is a multiple of this
inline constexpr std::uint64_t kInt8RowAlign = 16;          // R is a multiple of this

struct Int8BlockShape {
  std::uint32_t num_kv_heads;  // H
  std::uint32_t head_dim;      // D
  std::uint32_t group_tokens;  // G

  constexpr std::uint64_t channels() const noexcept { return std::uint64_t{num_kv_heads} * head_dim; }

  // ---- the block's key parameters ----
  static constexpr std::uint64_t key_scale_offset() noexcept { return 0; }
  constexpr std::uint64_t key_min_offset() const noexcept { return 4 * channels(); }
  // key_scale + key_min, the bytes before the padding.
  constexpr std::uint64_t key_params_used_bytes() const noexcept { return 8 * channels(); }
  // P: key_scale + key_min padded to kInt8KeyParamsAlign.
  constexpr std::uint64_t key_params_bytes() const noexcept {
    return round_up(key_params_used_bytes(), kInt8KeyParamsAlign);
  }

  // ---- one int8 row, offsets from the row's start ----
  static constexpr std::uint64_t value_scale_offset() noexcept { return 0; }
  constexpr std::uint64_t value_min_offset() const noexcept { return 4 * std::uint64_t{num_kv_heads}; }
  constexpr std::uint64_t key_codes_offset() const noexcept { return 8 * std::uint64_t{num_kv_heads}; }
  constexpr std::uint64_t value_codes_offset() const noexcept { return key_codes_offset() + channels(); }
  // The row's bytes before its padding.
  constexpr std::uint64_t row_used_bytes() const noexcept { return value_codes_offset() + channels(); }
  // R: one row padded to kInt8RowAlign.
  constexpr std::uint64_t int8_row_bytes() const noexcept { return round_up(row_used_bytes(), kInt8RowAlign); }

  // ---- the block ----
  // Offset of int8 row r (r < group_tokens) from the block's start.
  constexpr std::uint64_t row_offset(std::uint32_t r) const noexcept {
    return key_params_bytes() + std::uint64_t{r} * int8_row_bytes();
  }
  constexpr std::uint64_t block_bytes() const noexcept { return row_offset(group_tokens); }

  friend constexpr bool operator==(const Int8BlockShape&, const Int8BlockShape&) = default;

 private:
  static constexpr std::uint64_t round_up(std::uint64_t n, std::uint64_t to) noexcept { return (n + to - 1) / to * to; }
};

static_assert(std::is_trivially_copyable_v<Int8BlockShape>);
// The worked example of LAYOUT.md (R1-Distill-Qwen-7B: H = 4, D = 128, G = 32).
static_assert(Int8BlockShape{4, 128, 32}.key_params_bytes() == 4096);
static_assert(Int8BlockShape{4, 128, 32}.int8_row_bytes() == 1056);
static_assert(Int8BlockShape{4, 128, 32}.block_bytes() == 37888);

}  // namespace kvtier::shm
