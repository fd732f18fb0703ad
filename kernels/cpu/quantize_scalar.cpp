// The scalar loops of the int8 tier: the definition the SIMD tables (quantize_avx2.cpp,
// quantize_avx512.cpp) reproduce bit for bit, and the table used where neither runs. Plain C++
// (GCC/Clang vector extensions for the 16 range lanes of a value head); the compiler may
// vectorize it further, nothing depends on that.
//
// Definition of the results (see quantize.hpp for the scheme and layout):
// - min/max are the selects `v < lo ? v : lo` and `v > hi ? v : hi`, in a fixed order: key
//   ranges take the rows of a block in row order; a value head's range is head_range() below (16
//   lanes, then the lanes in lane order, then the tail), so the result is defined bit for bit
//   when +0 and -0 meet or a NaN is met;
// - f32 expressions are evaluated as written: (x − lo)·inv, then the clamps (or, where they
//   provably cannot bite, none: encode_in_range), +0.5, truncation; lo + code·scale, rounded to the
//   dtype. This file and the SIMD ones are compiled with -ffp-contract=off: no FMA contraction.
#include <cstring>

#include "quantize_blocks.hpp"
#include "quantize_loops.hpp"

// Helpers that take or return vectors: always inlined into the loops, where the vector stays in
// registers.
#define KVTIER_VEC_INLINE inline __attribute__((always_inline))

// Vectors are returned by value only from inline helpers of this file (internal linkage), so the
// ABI note that GCC and Clang give for them is moot.
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace kvtier::kernels::detail {
namespace {

constexpr std::size_t kLanes = 16;

// lo[i] = min(lo[i], v), hi[i] = max(hi[i], v) for v = element i of src[0], ..., src[K − 1] in
// that order, for i < n. K rows per pass: the ranges are loaded and stored once per K rows.
template <KvDtype D, std::size_t K>
void widen_ranges(const std::byte* const* src, std::size_t n, float* __restrict lo,
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
void convert(const std::byte* __restrict src, std::size_t n, float* __restrict x) noexcept {
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
void quantize_values(const std::byte* __restrict src, const shm::Int8BlockShape& shape,
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
void encode_channels(const std::byte* __restrict src, const float* __restrict lo,
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
void decode_channels(const std::uint8_t* __restrict codes, const float* __restrict lo,
                                const float* __restrict scale, std::byte* __restrict out,
                                std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    store<D, kNoNaN>(out, i, lo[i] + static_cast<float>(codes[i]) * scale[i]);
  }
}

template <KvDtype D, bool kNoNaN>
void decode_head(const std::uint8_t* __restrict codes, float lo, float scale,
                            std::byte* __restrict out, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    store<D, kNoNaN>(out, i, lo + static_cast<float>(codes[i]) * scale);
  }
}

// True when x[0..n) are all finite; a branch-free reduction.
bool all_finite(const float* __restrict x, std::size_t n) noexcept {
  std::uint32_t special = 0;
  for (std::size_t i = 0; i < n; ++i) special |= is_finite(x[i]) ? 0u : 1u;
  return special == 0;
}

template <KvDtype D>
void from_f32_as(const float* __restrict src, std::byte* __restrict dst, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) store<D>(dst, i, src[i]);
}

template <KvDtype D>
void to_f32_as(const std::byte* __restrict src, float* __restrict dst, std::size_t n) noexcept {
  convert<D>(src, n, dst);
}

template <KvDtype D>
void widen_as(const std::byte* const* rows, std::size_t k, std::size_t n, float* lo,
              float* hi) noexcept {
  if (k == kWidenRows) {
    widen_ranges<D, kWidenRows>(rows, n, lo, hi);
  } else {
    for (std::size_t r = 0; r < k; ++r) widen_ranges<D, 1>(rows + r, n, lo, hi);
  }
}

template <KvDtype D>
void encode_keys_as(const std::byte* src, const float* lo, const float* inv, bool in_range,
                    std::uint8_t* codes, std::size_t n) noexcept {
  if (in_range) {
    encode_channels<D, true>(src, lo, inv, codes, n);
  } else {
    encode_channels<D, false>(src, lo, inv, codes, n);
  }
}

template <KvDtype D>
void decode_keys_as(const std::uint8_t* codes, const float* lo, const float* scale, bool finite,
                    std::byte* out, std::size_t n) noexcept {
  if (finite) {
    decode_channels<D, true>(codes, lo, scale, out, n);
  } else {
    decode_channels<D, false>(codes, lo, scale, out, n);
  }
}

template <KvDtype D>
void decode_values_as(const std::uint8_t* codes, const float* min, const float* scale,
                      std::size_t heads, std::size_t dim, std::byte* out) noexcept {
  for (std::size_t h = 0; h < heads; ++h) {
    std::byte* head = out + h * dim * dtype_bytes(D);
    if (is_finite(min[h]) && is_finite(scale[h])) {
      decode_head<D, true>(codes + h * dim, min[h], scale[h], head, dim);
    } else {
      decode_head<D, false>(codes + h * dim, min[h], scale[h], head, dim);
    }
  }
}

bool key_params(const float* __restrict lo, const float* __restrict hi, float* __restrict scale,
                float* __restrict inv, std::size_t n) noexcept {
  for (std::size_t c = 0; c < n; ++c) {
    const float range = hi[c] - lo[c];
    scale[c] = range / kLevels;
    inv[c] = range > 0.0f ? kLevels / range : 0.0f;
  }
  return all_finite(inv, n);
}

template <KvDtype D>
constexpr Int8DtypeLoops dtype_loops() noexcept {
  return {to_f32_as<D>, from_f32_as<D>, widen_as<D>, quantize_values<D>,
          encode_keys_as<D>, decode_keys_as<D>, decode_values_as<D>};
}

constexpr Int8Loops kScalarLoops{Int8Isa::kScalar, key_params, all_finite,
                                 dtype_loops<KvDtype::kF16>(), dtype_loops<KvDtype::kBf16>(),
                                 dtype_loops<KvDtype::kF32>()};

}  // namespace

const Int8Loops& scalar_int8_loops() noexcept { return kScalarLoops; }

}  // namespace kvtier::kernels::detail
