// The block code of the int8 tier: the per-block order of work over the rows (per-channel key
// ranges over a block's rows + per-token, per-head value ranges; see quantize.hpp for the scheme
// and layout), calling the inner loops of one table of quantize_loops.hpp (the instruction set is
// chosen once per process; each entry point reads it once). The public entry points check their
// arguments in quantize_support.cpp.
//
// Speed (goal C7: bf16 bytes/s at least half of memcpy's): keys are read straight from the rows
// (widen the channel ranges in memory order, kWidenRows rows per pass, then encode); values go
// through one f32 copy of the row so the range pass is a plain f32 one, one call per row; codes
// skip the clamps where they provably cannot bite; decode skips the NaN select where the block's
// parameters are finite. Scratch is allocated once per call and never zeroed.
#include "kvtier/kernels/quantize.hpp"

#include <algorithm>
#include <cstring>
#include <memory>

#include "quantize_blocks.hpp"
#include "quantize_loops.hpp"

namespace kvtier::kernels {
using namespace detail;
namespace {

// Per-call scratch, uninitialised: one row's values in f32 and the channel parameters.
struct Scratch {
  explicit Scratch(const Int8Geometry& g)
      : channels(g.channels()), floats(std::make_unique_for_overwrite<float[]>(5 * channels)) {}
  std::size_t channels;
  std::unique_ptr<float[]> floats;
  float* x() const noexcept { return floats.get(); }
  float* lo() const noexcept { return floats.get() + channels; }
  float* hi() const noexcept { return floats.get() + 2 * channels; }
  float* scale() const noexcept { return floats.get() + 3 * channels; }
  float* inv() const noexcept { return floats.get() + 4 * channels; }
};

void quantize_block_with(const Int8Geometry& g, std::span<const std::byte* const> rows,
                         std::byte* block, const Scratch& s, const Int8Loops& loops) {
  const Int8DtypeLoops& d = loops.of(g.dtype);
  const std::size_t count = rows.size();
  const shm::Int8BlockShape shape = g.block_shape();
  const std::size_t channels = shape.channels();
  const std::size_t row_stride = shape.int8_row_bytes();
  const std::size_t used = shape.row_used_bytes();  // of each int8 row; the rest is padding
  const std::size_t key_codes_at = shape.key_codes_offset();
  std::byte* const first_row = block + shape.row_offset(0);
  float* const lo = s.lo();
  float* const hi = s.hi();
  float* const scale = s.scale();
  float* const inv = s.inv();

  // One pass over the rows in memory order (each row's first touch streams): the keys widen the
  // per-channel ranges (kWidenRows rows at a time); the values, complete per token and head, are
  // quantized right away.
  std::size_t widened = 1;  // rows [0, widened) are in the key ranges
  for (std::size_t r = 0; r < count; ++r) {
    if (r == 0) {  // the first row starts the ranges
      d.to_f32(rows[0], lo, channels);
      std::memcpy(hi, lo, channels * sizeof(float));
    } else if (r + 1 - widened == kWidenRows) {
      d.widen(rows.data() + widened, kWidenRows, channels, lo, hi);
      widened = r + 1;
    }
    std::byte* row = first_row + r * row_stride;
    d.quantize_values(rows[r] + channels * dtype_bytes(g.dtype), shape, s.x(), row);
    std::memset(row + used, 0, row_stride - used);
  }
  if (widened < count) d.widen(rows.data() + widened, count - widened, channels, lo, hi);

  // Keys: the channel parameters, then codes from the rows again (cached; no f32 copy).
  const bool in_range = loops.key_params(lo, hi, scale, inv, channels);
  std::memcpy(block + shape.key_scale_offset(), scale, channels * sizeof(float));
  std::memcpy(block + shape.key_min_offset(), lo, channels * sizeof(float));
  std::memset(block + shape.key_params_used_bytes(), 0, shape.key_params_bytes() - shape.key_params_used_bytes());
  for (std::size_t r = 0; r < count; ++r) {
    auto* codes = reinterpret_cast<std::uint8_t*>(first_row + r * row_stride + key_codes_at);
    d.encode_keys(rows[r], lo, inv, in_range, codes, channels);
  }
}

void dequantize_block_with(const Int8Geometry& g, const std::byte* block,
                           std::span<const std::uint32_t> which, std::span<std::byte* const> out,
                           const Scratch& s, const Int8Loops& loops) {
  const Int8DtypeLoops& d = loops.of(g.dtype);
  const shm::Int8BlockShape shape = g.block_shape();
  const std::size_t heads = shape.num_kv_heads;
  const std::size_t dim = shape.head_dim;
  const std::size_t channels = shape.channels();
  const std::size_t elem = dtype_bytes(g.dtype);
  // The block may sit at any address: copy the f32 parameters out instead of aliasing them.
  float* const key_scale = s.scale();
  float* const key_min = s.lo();
  float* const v_scale = s.hi();  // heads <= channels floats each
  float* const v_min = s.inv();
  std::memcpy(key_scale, block + shape.key_scale_offset(), channels * sizeof(float));
  std::memcpy(key_min, block + shape.key_min_offset(), channels * sizeof(float));
  const bool keys_finite =
      loops.all_finite(key_scale, channels) && loops.all_finite(key_min, channels);
  for (std::size_t i = 0; i < which.size(); ++i) {
    const std::byte* row = block + shape.row_offset(which[i]);
    std::memcpy(v_scale, row + shape.value_scale_offset(), heads * sizeof(float));
    std::memcpy(v_min, row + shape.value_min_offset(), heads * sizeof(float));
    const auto* k_codes = reinterpret_cast<const std::uint8_t*>(row + shape.key_codes_offset());
    const auto* v_codes = reinterpret_cast<const std::uint8_t*>(row + shape.value_codes_offset());
    d.decode_keys(k_codes, key_min, key_scale, keys_finite, out[i], channels);
    d.decode_values(v_codes, v_min, v_scale, heads, dim, out[i] + channels * elem);
  }
}

}  // namespace

void to_f32(KvDtype dtype, const std::byte* src, float* dst, std::size_t n) noexcept {
  default_int8_loops().of(dtype).to_f32(src, dst, n);
}

void from_f32(KvDtype dtype, const float* src, std::byte* dst, std::size_t n) noexcept {
  default_int8_loops().of(dtype).from_f32(src, dst, n);
}

namespace detail {

void quantize_checked(const Int8Geometry& g, std::span<const std::byte* const> rows,
                      std::byte* block, const Int8Loops& loops) {
  const Scratch scratch(g);
  quantize_block_with(g, rows, block, scratch, loops);
}

void dequantize_checked(const Int8Geometry& g, const std::byte* block,
                        std::span<const std::uint32_t> which, std::span<std::byte* const> out,
                        const Int8Loops& loops) {
  const Scratch scratch(g);
  dequantize_block_with(g, block, which, out, scratch, loops);
}

void quantize_rows_checked(const Int8Geometry& g, std::span<const std::byte> src, std::byte* dst,
                           const Int8Loops& loops) {
  const std::size_t count = src.size() / g.row_bytes();
  const Scratch scratch(g);
  const auto rows = std::make_unique_for_overwrite<const std::byte*[]>(g.group_tokens);
  for (std::size_t first = 0, b = 0; first < count; first += g.group_tokens, ++b) {
    const std::size_t n = std::min<std::size_t>(g.group_tokens, count - first);
    for (std::size_t i = 0; i < n; ++i) rows[i] = src.data() + (first + i) * g.row_bytes();
    quantize_block_with(g, {rows.get(), n}, dst + b * g.block_bytes(), scratch, loops);
  }
}

void dequantize_rows_checked(const Int8Geometry& g, const std::byte* blocks, std::size_t count,
                             std::byte* dst, const Int8Loops& loops) {
  const Scratch scratch(g);
  const auto which = std::make_unique_for_overwrite<std::uint32_t[]>(g.group_tokens);
  const auto out = std::make_unique_for_overwrite<std::byte*[]>(g.group_tokens);
  for (std::uint32_t i = 0; i < g.group_tokens; ++i) which[i] = i;
  for (std::size_t first = 0, b = 0; first < count; first += g.group_tokens, ++b) {
    const std::size_t n = std::min<std::size_t>(g.group_tokens, count - first);
    for (std::size_t i = 0; i < n; ++i) out[i] = dst + (first + i) * g.row_bytes();
    dequantize_block_with(g, blocks + b * g.block_bytes(), {which.get(), n}, {out.get(), n},
                          scratch, loops);
  }
}

}  // namespace detail
}  // namespace kvtier::kernels
