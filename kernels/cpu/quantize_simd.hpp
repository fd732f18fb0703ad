// Private to the int8 tier: the SIMD loops of one table (quantize_loops.hpp), written once over a
// vector type V and included by quantize_avx2.cpp and quantize_avx512.cpp inside their target
// region (so every function here is compiled for that instruction set), after the includes this
// file needs (quantize_blocks.hpp, quantize_loops.hpp, <cstring>) and after V. Not a standalone
// header: it includes nothing, so that no header is first read inside a target region.
//
// V provides, all static and inline: kLanes; F (kLanes floats) with load/store (unaligned),
// set1, add, sub, mul, div, min(a, b) = a < b ? a : b and max(a, b) = a > b ? a : b (exactly
// the scalar selects, NaN and ±0 included: minps/maxps return the second operand unless the
// comparison holds), positive_or_zero(c, x) = c > 0 ? x : +0, any_not_finite, reduce_min/max/add
// (any order); I (kLanes uint32) with seti, andi, ori, addi, subi (wrapping), shli/shri (logical),
// gti (signed >, a mask) and select(mask, a, b); bits/floats (bit casts); load_u16 / store_u16
// (kLanes uint16, zero-extended / narrowed: the stored values are always below 2^16);
// load_codes (kLanes bytes as floats) and store_codes (truncation of floats in [0, 256)).
//
// Exactness against the scalar table (quantize_scalar.cpp): the dtype conversions are the integer
// expressions of quantize.hpp / quantize_blocks.hpp lane by lane; ranges use the same selects in
// the same element order (key channels: rows in order; value heads: the same 16 lanes, so the
// definition of head_range() holds bit for bit); every f32 expression is the scalar one, without
// contraction; tails run the scalar helpers.
#pragma once

namespace kvtier::kernels::detail {
namespace {

template <class V, KvDtype D>
inline typename V::F load_as(const std::byte* p) noexcept {
  if constexpr (D == KvDtype::kF32) {
    return V::load(reinterpret_cast<const float*>(p));
  } else if constexpr (D == KvDtype::kBf16) {
    return V::floats(V::template shli<16>(V::load_u16(p)));
  } else {  // f16_to_f32
    const auto h = V::load_u16(p);
    const auto sign = V::template shli<16>(V::andi(h, V::seti(0x8000u)));
    const auto em = V::andi(h, V::seti(0x7FFFu));
    const auto shifted = V::template shli<13>(em);
    const auto mag = V::bits(V::mul(V::floats(shifted), V::set1(0x1p112f)));
    const auto special = V::ori(shifted, V::seti(0x7F800000u));  // inf, NaN
    return V::floats(V::ori(V::select(V::gti(em, V::seti(0x7BFFu)), special, mag), sign));
  }
}

template <class V, KvDtype D, bool kNoNaN = false>
inline void store_as(std::byte* p, typename V::F x) noexcept {
  if constexpr (D == KvDtype::kF32) {
    V::store(reinterpret_cast<float*>(p), x);
  } else if constexpr (D == KvDtype::kBf16) {  // bf16_select; kNoNaN: the rounding alone
    const auto u = V::bits(x);
    const auto odd = V::andi(V::template shri<16>(u), V::seti(1u));
    auto out = V::template shri<16>(V::addi(V::addi(u, V::seti(0x7FFFu)), odd));
    if constexpr (!kNoNaN) {
      const auto nan = V::ori(V::template shri<16>(u), V::seti(0x0040u));
      out = V::select(V::gti(V::andi(u, V::seti(0x7FFFFFFFu)), V::seti(0x7F800000u)), nan, out);
    }
    V::store_u16(p, out);
  } else {  // f16_select
    const auto all = V::bits(x);
    const auto sign = V::andi(V::template shri<16>(all), V::seti(0x8000u));
    const auto u = V::andi(all, V::seti(0x7FFFFFFFu));
    const auto big = V::select(V::gti(u, V::seti(0x7F800000u)), V::seti(0x7E00u), V::seti(0x7C00u));
    const auto tiny = V::subi(V::bits(V::add(V::floats(u), V::set1(0.5f))), V::seti(0x3F000000u));
    const auto odd = V::andi(V::template shri<13>(u), V::seti(1u));
    const auto normal = V::template shri<13>(V::addi(V::addi(u, V::seti(0xC8000FFFu)), odd));
    const auto small = V::select(V::gti(V::seti(0x38800000u), u), tiny, normal);
    V::store_u16(p, V::ori(V::select(V::gti(u, V::seti(0x477FFFFFu)), big, small), sign));
  }
}

// The code of x before truncation: encode() (kInRange false) or encode_in_range() (true), whose
// `t >= 0 ? t : 0` differs from max(t, 0) only at t = ±0, which truncate alike.
template <class V, bool kInRange>
inline typename V::F code_of(typename V::F x, typename V::F lo, typename V::F inv) noexcept {
  const auto zero = V::set1(0.0f);
  const auto v = V::mul(V::sub(x, lo), inv);
  if constexpr (kInRange) return V::max(V::add(v, V::set1(0.5f)), zero);
  return V::add(V::min(V::max(v, zero), V::set1(255.0f)), V::set1(0.5f));
}

template <class V, KvDtype D>
void to_f32_v(const std::byte* src, float* dst, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) V::store(dst + i, load_as<V, D>(src + i * dtype_bytes(D)));
  for (; i < n; ++i) dst[i] = load<D>(src, i);
}

template <class V, KvDtype D>
void from_f32_v(const float* src, std::byte* dst, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) store_as<V, D>(dst + i * dtype_bytes(D), V::load(src + i));
  for (; i < n; ++i) store<D>(dst, i, src[i]);
}

template <class V, KvDtype D, std::size_t K>
inline void widen_k(const std::byte* const* rows, std::size_t n, float* lo, float* hi) noexcept {
  std::size_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) {
    auto l = V::load(lo + i);
    auto h = V::load(hi + i);
    for (std::size_t k = 0; k < K; ++k) {
      const auto v = load_as<V, D>(rows[k] + i * dtype_bytes(D));
      l = V::min(v, l);
      h = V::max(v, h);
    }
    V::store(lo + i, l);
    V::store(hi + i, h);
  }
  for (; i < n; ++i) {
    for (std::size_t k = 0; k < K; ++k) {
      const float v = load<D>(rows[k], i);
      lo[i] = v < lo[i] ? v : lo[i];
      hi[i] = v > hi[i] ? v : hi[i];
    }
  }
}

template <class V, KvDtype D>
void widen_v(const std::byte* const* rows, std::size_t k, std::size_t n, float* lo,
             float* hi) noexcept {
  if (k == kWidenRows) {
    widen_k<V, D, kWidenRows>(rows, n, lo, hi);
  } else {
    for (std::size_t r = 0; r < k; ++r) widen_k<V, D, 1>(rows + r, n, lo, hi);
  }
}

// head_range() of quantize_scalar.cpp: 16 lanes (kParts vectors) start at v[0, 16) and take each
// later full chunk of 16 by lane; then the lanes are reduced, then the tail elements in order.
// The reduction may run in any order where the scalar one's tree is exact (no NaN lane, extremes
// not ±0: then every lane holding the extreme holds the same bits); otherwise the ordered chain
// runs. `held` may differ from the scalar one only when the lane sum overflows to inf − inf
// without a NaN lane; the range then holds every element either way, and encode() and
// encode_in_range() give the same codes for such elements.
template <class V>
inline bool head_range_v(const float* v, std::size_t dim, float& lo, float& hi) noexcept {
  constexpr std::size_t kRangeLanes = 16;
  constexpr std::size_t kParts = kRangeLanes / V::kLanes;
  static_assert(kParts * V::kLanes == kRangeLanes);
  const std::size_t full = dim / kRangeLanes * kRangeLanes;
  bool held = true;
  lo = v[0];
  hi = v[0];
  if (full != 0) {
    typename V::F l[kParts], h[kParts];
    for (std::size_t p = 0; p < kParts; ++p) h[p] = l[p] = V::load(v + p * V::kLanes);
    for (std::size_t i = kRangeLanes; i < full; i += kRangeLanes) {
      for (std::size_t p = 0; p < kParts; ++p) {
        const auto w = V::load(v + i + p * V::kLanes);
        l[p] = V::min(w, l[p]);
        h[p] = V::max(w, h[p]);
      }
    }
    auto lo_all = l[0], hi_all = h[0], sum = V::add(l[0], h[0]);
    for (std::size_t p = 1; p < kParts; ++p) {
      lo_all = V::min(l[p], lo_all);
      hi_all = V::max(h[p], hi_all);
      sum = V::add(sum, V::add(l[p], h[p]));
    }
    const float tree_lo = V::reduce_min(lo_all), tree_hi = V::reduce_max(hi_all);
    const float total = V::reduce_add(sum);
    if (total == total && tree_lo != 0.0f && tree_hi != 0.0f) [[likely]] {
      lo = tree_lo;
      hi = tree_hi;
    } else {
      float out_lo[kRangeLanes], out_hi[kRangeLanes];
      for (std::size_t p = 0; p < kParts; ++p) {
        V::store(out_lo + p * V::kLanes, l[p]);
        V::store(out_hi + p * V::kLanes, h[p]);
      }
      for (std::size_t k = 0; k < kRangeLanes; ++k) {
        lo = out_lo[k] < lo ? out_lo[k] : lo;
        hi = out_hi[k] > hi ? out_hi[k] : hi;
      }
      held = total == total;
    }
  }
  for (std::size_t i = full; i < dim; ++i) {
    lo = v[i] < lo ? v[i] : lo;
    hi = v[i] > hi ? v[i] : hi;
  }
  return held;
}

template <class V, bool kInRange>
inline void encode_head(const float* v, float lo, float inv, std::uint8_t* out,
                        std::size_t n) noexcept {
  const auto lo_v = V::set1(lo), inv_v = V::set1(inv);
  std::size_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) {
    V::store_codes(out + i, code_of<V, kInRange>(V::load(v + i), lo_v, inv_v));
  }
  for (; i < n; ++i) out[i] = kInRange ? encode_in_range(v[i], lo, inv) : encode(v[i], lo, inv);
}

template <class V, KvDtype D>
void quantize_values_v(const std::byte* src, const shm::Int8BlockShape& shape, float* x,
                       std::byte* row) noexcept {
  const std::size_t heads = shape.num_kv_heads, dim = shape.head_dim;
  const std::size_t scale_at = shape.value_scale_offset(), min_at = shape.value_min_offset();
  to_f32_v<V, D>(src, x, heads * dim);
  auto* const codes = reinterpret_cast<std::uint8_t*>(row + shape.value_codes_offset());
  for (std::size_t h = 0; h < heads; ++h) {
    const float* v = x + h * dim;
    float lo, hi;
    const bool held = head_range_v<V>(v, dim, lo, hi);
    const float range = hi - lo;
    const float scale = range / kLevels;
    const float inv = range > 0.0f ? kLevels / range : 0.0f;
    std::memcpy(row + scale_at + h * sizeof(float), &scale, sizeof(float));
    std::memcpy(row + min_at + h * sizeof(float), &lo, sizeof(float));
    if (held && is_finite(inv)) {
      encode_head<V, true>(v, lo, inv, codes + h * dim, dim);
    } else {
      encode_head<V, false>(v, lo, inv, codes + h * dim, dim);
    }
  }
}

template <class V, KvDtype D, bool kInRange>
inline void encode_keys_k(const std::byte* src, const float* lo, const float* inv,
                          std::uint8_t* codes, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) {
    const auto x = load_as<V, D>(src + i * dtype_bytes(D));
    V::store_codes(codes + i, code_of<V, kInRange>(x, V::load(lo + i), V::load(inv + i)));
  }
  for (; i < n; ++i) {
    const float x = load<D>(src, i);
    codes[i] = kInRange ? encode_in_range(x, lo[i], inv[i]) : encode(x, lo[i], inv[i]);
  }
}

template <class V, KvDtype D>
void encode_keys_v(const std::byte* src, const float* lo, const float* inv, bool in_range,
                   std::uint8_t* codes, std::size_t n) noexcept {
  if (in_range) {
    encode_keys_k<V, D, true>(src, lo, inv, codes, n);
  } else {
    encode_keys_k<V, D, false>(src, lo, inv, codes, n);
  }
}

template <class V, KvDtype D, bool kNoNaN>
inline void decode_keys_k(const std::uint8_t* codes, const float* lo, const float* scale,
                          std::byte* out, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) {
    const auto x = V::add(V::load(lo + i), V::mul(V::load_codes(codes + i), V::load(scale + i)));
    store_as<V, D, kNoNaN>(out + i * dtype_bytes(D), x);
  }
  for (; i < n; ++i) store<D, kNoNaN>(out, i, lo[i] + static_cast<float>(codes[i]) * scale[i]);
}

template <class V, KvDtype D>
void decode_keys_v(const std::uint8_t* codes, const float* lo, const float* scale, bool finite,
                   std::byte* out, std::size_t n) noexcept {
  if (finite) {
    decode_keys_k<V, D, true>(codes, lo, scale, out, n);
  } else {
    decode_keys_k<V, D, false>(codes, lo, scale, out, n);
  }
}

template <class V, KvDtype D, bool kNoNaN>
inline void decode_head_v(const std::uint8_t* codes, float lo, float scale, std::byte* out,
                          std::size_t n) noexcept {
  const auto lo_v = V::set1(lo), scale_v = V::set1(scale);
  std::size_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) {
    store_as<V, D, kNoNaN>(out + i * dtype_bytes(D),
                           V::add(lo_v, V::mul(V::load_codes(codes + i), scale_v)));
  }
  for (; i < n; ++i) store<D, kNoNaN>(out, i, lo + static_cast<float>(codes[i]) * scale);
}

template <class V, KvDtype D>
void decode_values_v(const std::uint8_t* codes, const float* min, const float* scale,
                     std::size_t heads, std::size_t dim, std::byte* out) noexcept {
  for (std::size_t h = 0; h < heads; ++h) {
    std::byte* head = out + h * dim * dtype_bytes(D);
    if (is_finite(min[h]) && is_finite(scale[h])) {
      decode_head_v<V, D, true>(codes + h * dim, min[h], scale[h], head, dim);
    } else {
      decode_head_v<V, D, false>(codes + h * dim, min[h], scale[h], head, dim);
    }
  }
}

template <class V>
bool all_finite_v(const float* x, std::size_t n) noexcept {
  bool special = false;
  std::size_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) special |= V::any_not_finite(V::load(x + i));
  for (; i < n; ++i) special |= !is_finite(x[i]);
  return !special;
}

template <class V>
bool key_params_v(const float* lo, const float* hi, float* scale, float* inv,
                  std::size_t n) noexcept {
  bool special = false;
  std::size_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) {
    const auto range = V::sub(V::load(hi + i), V::load(lo + i));
    V::store(scale + i, V::div(range, V::set1(kLevels)));
    const auto iv = V::positive_or_zero(range, V::div(V::set1(kLevels), range));
    V::store(inv + i, iv);
    special |= V::any_not_finite(iv);
  }
  for (; i < n; ++i) {
    const float range = hi[i] - lo[i];
    scale[i] = range / kLevels;
    inv[i] = range > 0.0f ? kLevels / range : 0.0f;
    special |= !is_finite(inv[i]);
  }
  return !special;
}

template <class V, KvDtype D>
constexpr Int8DtypeLoops simd_dtype_loops() noexcept {
  return {to_f32_v<V, D>,       from_f32_v<V, D>,    widen_v<V, D>,
          quantize_values_v<V, D>, encode_keys_v<V, D>, decode_keys_v<V, D>,
          decode_values_v<V, D>};
}

template <class V>
constexpr Int8Loops simd_loops(Int8Isa isa) noexcept {
  return {isa,
          key_params_v<V>,
          all_finite_v<V>,
          simd_dtype_loops<V, KvDtype::kF16>(),
          simd_dtype_loops<V, KvDtype::kBf16>(),
          simd_dtype_loops<V, KvDtype::kF32>()};
}

}  // namespace
}  // namespace kvtier::kernels::detail
