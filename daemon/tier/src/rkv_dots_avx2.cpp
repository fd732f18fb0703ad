// The AVX2 digest pass of r_kv (rkv_dots.hpp): eight rows at a time, each row's 16-code
// chunks widened to int16 and multiplied against Σ's halves with vpmaddwd, the eight rows'
// partial sums reduced together, the four double steps of column_sum() on four rows per vector.
// Digest sizes that are not a multiple of 16 take the scalar loop. The target region is a
// pragma, not a file-wide -mavx2, so that inline functions of shared headers are never emitted
// with AVX2 instructions (race_keys_avx2.cpp has the same rule). No FMA is enabled, so no
// a·b + c is fused and the double steps round as the scalar ones do.
#include "rkv_dots.hpp"

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

constexpr std::uint32_t kRows = 8;      // rows reduced together
constexpr std::uint32_t kBlock = 256;  // rows per block_sums call (a multiple of kRows)

// Lane r = the sum of x[r]'s eight int32 lanes.
inline __m256i sum_rows(const __m256i* x) noexcept {
  const __m256i x01 = _mm256_hadd_epi32(x[0], x[1]);
  const __m256i x23 = _mm256_hadd_epi32(x[2], x[3]);
  const __m256i x45 = _mm256_hadd_epi32(x[4], x[5]);
  const __m256i x67 = _mm256_hadd_epi32(x[6], x[7]);
  const __m256i low = _mm256_hadd_epi32(x01, x23);   // rows 0-3, each 128-bit half a partial
  const __m256i high = _mm256_hadd_epi32(x45, x67);  // rows 4-7 likewise
  return _mm256_add_epi32(_mm256_permute2x128_si256(low, high, 0x20),
                          _mm256_permute2x128_si256(low, high, 0x31));
}

// column_sum()'s double steps for four rows: hi·2^15 + lo (exact: below 2^47 in magnitude),
// then w·(dot·unit) − [w > 0].
inline __m128 finish(__m128i hi, __m128i lo, const float* inv, double unit) noexcept {
  const __m256d dot = _mm256_add_pd(_mm256_mul_pd(_mm256_cvtepi32_pd(hi), _mm256_set1_pd(32768.0)),
                                    _mm256_cvtepi32_pd(lo));
  const __m256d w = _mm256_cvtps_pd(_mm_loadu_ps(inv));
  const __m256d one = _mm256_and_pd(_mm256_cmp_pd(w, _mm256_setzero_pd(), _CMP_GT_OQ), _mm256_set1_pd(1.0));
  return _mm256_cvtpd_ps(_mm256_sub_pd(_mm256_mul_pd(w, _mm256_mul_pd(dot, _mm256_set1_pd(unit))), one));
}

// out[r] = column_sum(row r) for the rows of a block of kBlock rows starting at codes / inv.
void block_sums(const std::int8_t* codes, const float* inv, std::uint32_t dim, const SplitSum& sigma,
                float* out) noexcept {
  const std::uint32_t chunks = dim / 16;
  for (std::uint32_t first = 0; first < kBlock; first += kRows) {
    __m256i hi[kRows];
    __m256i lo[kRows];
    for (std::uint32_t r = 0; r < kRows; ++r) {
      const std::int8_t* q = codes + std::size_t{first + r} * dim;
      _mm_prefetch(reinterpret_cast<const char*>(q) + 2048, _MM_HINT_T0);
      __m256i h = _mm256_setzero_si256();
      __m256i l = _mm256_setzero_si256();
      for (std::uint32_t j = 0; j < chunks; ++j) {
        const __m256i x = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * j)));
        h = _mm256_add_epi32(h, _mm256_madd_epi16(x, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sigma.hi + 16 * j))));
        l = _mm256_add_epi32(l, _mm256_madd_epi16(x, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sigma.lo + 16 * j))));
      }
      hi[r] = h;
      lo[r] = l;
    }
    const __m256i hs = sum_rows(hi);
    const __m256i ls = sum_rows(lo);
    _mm_storeu_ps(out + first, finish(_mm256_castsi256_si128(hs), _mm256_castsi256_si128(ls), inv + first, sigma.unit));
    _mm_storeu_ps(out + first + 4, finish(_mm256_extracti128_si256(hs, 1), _mm256_extracti128_si256(ls, 1), inv + first + 4, sigma.unit));
  }
}

}  // namespace
}  // namespace kvtier::tier::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace kvtier::tier::detail {
namespace {

// Blocks of kBlock range rows through block_sums, compacted to their candidates; the last partial
// block row by row.
std::uint32_t avx2_compact(const RankingContext& ctx, const SplitSum& sigma, float* a, float* m) {
  const KeyDigestView& dg = ctx.digests;
  if (dg.dim % 16 != 0) return scalar_rkv_dot_loops().compact(ctx, sigma, a, m);
  const auto size = static_cast<std::uint32_t>(ctx.tiers.size());
  const float* recent = ctx.recent.data();
  float sums[kBlock];
  std::uint32_t c = 0;
  std::uint32_t i = 0;
  for (; i + kBlock <= size; i += kBlock) {
    block_sums(dg.codes.data() + std::size_t{i} * dg.dim, dg.inv_norms.data() + i, dg.dim, sigma, sums);
    for (std::uint32_t r = 0; r < kBlock; ++r) {
      if (!ctx.is_candidate(i + r)) continue;
      a[c] = recent[i + r];
      m[c] = sums[r];
      ++c;
    }
  }
  for (; i < size; ++i) {
    if (!ctx.is_candidate(i)) continue;
    a[c] = recent[i];
    m[c] = column_sum(dg.codes.data() + std::size_t{i} * dg.dim, dg.inv_norms[i], sigma, dg.dim);
    ++c;
  }
  return c;
}

constexpr RkvDotLoops kAvx2Loops{"avx2", &avx2_compact};

}  // namespace

const RkvDotLoops* avx2_rkv_dot_loops() noexcept {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") ? &kAvx2Loops : nullptr;
}

}  // namespace kvtier::tier::detail

#else  // not x86-64

namespace kvtier::tier::detail {
const RkvDotLoops* avx2_rkv_dot_loops() noexcept { return nullptr; }
}  // namespace kvtier::tier::detail

#endif
