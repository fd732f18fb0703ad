// The AVX-512 race-key loop (race_keys.hpp): race_keys_avx2.cpp's method on eight tokens per
// iteration, with the 64-bit multiplies and conversions AVX-512DQ has. The same checks make
// every key race_key()'s float; the same pragma rule applies (no FMA enabled, none fused).
#include "race_keys.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

// GCC 12's AVX-512 headers leave the pass-through of unmasked intrinsics uninitialized on
// purpose, which -Wmaybe-uninitialized reports once inlined (GCC bug 105593, fixed in 13).
// Vectors are passed by value only between inline functions of this file (internal linkage).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512dq,avx512vl"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl")
#endif

namespace kvtier::tier::detail {
namespace {

inline __m512i splitmix8(__m512i x) noexcept {
  const auto c = [](std::uint64_t v) { return _mm512_set1_epi64(static_cast<std::int64_t>(v)); };
  x = _mm512_add_epi64(x, c(0x9E3779B97F4A7C15ull));
  x = _mm512_mullo_epi64(_mm512_xor_si512(x, _mm512_srli_epi64(x, 30)), c(0xBF58476D1CE4E5B9ull));
  x = _mm512_mullo_epi64(_mm512_xor_si512(x, _mm512_srli_epi64(x, 27)), c(0x94D049BB133111EBull));
  return _mm512_xor_si512(x, _mm512_srli_epi64(x, 31));
}

// −ln u as neg_log4 in race_keys_avx2.cpp (same reduction, series and error bound).
inline __m512d neg_log8(__m512d u) noexcept {
  const __m512i bits = _mm512_castpd_si512(u);
  __m512d m = _mm512_castsi512_pd(
      _mm512_or_si512(_mm512_and_si512(bits, _mm512_set1_epi64(0x000FFFFFFFFFFFFF)),
                      _mm512_set1_epi64(0x3FF0000000000000)));
  __m512d k = _mm512_sub_pd(_mm512_cvtepu64_pd(_mm512_srli_epi64(bits, 52)), _mm512_set1_pd(1023.0));
  const __mmask8 big = _mm512_cmp_pd_mask(m, _mm512_set1_pd(1.4142135623730951), _CMP_GT_OQ);
  m = _mm512_mask_mul_pd(m, big, m, _mm512_set1_pd(0.5));
  k = _mm512_mask_add_pd(k, big, k, _mm512_set1_pd(1.0));
  const __m512d f = _mm512_sub_pd(m, _mm512_set1_pd(1.0));
  const __m512d s = _mm512_div_pd(f, _mm512_add_pd(f, _mm512_set1_pd(2.0)));
  const __m512d z = _mm512_mul_pd(s, s);
  auto horner = [z](__m512d p, double c) {
    return _mm512_add_pd(_mm512_mul_pd(p, z), _mm512_set1_pd(c));
  };
  __m512d p = _mm512_set1_pd(1.0 / 17);
  p = horner(horner(horner(p, 1.0 / 15), 1.0 / 13), 1.0 / 11);
  p = horner(horner(horner(horner(p, 1.0 / 9), 1.0 / 7), 1.0 / 5), 1.0 / 3);
  const __m512d two_s = _mm512_add_pd(s, s);
  const __m512d ln_m = _mm512_add_pd(two_s, _mm512_mul_pd(two_s, _mm512_mul_pd(z, p)));
  const __m512d ln_u = _mm512_add_pd(_mm512_mul_pd(k, _mm512_set1_pd(0.69314718055994531)), ln_m);
  return _mm512_castsi512_pd(  // a sign flip, so that u = 1 gives −0 as −std::log(1.0) does
      _mm512_xor_si512(_mm512_castpd_si512(ln_u), _mm512_set1_epi64(INT64_MIN)));
}

void avx512_keys(std::uint64_t prefix, std::uint32_t first_position, const float* recent,
                 const float* ranges, CutPoint reserve, float* keys, std::size_t n) {
  if (ranges != nullptr && reserve.key >= 0x80000000u) ranges = nullptr;  // rank n: none reserved
  const __m512i pre = _mm512_set1_epi64(static_cast<std::int64_t>(prefix));
  const __m512d largest = _mm512_set1_pd(double{std::numeric_limits<float>::max()});
  const __m512d below = _mm512_set1_pd(1.0 - 0x1p-40);
  const __m512d above = _mm512_set1_pd(1.0 + 0x1p-40);
  const __m256i lane32 = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0);
  const __m256i cut_key = _mm256_set1_epi32(static_cast<int>(reserve.key));
  const __m256i cut_index = _mm256_set1_epi32(static_cast<int>(reserve.index));
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const auto base = static_cast<std::uint32_t>(first_position + i);
    const __m512i position = _mm512_cvtepu32_epi64(  // mod 2^32, as the scalar
        _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(base)), lane32));
    const __m512i h = splitmix8(_mm512_xor_si512(pre, position));
    const __m512d whole = _mm512_cvtepu64_pd(_mm512_srli_epi64(h, 11));  // < 2^53: exact
    const __m512d u = _mm512_mul_pd(_mm512_add_pd(whole, _mm512_set1_pd(0.5)), _mm512_set1_pd(0x1p-53));
    const __m512d e = neg_log8(u);
    const __m256 a_f = _mm256_loadu_ps(recent + i);
    const __m512d q = _mm512_div_pd(_mm512_cvtps_pd(a_f), e);
    const __m256 lo = _mm512_cvtpd_ps(_mm512_min_pd(_mm512_mul_pd(q, below), largest));
    const __m256 hi = _mm512_cvtpd_ps(_mm512_min_pd(_mm512_mul_pd(q, above), largest));
    const __mmask8 positive = _mm256_cmp_ps_mask(a_f, _mm256_setzero_ps(), _CMP_GT_OQ);
    __m256 key = _mm256_maskz_mov_ps(positive, lo);  // a <= 0 (or NaN): key 0
    __mmask8 unsure = _mm256_mask_cmp_ps_mask(positive, lo, hi, _CMP_NEQ_UQ);
    if (ranges != nullptr) {
      const __m256i rk = _mm256_castps_si256(_mm256_loadu_ps(ranges + i));
      const __m256i index = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(i)), lane32);
      const __mmask8 reserved = static_cast<__mmask8>(
          _mm256_cmp_epu32_mask(rk, cut_key, _MM_CMPINT_NLE) |
          (_mm256_cmp_epu32_mask(rk, cut_key, _MM_CMPINT_EQ) &
           _mm256_cmp_epu32_mask(index, cut_index, _MM_CMPINT_NLT)));
      key = _mm256_mask_mov_ps(key, reserved, _mm256_set1_ps(std::numeric_limits<float>::infinity()));
      unsure = static_cast<__mmask8>(unsure & ~reserved);
    }
    _mm256_storeu_ps(keys + i, key);
    for (unsigned bits = unsure; bits != 0; bits &= bits - 1) {
      const auto j = static_cast<std::uint32_t>(__builtin_ctz(bits));
      keys[i + j] = race_key(prefix, base + j, recent[i + j]);
    }
  }
  for (; i < n; ++i) {
    const auto index = static_cast<std::uint32_t>(i);
    keys[i] = ranges != nullptr && !reserve.below(score_key(ranges[i]), index)
                  ? std::numeric_limits<float>::infinity()
                  : race_key(prefix, first_position + index, recent[i]);
  }
}

constexpr RaceLoops kAvx512Loops{"avx512", &avx512_keys};

}  // namespace
}  // namespace kvtier::tier::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace kvtier::tier::detail {

const RaceLoops* avx512_race_loops() noexcept {
  __builtin_cpu_init();
  const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512vl");
  return ok ? &kAvx512Loops : nullptr;
}

}  // namespace kvtier::tier::detail

#else  // not x86-64

namespace kvtier::tier::detail {
const RaceLoops* avx512_race_loops() noexcept { return nullptr; }
}  // namespace kvtier::tier::detail

#endif
