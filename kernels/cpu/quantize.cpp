// CPU reference of the int8 tier: bulk dtype conversion and the block loops (per-channel key
// ranges over a block's rows + per-token, per-head value ranges; see quantize.hpp for the scheme
// and layout). The public entry points check their arguments in quantize_support.cpp.
//
// Speed (goal C7: bf16 bytes/s at least half of memcpy's): every loop is specialised on the
// dtype at compile time, has no branches (selects only) and vectorizes under GCC/Clang without
// -ffast-math. Keys are read straight from the rows (widen the channel ranges in memory order,
// then encode); values go through one f32 copy of the row so the range pass vectorizes; decode
// rounds straight into the dtype, skipping the NaN select where the block's parameters are
// finite (then no result can be NaN). Scratch is allocated once per call and never zeroed.
// Exactness: min/max keep the select semantics `v < lo ? v : lo`, ranges reduce their lanes in a
// fixed order (a faster tree only where it gives the same bits), and the f32 expressions are the
// scalar definition's, so outputs are bit-for-bit those of the plain scalar loops (a unit test
// compares them). On x86-64 the hot loops are cloned for AVX-512 (x86-64-v4) and AVX2 and picked
// at load time; fp-contract is off for them, so a·b + c is never fused into an FMA.
#include "kvtier/kernels/quantize.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "quantize_blocks.hpp"

// GCC on x86-64 ELF: clone the hot loops (chosen once, at load time by ifunc). No FMA contraction.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__ELF__)
#define KVTIER_HOT \
  __attribute__((target_clones("arch=x86-64-v4", "avx2", "default"), optimize("fp-contract=off")))
#else
#define KVTIER_HOT
#endif

namespace kvtier::kernels {
namespace {

constexpr std::size_t kLanes = 16;
constexpr float kLevels = 255.0f;

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
// NaN → 0), +0.5, truncate, then an unsigned min with 255, which catches both large values and
// the 0x80000000 that the conversion gives for +inf or v >= 2^31 — the same code, for every
// input, as clamping to [0, 255] in float first, but it vectorizes to max/cvt/min instead of
// compare-and-blend chains.
inline std::uint8_t encode(float x, float lo, float inv_scale) noexcept {
  float v = (x - lo) * inv_scale;
  v = v > 0.0f ? v : 0.0f;
  const auto code = static_cast<std::uint32_t>(static_cast<std::int32_t>(v + 0.5f));
  return static_cast<std::uint8_t>(code < 255u ? code : 255u);
}

// lo[i] = hi[i] = element i of src, for i < n: the first row of a block starts the ranges.
template <KvDtype D>
KVTIER_HOT void start_ranges(const std::byte* __restrict src, std::size_t n, float* __restrict lo,
                             float* __restrict hi) noexcept {
  for (std::size_t i = 0; i < n; ++i) lo[i] = hi[i] = load<D>(src, i);
}

// lo[i] = min(lo[i], v), hi[i] = max(hi[i], v) with v = element i of src, for i < n.
template <KvDtype D>
KVTIER_HOT void widen_ranges(const std::byte* __restrict src, std::size_t n, float* __restrict lo,
                             float* __restrict hi) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    const float v = load<D>(src, i);
    lo[i] = v < lo[i] ? v : lo[i];
    hi[i] = v > hi[i] ? v : hi[i];
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

// Min and max of the kLanes lanes in lane order, starting from `first` (the head's first
// element, also lane 0's starting value, so it never changes the result). A chain of kLanes
// dependent selects is slow; a tree of selects gives the same bits whenever the extreme value is
// neither NaN nor ±0 (then every lane holding it holds the same bit pattern), which is checked;
// otherwise the ordered chain runs.
inline void reduce_lanes(const float* lanes_lo, const float* lanes_hi, float first, float& lo,
                         float& hi) noexcept {
  float tree_lo[kLanes];
  float tree_hi[kLanes];
  float sum[kLanes];  // a tree sum: NaN if any lane is NaN (or inf − inf: also the ordered way)
  for (std::size_t k = 0; k < kLanes; ++k) {
    tree_lo[k] = lanes_lo[k];
    tree_hi[k] = lanes_hi[k];
    sum[k] = lanes_lo[k] + lanes_hi[k];
  }
  for (std::size_t width = kLanes / 2; width > 0; width /= 2) {
    for (std::size_t k = 0; k < width; ++k) {
      const float a_lo = tree_lo[k];
      const float b_lo = tree_lo[k + width];
      const float a_hi = tree_hi[k];
      const float b_hi = tree_hi[k + width];
      tree_lo[k] = b_lo < a_lo ? b_lo : a_lo;
      tree_hi[k] = b_hi > a_hi ? b_hi : a_hi;
      sum[k] += sum[k + width];
    }
  }
  if (sum[0] == sum[0] && tree_lo[0] != 0.0f && tree_hi[0] != 0.0f) [[likely]] {
    lo = tree_lo[0];
    hi = tree_hi[0];
    return;
  }
  lo = first;
  hi = first;
  for (std::size_t k = 0; k < kLanes; ++k) {
    lo = lanes_lo[k] < lo ? lanes_lo[k] : lo;
    hi = lanes_hi[k] > hi ? lanes_hi[k] : hi;
  }
}

// Per-head minimum and maximum of x[h·D, (h+1)·D), h < heads, D = dim >= 1. The definition
// (bit-exact when +0 and -0 meet): per head, kLanes lanes start at the first kLanes elements and
// take in each later full chunk of kLanes by lane; then, starting from the head's first element,
// the lanes in lane order, then the tail elements in order.
KVTIER_HOT void head_ranges(const float* __restrict x, std::size_t heads, std::size_t dim,
                            float* __restrict lo, float* __restrict hi) noexcept {
  const std::size_t full = dim / kLanes * kLanes;
  for (std::size_t h = 0; h < heads; ++h) {
    const float* v = x + h * dim;
    float head_lo = v[0];
    float head_hi = v[0];
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
      float out_lo[kLanes];
      float out_hi[kLanes];
      std::memcpy(out_lo, &lanes_lo, sizeof out_lo);
      std::memcpy(out_hi, &lanes_hi, sizeof out_hi);
      reduce_lanes(out_lo, out_hi, v[0], head_lo, head_hi);
    }
    for (std::size_t i = full; i < dim; ++i) {
      head_lo = v[i] < head_lo ? v[i] : head_lo;
      head_hi = v[i] > head_hi ? v[i] : head_hi;
    }
    lo[h] = head_lo;
    hi[h] = head_hi;
  }
}

// Straight from the row (cached: the block's key rows were just read for the ranges).
template <KvDtype D>
KVTIER_HOT void encode_channels(const std::byte* __restrict src, const float* __restrict lo,
                                const float* __restrict inv, std::uint8_t* __restrict codes,
                                std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) codes[i] = encode(load<D>(src, i), lo[i], inv[i]);
}

KVTIER_HOT void encode_head(const float* __restrict x, float lo, float inv,
                            std::uint8_t* __restrict codes, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) codes[i] = encode(x[i], lo, inv);
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

inline bool is_finite(float x) noexcept {
  return (std::bit_cast<std::uint32_t>(x) & 0x7F800000u) != 0x7F800000u;
}

// True when x[0..n) are all finite; a branch-free reduction.
KVTIER_HOT bool all_finite(const float* __restrict x, std::size_t n) noexcept {
  std::uint32_t special = 0;
  for (std::size_t i = 0; i < n; ++i) special |= is_finite(x[i]) ? 0u : 1u;
  return special == 0;
}

// Per-call scratch, uninitialised: one row's values in f32, the channel parameters and the
// per-head value ranges.
struct Scratch {
  explicit Scratch(const Int8Geometry& g)
      : channels(g.channels()),
        heads(g.num_kv_heads),
        floats(std::make_unique_for_overwrite<float[]>(5 * channels + 2 * heads)) {}
  std::size_t channels;
  std::size_t heads;
  std::unique_ptr<float[]> floats;
  float* x() const noexcept { return floats.get(); }
  float* lo() const noexcept { return floats.get() + channels; }
  float* hi() const noexcept { return floats.get() + 2 * channels; }
  float* scale() const noexcept { return floats.get() + 3 * channels; }
  float* inv() const noexcept { return floats.get() + 4 * channels; }
  float* head_lo() const noexcept { return floats.get() + 5 * channels; }
  float* head_hi() const noexcept { return head_lo() + heads; }
};

template <KvDtype D>
void quantize_block_as(const Int8Geometry& g, std::span<const std::byte* const> rows,
                       std::byte* block, const Scratch& s) {
  const std::size_t count = rows.size();
  const std::size_t heads = g.num_kv_heads;
  const std::size_t dim = g.head_dim;
  const std::size_t channels = g.channels();
  const std::size_t elem = dtype_bytes(D);
  const std::size_t row_stride = g.int8_row_bytes();
  const std::size_t used = 8 * heads + 2 * channels;  // of each int8 row; the rest is padding
  std::byte* const first_row = block + g.key_params_bytes();
  float* const lo = s.lo();
  float* const hi = s.hi();
  float* const scale = s.scale();
  float* const inv = s.inv();
  float* const x = s.x();

  // One pass over the rows in memory order (each row's first touch streams): the keys widen the
  // per-channel ranges; the values, complete per token and head, are quantized right away from
  // one f32 copy (the lane pass vectorizes over f32, not over a conversion).
  float* const v_lo = s.head_lo();
  float* const v_hi = s.head_hi();
  for (std::size_t r = 0; r < count; ++r) {
    if (r == 0) {
      start_ranges<D>(rows[0], channels, lo, hi);
    } else {
      widen_ranges<D>(rows[r], channels, lo, hi);
    }
    std::byte* row = first_row + r * row_stride;
    convert<D>(rows[r] + channels * elem, channels, x);
    auto* codes = reinterpret_cast<std::uint8_t*>(row + 8 * heads + channels);
    head_ranges(x, heads, dim, v_lo, v_hi);
    for (std::size_t h = 0; h < heads; ++h) {
      const float range = v_hi[h] - v_lo[h];
      const float v_scale = range / kLevels;
      const float v_inv = range > 0.0f ? kLevels / range : 0.0f;
      std::memcpy(row + h * sizeof(float), &v_scale, sizeof(float));
      std::memcpy(row + (heads + h) * sizeof(float), &v_lo[h], sizeof(float));
      encode_head(x + h * dim, v_lo[h], v_inv, codes + h * dim, dim);
    }
    std::memset(row + used, 0, row_stride - used);
  }

  // Keys: the channel parameters, then codes from the rows again (cached; no f32 copy).
  for (std::size_t c = 0; c < channels; ++c) {
    const float range = hi[c] - lo[c];
    scale[c] = range / kLevels;
    inv[c] = range > 0.0f ? kLevels / range : 0.0f;
  }
  std::memcpy(block, scale, channels * sizeof(float));
  std::memcpy(block + channels * sizeof(float), lo, channels * sizeof(float));
  std::memset(block + 2 * channels * sizeof(float), 0, g.key_params_bytes() - 8 * channels);
  for (std::size_t r = 0; r < count; ++r) {
    encode_channels<D>(rows[r], lo, inv,
                       reinterpret_cast<std::uint8_t*>(first_row + r * row_stride + 8 * heads),
                       channels);
  }
}

template <KvDtype D>
void dequantize_block_as(const Int8Geometry& g, const std::byte* block,
                         std::span<const std::uint32_t> which, std::span<std::byte* const> out,
                         const Scratch& s) {
  const std::size_t heads = g.num_kv_heads;
  const std::size_t dim = g.head_dim;
  const std::size_t channels = g.channels();
  const std::size_t elem = dtype_bytes(D);
  const std::size_t row_stride = g.int8_row_bytes();
  // The block may sit at any address: copy the f32 parameters out instead of aliasing them.
  float* const key_scale = s.scale();
  float* const key_min = s.lo();
  float* const v_scale = s.hi();  // heads <= channels floats each
  float* const v_min = s.inv();
  std::memcpy(key_scale, block, channels * sizeof(float));
  std::memcpy(key_min, block + channels * sizeof(float), channels * sizeof(float));
  const bool keys_finite = all_finite(key_scale, channels) && all_finite(key_min, channels);
  for (std::size_t i = 0; i < which.size(); ++i) {
    const std::byte* row = block + g.key_params_bytes() + which[i] * row_stride;
    std::memcpy(v_scale, row, heads * sizeof(float));
    std::memcpy(v_min, row + heads * sizeof(float), heads * sizeof(float));
    const auto* k_codes = reinterpret_cast<const std::uint8_t*>(row + 8 * heads);
    const std::uint8_t* v_codes = k_codes + channels;
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
void to_f32_as(const std::byte* src, float* dst, std::size_t n) noexcept {
  convert<D>(src, n, dst);
}

template <KvDtype D>
KVTIER_HOT void from_f32_as(const float* __restrict src, std::byte* __restrict dst,
                            std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) store<D>(dst, i, src[i]);
}

// Calls fn.template operator()<D>() for the geometry's dtype (validated: one of the three).
template <class Fn>
void with_dtype(KvDtype dtype, Fn&& fn) {
  switch (dtype) {
    case KvDtype::kF16: fn.template operator()<KvDtype::kF16>(); break;
    case KvDtype::kBf16: fn.template operator()<KvDtype::kBf16>(); break;
    case KvDtype::kF32: fn.template operator()<KvDtype::kF32>(); break;
  }
}

}  // namespace

void to_f32(KvDtype dtype, const std::byte* src, float* dst, std::size_t n) noexcept {
  with_dtype(dtype, [&]<KvDtype D>() { to_f32_as<D>(src, dst, n); });
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
