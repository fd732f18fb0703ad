// The AVX2 race-key loop (race_keys.hpp): four tokens per iteration, ln by a polynomial, each key
// checked to round to the same float as the definition's and recomputed by race_key() if not.
// The target region is a pragma, not a file-wide -mavx2, so that inline functions of shared
// headers (race_key, std::min) are never emitted with AVX2 instructions (quantize_avx2.cpp has
// the same rule). No FMA is enabled, so no a·b + c is fused.
#include "race_keys.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

// Vectors are passed by value only between inline functions of this file (internal linkage).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2")
#endif

namespace kvtier::tier::detail {
namespace {

// x · c mod 2^64 per lane (AVX2 has no 64-bit low multiply): lo·lo + ((hi·lo_c + lo·hi_c) << 32).
inline __m256i mul64(__m256i x, std::uint64_t c) noexcept {
  const __m256i c_lo = _mm256_set1_epi64x(static_cast<std::int64_t>(c & 0xFFFFFFFFu));
  const __m256i c_hi = _mm256_set1_epi64x(static_cast<std::int64_t>(c >> 32));
  const __m256i lo_lo = _mm256_mul_epu32(x, c_lo);
  const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(x, 32), c_lo),
                                         _mm256_mul_epu32(x, c_hi));
  return _mm256_add_epi64(lo_lo, _mm256_slli_epi64(cross, 32));
}

inline __m256i splitmix4(__m256i x) noexcept {
  x = _mm256_add_epi64(x, _mm256_set1_epi64x(static_cast<std::int64_t>(0x9E3779B97F4A7C15ull)));
  x = mul64(_mm256_xor_si256(x, _mm256_srli_epi64(x, 30)), 0xBF58476D1CE4E5B9ull);
  x = mul64(_mm256_xor_si256(x, _mm256_srli_epi64(x, 27)), 0x94D049BB133111EBull);
  return _mm256_xor_si256(x, _mm256_srli_epi64(x, 31));
}

// Exact double of each lane's integer v < 2^52 (2^52 + v has v as its mantissa).
inline __m256d small_to_double(__m256i v) noexcept {
  const __m256i magic = _mm256_set1_epi64x(0x4330000000000000);
  return _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(v, magic)),
                       _mm256_castsi256_pd(magic));
}

// u = ((h >> 11) + 0.5) · 2^-53, the same double as draw_at: h >> 11 < 2^53 converts exactly as
// its high 21 and low 32 bits, and + 0.5 rounds as the scalar sum does.
inline __m256d uniform4(__m256i h) noexcept {
  const __m256i v = _mm256_srli_epi64(h, 11);
  const __m256d hi = small_to_double(_mm256_srli_epi64(v, 32));
  const __m256d lo = small_to_double(_mm256_and_si256(v, _mm256_set1_epi64x(0xFFFFFFFF)));
  const __m256d whole = _mm256_add_pd(_mm256_mul_pd(hi, _mm256_set1_pd(0x1p32)), lo);
  return _mm256_mul_pd(_mm256_add_pd(whole, _mm256_set1_pd(0.5)), _mm256_set1_pd(0x1p-53));
}

// −ln u for u in (0, 1). u = 2^k·m with m in [√½, √2), ln m = 2·atanh(s), s = (m − 1)/(m + 1),
// |s| <= 0.1716: the series to s^17 leaves a relative truncation below 2^-53; m − 1 is exact,
// and the few roundings keep the whole within 2^-48 relative (|−ln u| >= 0.346 when k != 0, so
// k·ln 2 + ln m does not cancel).
inline __m256d neg_log4(__m256d u) noexcept {
  const __m256i bits = _mm256_castpd_si256(u);
  const __m256i mantissa_bits = _mm256_set1_epi64x(0x000FFFFFFFFFFFFF);
  __m256d m = _mm256_castsi256_pd(
      _mm256_or_si256(_mm256_and_si256(bits, mantissa_bits), _mm256_set1_epi64x(0x3FF0000000000000)));
  __m256d k = _mm256_sub_pd(small_to_double(_mm256_srli_epi64(bits, 52)), _mm256_set1_pd(1023.0));
  const __m256d big = _mm256_cmp_pd(m, _mm256_set1_pd(1.4142135623730951), _CMP_GT_OQ);
  m = _mm256_blendv_pd(m, _mm256_mul_pd(m, _mm256_set1_pd(0.5)), big);
  k = _mm256_add_pd(k, _mm256_and_pd(big, _mm256_set1_pd(1.0)));
  const __m256d f = _mm256_sub_pd(m, _mm256_set1_pd(1.0));
  const __m256d s = _mm256_div_pd(f, _mm256_add_pd(f, _mm256_set1_pd(2.0)));
  const __m256d z = _mm256_mul_pd(s, s);
  auto horner = [z](__m256d p, double c) {
    return _mm256_add_pd(_mm256_mul_pd(p, z), _mm256_set1_pd(c));
  };
  __m256d p = _mm256_set1_pd(1.0 / 17);
  p = horner(horner(horner(p, 1.0 / 15), 1.0 / 13), 1.0 / 11);
  p = horner(horner(horner(horner(p, 1.0 / 9), 1.0 / 7), 1.0 / 5), 1.0 / 3);
  const __m256d two_s = _mm256_add_pd(s, s);
  const __m256d ln_m = _mm256_add_pd(two_s, _mm256_mul_pd(two_s, _mm256_mul_pd(z, p)));
  const __m256d ln_u = _mm256_add_pd(_mm256_mul_pd(k, _mm256_set1_pd(0.69314718055994531)), ln_m);
  // A sign flip, not 0 − x: u rounds to 1 once in 2^53 draws, and then −ln u is −0 (as the
  // definition's −std::log(1.0), whose quotient is −inf).
  return _mm256_xor_pd(ln_u, _mm256_set1_pd(-0.0));
}

// Lanes whose (range key, index) is not below the cut. Range keys are below 2^31 (non-negative
// floats); indices compare unsigned (bias by 2^31, then a signed compare).
inline __m128 reserved4(const float* ranges, std::uint32_t first_index, CutPoint cut) noexcept {
  const __m128i bias = _mm_set1_epi32(static_cast<int>(0x80000000u));
  const __m128i key = _mm_castps_si128(_mm_loadu_ps(ranges));
  const __m128i cut_key = _mm_set1_epi32(static_cast<int>(cut.key));
  const __m128i index = _mm_xor_si128(
      _mm_add_epi32(_mm_set1_epi32(static_cast<int>(first_index)), _mm_set_epi32(3, 2, 1, 0)), bias);
  const __m128i cut_index = _mm_xor_si128(_mm_set1_epi32(static_cast<int>(cut.index)), bias);
  const __m128i above = _mm_cmpgt_epi32(key, cut_key);
  const __m128i at_or_after = _mm_andnot_si128(_mm_cmpgt_epi32(cut_index, index),
                                               _mm_cmpeq_epi32(key, cut_key));
  return _mm_castsi128_ps(_mm_or_si128(above, at_or_after));
}

void avx2_keys(std::uint64_t prefix, std::uint32_t first_position, const float* recent,
               const float* ranges, CutPoint reserve, float* keys, std::size_t n) {
  if (ranges != nullptr && reserve.key >= 0x80000000u) ranges = nullptr;  // rank n: none reserved
  const __m128 infinity = _mm_set1_ps(std::numeric_limits<float>::infinity());
  const __m256i lane = _mm256_set_epi64x(3, 2, 1, 0);
  const __m256i low32 = _mm256_set1_epi64x(0xFFFFFFFF);
  const __m256i pre = _mm256_set1_epi64x(static_cast<std::int64_t>(prefix));
  const __m256d largest = _mm256_set1_pd(double{std::numeric_limits<float>::max()});
  const __m256d below = _mm256_set1_pd(1.0 - 0x1p-40);
  const __m256d above = _mm256_set1_pd(1.0 + 0x1p-40);
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const auto base = static_cast<std::uint32_t>(first_position + i);
    const __m256i position = _mm256_and_si256(
        _mm256_add_epi64(_mm256_set1_epi64x(base), lane), low32);  // mod 2^32, as the scalar
    const __m256d e = neg_log4(uniform4(splitmix4(_mm256_xor_si256(pre, position))));
    const __m128 a_f = _mm_loadu_ps(recent + i);
    const __m256d a = _mm256_cvtps_pd(a_f);
    const __m256d q = _mm256_div_pd(a, e);
    const __m128 lo = _mm256_cvtpd_ps(_mm256_min_pd(_mm256_mul_pd(q, below), largest));
    const __m128 hi = _mm256_cvtpd_ps(_mm256_min_pd(_mm256_mul_pd(q, above), largest));
    const __m128 positive = _mm_cmpgt_ps(a_f, _mm_setzero_ps());
    __m128 key = _mm_and_ps(lo, positive);  // a <= 0 (or NaN): key 0
    __m128 unsure_lanes = _mm_andnot_ps(_mm_cmpeq_ps(lo, hi), positive);
    if (ranges != nullptr) {
      const __m128 reserved = reserved4(ranges + i, static_cast<std::uint32_t>(i), reserve);
      key = _mm_blendv_ps(key, infinity, reserved);
      unsure_lanes = _mm_andnot_ps(reserved, unsure_lanes);
    }
    _mm_storeu_ps(keys + i, key);
    const int unsure = _mm_movemask_ps(unsure_lanes);
    if (unsure != 0) {
      for (std::size_t j = 0; j < 4; ++j) {
        if (((unsure >> j) & 1) != 0) {
          keys[i + j] = race_key(prefix, base + static_cast<std::uint32_t>(j), recent[i + j]);
        }
      }
    }
  }
  for (; i < n; ++i) {
    const auto index = static_cast<std::uint32_t>(i);
    keys[i] = ranges != nullptr && !reserve.below(score_key(ranges[i]), index)
                  ? std::numeric_limits<float>::infinity()
                  : race_key(prefix, first_position + index, recent[i]);
  }
}

constexpr RaceLoops kAvx2Loops{"avx2", &avx2_keys};

}  // namespace
}  // namespace kvtier::tier::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace kvtier::tier::detail {

const RaceLoops* avx2_race_loops() noexcept {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") ? &kAvx2Loops : nullptr;
}

}  // namespace kvtier::tier::detail

#else  // not x86-64

namespace kvtier::tier::detail {
const RaceLoops* avx2_race_loops() noexcept { return nullptr; }
}  // namespace kvtier::tier::detail

#endif
