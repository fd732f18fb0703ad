// CPU reference of the int8 tier: bulk dtype conversion and the block loops (per-channel key
// ranges over a block's rows + per-token, per-head value ranges; see quantize.hpp for the scheme
// and layout). The public entry points check their arguments in quantize_support.cpp.
//
// Speed (goal C7: bf16 bytes/s at least half of memcpy's): every loop is specialised on the
// dtype at compile time, has no branches (selects only) and vectorizes under GCC/Clang without
// -ffast-math. Keys are read straight from the rows (widen the channel ranges in memory order,
// kWiden rows per pass, then encode); values go through one f32 copy of the row so the range
// pass vectorizes, one call per row; lane ranges reduce in registers; codes skip the clamps
// where they provably cannot bite (encode_in_range); decode rounds straight into the dtype,
// skipping the NaN select where the block's parameters are finite (then no result can be NaN).
// Scratch is allocated once per call and never zeroed.
// Exactness: min/max keep the select semantics `v < lo ? v : lo`, ranges reduce their lanes in a
// fixed order (a faster tree only where it gives the same bits), and the f32 expressions are the
// scalar definition's, so outputs are bit-for-bit those of the plain scalar loops (a unit test
// compares them). On x86-64 the hot loops are cloned for AVX-512 (x86-64-v4) and AVX2 and picked
// at load time; fp-contract is off for them, so a·b + c is never fused into an FMA.
#include "kvtier/kernels/quantize.hpp"

#include <algorithm>
#include <cstring>
#include <memory>

#include "quantize_blocks.hpp"

// GCC on x86-64 ELF: clone the hot loops (chosen once, at load time by ifunc). No FMA contraction.
// Not under ThreadSanitizer: GCC instruments the ifunc resolvers as well (__tsan_func_entry), and
// they run while the dynamic loader relocates libkvtier.so, before the TSan runtime is set up, so
// every process linking the library crashed at load. The default clone gives the same bytes.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__ELF__) && \
    !defined(__SANITIZE_THREAD__)
#define KVTIER_HOT \
  __attribute__((target_clones("arch=x86-64-v4", "avx2", "default"), optimize("fp-contract=off")))
#else
#define KVTIER_HOT
#endif
// Helpers that take or return vectors: always inlined into the (cloned) loops, since an outlined
// copy is compiled for the baseline ISA, where a 64-byte vector is taken apart lane by lane.
#define KVTIER_VEC_INLINE inline __attribute__((always_inline))

// Vectors are returned by value only from inline helpers of this file (internal linkage), so the
// ABI note that GCC and Clang give for them is moot.
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace kvtier::kernels {
using namespace detail;  // the element helpers of quantize_blocks.hpp
namespace {

constexpr std::size_t kLanes = 16;
constexpr std::size_t kWiden = 4;  // rows per key-range pass

// lo[i] = min(lo[i], v), hi[i] = max(hi[i], v) for v = element i of src[0], ..., src[K − 1] in
// that order, for i < n. K rows per pass: the ranges are loaded and stored once per K rows.
template <KvDtype D, std::size_t K>
KVTIER_HOT void widen_ranges(const std::byte* const* src, std::size_t n, float* __restrict lo,
                             float* __restrict hi) noexcept {
  const std::byte* row[K];
  for (std::size_t k = 0; k < K; ++k) row[k] = src[k];
  for (std::size_t i = 0; i < n; ++i) {
    float l = lo[i];
    float h = hi[i];
    for (std::size_t k = 0; k < K; ++k) {
      const float v = load<D>(row[k], i);
      l = v < l ? v : l;
      h = v > h ? v : h;
    }
    lo[i] = l;
    hi[i] = h;
  }
}

template <KvDtype D>
KVTIER_HOT void convert(const std::byte* __restrict src, std::size_t n, float* __restrict x) noexcept {
  for (std::size_t i = 0; i < n; ++i) x[i] = load<D>(src, i);
}

// The kLanes per-lane ranges as one value (GCC/Clang vector extension): one AVX-512 register,
// two AVX or four SSE ones. Plain lane arrays get scalarized once the fixed-trip inner loop is
// unrolled; this stays vectorized as long as its lanes are never indexed one by one.
using Lanes = float __attribute__((vector_size(kLanes * sizeof(float))));

// Lower and upper halves of a float vector of 16, 8 or 4 lanes.
template <class V>
KVTIER_VEC_INLINE auto low_half(const V& v) noexcept {
  if constexpr (sizeof(V) == 64) return __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7);
  else if constexpr (sizeof(V) == 32) return __builtin_shufflevector(v, v, 0, 1, 2, 3);
  else return __builtin_shufflevector(v, v, 0, 1);
}
template <class V>
KVTIER_VEC_INLINE auto high_half(const V& v) noexcept {
  if constexpr (sizeof(V) == 64) return __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  else if constexpr (sizeof(V) == 32) return __builtin_shufflevector(v, v, 4, 5, 6, 7);
  else return __builtin_shufflevector(v, v, 2, 3);
}

// A tree over the lanes: lane k of each level selects between lanes k and k + width of the level
// above, down to one lane: min, max and a sum (NaN if any lane is NaN, or on inf − inf: then the
// ordered way runs too). Halving the vector keeps it in registers, where a lane array spills.
template <class V>
KVTIER_VEC_INLINE void tree(const V& lo, const V& hi, const V& sum, float& tree_lo, float& tree_hi,
                            float& tree_sum) noexcept {
  if constexpr (sizeof(V) == 2 * sizeof(float)) {
    tree_lo = lo[1] < lo[0] ? lo[1] : lo[0];
    tree_hi = hi[1] > hi[0] ? hi[1] : hi[0];
    tree_sum = sum[0] + sum[1];
  } else {
    const auto a_lo = low_half(lo), b_lo = high_half(lo);
    const auto a_hi = low_half(hi), b_hi = high_half(hi);
    tree(b_lo < a_lo ? b_lo : a_lo, b_hi > a_hi ? b_hi : a_hi, low_half(sum) + high_half(sum),
         tree_lo, tree_hi, tree_sum);
  }
}

// Min and max of the kLanes lanes in lane order, starting from `first` (the head's first
// element, also lane 0's starting value, so it never changes the result). A chain of kLanes
// dependent selects is slow; the tree gives the same bits whenever the extreme value is neither
// NaN nor ±0 (then every lane holding it holds the same bit pattern), which is checked;
// otherwise the ordered chain runs. Returns false when a lane may be NaN (then it has been NaN
// since its first element and ignored the later ones, which the range may then not hold).
KVTIER_VEC_INLINE bool reduce_lanes(const Lanes& lanes_lo, const Lanes& lanes_hi, float first, float& lo,
                         float& hi) noexcept {
  float tree_lo, tree_hi, sum;
  tree(lanes_lo, lanes_hi, lanes_lo + lanes_hi, tree_lo, tree_hi, sum);
  if (sum == sum && tree_lo != 0.0f && tree_hi != 0.0f) [[likely]] {
    lo = tree_lo;
    hi = tree_hi;
    return true;
  }
  float out_lo[kLanes];
  float out_hi[kLanes];
  std::memcpy(out_lo, &lanes_lo, sizeof out_lo);
  std::memcpy(out_hi, &lanes_hi, sizeof out_hi);
  lo = first;
  hi = first;
  for (std::size_t k = 0; k < kLanes; ++k) {
    lo = out_lo[k] < lo ? out_lo[k] : lo;
    hi = out_hi[k] > hi ? out_hi[k] : hi;
  }
  return sum == sum;
}

// Minimum and maximum of v[0, dim), dim >= 1. The definition (bit-exact when +0 and -0 meet):
// kLanes lanes start at the first kLanes elements and take in each later full chunk of kLanes by
// lane; then, starting from the first element, the lanes in lane order, then the tail elements
// in order. Returns true when the range holds every element but NaNs (or is NaN itself): no lane
// stuck at a NaN first element.
KVTIER_VEC_INLINE bool head_range(const float* __restrict v, std::size_t dim, float& lo, float& hi) noexcept {
  const std::size_t full = dim / kLanes * kLanes;
  bool held = true;
  lo = v[0];
  hi = v[0];
  if (full != 0) {
    Lanes lanes_lo;
    std::memcpy(&lanes_lo, v, sizeof lanes_lo);
    Lanes lanes_hi = lanes_lo;
    for (std::size_t i = kLanes; i < full; i += kLanes) {
      Lanes w;
      std::memcpy(&w, v + i, sizeof w);
      lanes_lo = w < lanes_lo ? w : lanes_lo;  // per lane: the scalar select
      lanes_hi = w > lanes_hi ? w : lanes_hi;
    }
    held = reduce_lanes(lanes_lo, lanes_hi, v[0], lo, hi);
  }
  for (std::size_t i = full; i < dim; ++i) {
    lo = v[i] < lo ? v[i] : lo;
    hi = v[i] > hi ? v[i] : hi;
  }
  return held;
}

// The values of one row (src: heads·dim elements of dtype D) into its int8 row (offsets from
// `shape`): per token and head, the range, value_scale and value_min, then the codes. One call
// per row: the f32 copy (x, heads·dim floats) makes the range pass a plain f32 one, not a
// conversion.
template <KvDtype D>
KVTIER_HOT void quantize_values(const std::byte* __restrict src, const shm::Int8BlockShape& shape,
                                float* __restrict x, std::byte* __restrict row) noexcept {
  const std::size_t heads = shape.num_kv_heads, dim = shape.head_dim;
  const std::size_t scale_at = shape.value_scale_offset(), min_at = shape.value_min_offset();
  for (std::size_t i = 0; i < heads * dim; ++i) x[i] = load<D>(src, i);
  auto* const codes = reinterpret_cast<std::uint8_t*>(row + shape.value_codes_offset());
  for (std::size_t h = 0; h < heads; ++h) {
    const float* v = x + h * dim;
    float lo, hi;
    const bool held = head_range(v, dim, lo, hi);
    const float range = hi - lo;
    const float scale = range / kLevels;
    const float inv = range > 0.0f ? kLevels / range : 0.0f;
    std::memcpy(row + scale_at + h * sizeof(float), &scale, sizeof(float));
    std::memcpy(row + min_at + h * sizeof(float), &lo, sizeof(float));
    std::uint8_t* out = codes + h * dim;
    if (held && is_finite(inv)) {
      for (std::size_t i = 0; i < dim; ++i) out[i] = encode_in_range(v[i], lo, inv);
    } else {
      for (std::size_t i = 0; i < dim; ++i) out[i] = encode(v[i], lo, inv);
    }
  }
}

// Straight from the row (cached: the block's key rows were just read for the ranges).
// kInRange: encode_in_range applies (every inv finite).
template <KvDtype D, bool kInRange>
KVTIER_HOT void encode_channels(const std::byte* __restrict src, const float* __restrict lo,
                                const float* __restrict inv, std::uint8_t* __restrict codes,
                                std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    const float x = load<D>(src, i);
    codes[i] = kInRange ? encode_in_range(x, lo[i], inv[i]) : encode(x, lo[i], inv[i]);
  }
}

// out[i] = lo[i] + codes[i] · scale[i], in dtype D. kNoNaN: every lo and scale is finite, so no
// result is NaN (code · scale may overflow to ±inf, but never meets an infinity of the other sign).
template <KvDtype D, bool kNoNaN>
KVTIER_HOT void decode_channels(const std::uint8_t* __restrict codes, const float* __restrict lo,
                                const float* __restrict scale, std::byte* __restrict out,
                                std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    store<D, kNoNaN>(out, i, lo[i] + static_cast<float>(codes[i]) * scale[i]);
  }
}

template <KvDtype D, bool kNoNaN>
KVTIER_HOT void decode_head(const std::uint8_t* __restrict codes, float lo, float scale,
                            std::byte* __restrict out, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    store<D, kNoNaN>(out, i, lo + static_cast<float>(codes[i]) * scale);
  }
}

// True when x[0..n) are all finite; a branch-free reduction.
KVTIER_HOT bool all_finite(const float* __restrict x, std::size_t n) noexcept {
  std::uint32_t special = 0;
  for (std::size_t i = 0; i < n; ++i) special |= is_finite(x[i]) ? 0u : 1u;
  return special == 0;
}

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

template <KvDtype D>
void quantize_block_as(const Int8Geometry& g, std::span<const std::byte* const> rows,
                       std::byte* block, const Scratch& s) {
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
  // per-channel ranges (kWiden rows at a time); the values, complete per token and head, are
  // quantized right away.
  std::size_t widened = 1;  // rows [0, widened) are in the key ranges
  for (std::size_t r = 0; r < count; ++r) {
    if (r == 0) {  // the first row starts the ranges
      convert<D>(rows[0], channels, lo);
      std::memcpy(hi, lo, channels * sizeof(float));
    } else if (r + 1 - widened == kWiden) {
      widen_ranges<D, kWiden>(rows.data() + widened, channels, lo, hi);
      widened = r + 1;
    }
    std::byte* row = first_row + r * row_stride;
    quantize_values<D>(rows[r] + channels * dtype_bytes(D), shape, s.x(), row);
    std::memset(row + used, 0, row_stride - used);
  }
  for (; widened < count; ++widened) widen_ranges<D, 1>(rows.data() + widened, channels, lo, hi);

  // Keys: the channel parameters, then codes from the rows again (cached; no f32 copy).
  for (std::size_t c = 0; c < channels; ++c) {
    const float range = hi[c] - lo[c];
    scale[c] = range / kLevels;
    inv[c] = range > 0.0f ? kLevels / range : 0.0f;
  }
  std::memcpy(block + shape.key_scale_offset(), scale, channels * sizeof(float));
  std::memcpy(block + shape.key_min_offset(), lo, channels * sizeof(float));
  std::memset(block + shape.key_params_used_bytes(), 0, shape.key_params_bytes() - shape.key_params_used_bytes());
  const bool in_range = all_finite(inv, channels);
  for (std::size_t r = 0; r < count; ++r) {
    auto* codes = reinterpret_cast<std::uint8_t*>(first_row + r * row_stride + key_codes_at);
    if (in_range) {
      encode_channels<D, true>(rows[r], lo, inv, codes, channels);
    } else {
      encode_channels<D, false>(rows[r], lo, inv, codes, channels);
    }
  }
}

template <KvDtype D>
void dequantize_block_as(const Int8Geometry& g, const std::byte* block,
                         std::span<const std::uint32_t> which, std::span<std::byte* const> out,
                         const Scratch& s) {
  const shm::Int8BlockShape shape = g.block_shape();
  const std::size_t heads = shape.num_kv_heads;
  const std::size_t dim = shape.head_dim;
  const std::size_t channels = shape.channels();
  const std::size_t elem = dtype_bytes(D);
  // The block may sit at any address: copy the f32 parameters out instead of aliasing them.
  float* const key_scale = s.scale();
  float* const key_min = s.lo();
  float* const v_scale = s.hi();  // heads <= channels floats each
  float* const v_min = s.inv();
  std::memcpy(key_scale, block + shape.key_scale_offset(), channels * sizeof(float));
  std::memcpy(key_min, block + shape.key_min_offset(), channels * sizeof(float));
  const bool keys_finite = all_finite(key_scale, channels) && all_finite(key_min, channels);
  for (std::size_t i = 0; i < which.size(); ++i) {
    const std::byte* row = block + shape.row_offset(which[i]);
    std::memcpy(v_scale, row + shape.value_scale_offset(), heads * sizeof(float));
    std::memcpy(v_min, row + shape.value_min_offset(), heads * sizeof(float));
    const auto* k_codes = reinterpret_cast<const std::uint8_t*>(row + shape.key_codes_offset());
    const auto* v_codes = reinterpret_cast<const std::uint8_t*>(row + shape.value_codes_offset());
    if (keys_finite) {
      decode_channels<D, true>(k_codes, key_min, key_scale, out[i], channels);
    } else {
      decode_channels<D, false>(k_codes, key_min, key_scale, out[i], channels);
    }
    std::byte* values = out[i] + channels * elem;
    for (std::size_t h = 0; h < heads; ++h) {
      std::byte* head = values + h * dim * elem;
      if (is_finite(v_min[h]) && is_finite(v_scale[h])) {
        decode_head<D, true>(v_codes + h * dim, v_min[h], v_scale[h], head, dim);
      } else {
        decode_head<D, false>(v_codes + h * dim, v_min[h], v_scale[h], head, dim);
      }
    }
  }
}

template <KvDtype D>
KVTIER_HOT void from_f32_as(const float* __restrict src, std::byte* __restrict dst,
                            std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) store<D>(dst, i, src[i]);
}

}  // namespace

void to_f32(KvDtype dtype, const std::byte* src, float* dst, std::size_t n) noexcept {
  with_dtype(dtype, [&]<KvDtype D>() { convert<D>(src, n, dst); });
}

void from_f32(KvDtype dtype, const float* src, std::byte* dst, std::size_t n) noexcept {
  with_dtype(dtype, [&]<KvDtype D>() { from_f32_as<D>(src, dst, n); });
}

namespace detail {

void quantize_checked(const Int8Geometry& g, std::span<const std::byte* const> rows,
                      std::byte* block) {
  const Scratch scratch(g);
  with_dtype(g.dtype, [&]<KvDtype D>() { quantize_block_as<D>(g, rows, block, scratch); });
}

void dequantize_checked(const Int8Geometry& g, const std::byte* block,
                        std::span<const std::uint32_t> which, std::span<std::byte* const> out) {
  const Scratch scratch(g);
  with_dtype(g.dtype, [&]<KvDtype D>() { dequantize_block_as<D>(g, block, which, out, scratch); });
}

void quantize_rows_checked(const Int8Geometry& g, std::span<const std::byte> src, std::byte* dst) {
  const std::size_t count = src.size() / g.row_bytes();
  const Scratch scratch(g);
  const auto rows = std::make_unique_for_overwrite<const std::byte*[]>(g.group_tokens);
  with_dtype(g.dtype, [&]<KvDtype D>() {
    for (std::size_t first = 0, b = 0; first < count; first += g.group_tokens, ++b) {
      const std::size_t n = std::min<std::size_t>(g.group_tokens, count - first);
      for (std::size_t i = 0; i < n; ++i) rows[i] = src.data() + (first + i) * g.row_bytes();
      quantize_block_as<D>(g, {rows.get(), n}, dst + b * g.block_bytes(), scratch);
    }
  });
}

void dequantize_rows_checked(const Int8Geometry& g, const std::byte* blocks, std::size_t count,
                             std::byte* dst) {
  const Scratch scratch(g);
  const auto which = std::make_unique_for_overwrite<std::uint32_t[]>(g.group_tokens);
  const auto out = std::make_unique_for_overwrite<std::byte*[]>(g.group_tokens);
  for (std::uint32_t i = 0; i < g.group_tokens; ++i) which[i] = i;
  with_dtype(g.dtype, [&]<KvDtype D>() {
    for (std::size_t first = 0, b = 0; first < count; first += g.group_tokens, ++b) {
      const std::size_t n = std::min<std::size_t>(g.group_tokens, count - first);
      for (std::size_t i = 0; i < n; ++i) out[i] = dst + (first + i) * g.row_bytes();
      dequantize_block_as<D>(g, blocks + b * g.block_bytes(), {which.get(), n}, {out.get(), n},
                             scratch);
    }
  });
}

}  // namespace detail
}  // namespace kvtier::kernels
