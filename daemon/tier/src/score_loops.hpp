// Private to kvtier_tier: the two loops every score record runs through (SequenceTiers::
// add_scores, TokenFeatures::add_recent), written with SSE2 intrinsics where the target has them
// (every x86-64 build: SSE2 is its baseline, so no run-time dispatch is needed) and plain loops
// elsewhere. Written out because at -O2, the level of the packaged build, GCC 12 vectorizes
// only loops of known trip count, and a record holds a variable 1..60 values; the results are
// those of the plain loops (a boolean, and one f32 addition per element).
// Thread-safety: pure functions; destinations must not be shared.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kvtier/tier/tier.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace kvtier::tier::detail {

// A score is valid when it is +0, -0 or positive and finite. Adding +0 turns -0 into +0 and
// leaves every other value (NaN included) as it is; after that the valid values are exactly the
// bit patterns below +inf's, as uint32 (a set sign bit, an all-ones exponent: invalid).
inline std::uint32_t score_bits(float v) noexcept { return std::bit_cast<std::uint32_t>(v + 0.0f); }
inline constexpr std::uint32_t kFirstInvalidBits = 0x7F800000u;  // +inf

// Whether every value is valid; no early exit (the common case is a record with no bad value).
inline bool all_valid_scores(const float* v, std::size_t n) noexcept {
  std::size_t i = 0;
  std::uint32_t bad = 0;
#if defined(__SSE2__)
  // As int32: valid is 0 <= bits <= 0x7F7FFFFF. Large positives are caught by the compare, the
  // negatives by the sign bits OR-ed together.
  __m128i large = _mm_setzero_si128(), signs = _mm_setzero_si128();
  const __m128i last_valid = _mm_set1_epi32(static_cast<int>(kFirstInvalidBits - 1u));
  for (; i + 4 <= n; i += 4) {
    const __m128i bits = _mm_castps_si128(_mm_add_ps(_mm_loadu_ps(v + i), _mm_setzero_ps()));
    large = _mm_or_si128(large, _mm_cmpgt_epi32(bits, last_valid));
    signs = _mm_or_si128(signs, bits);
  }
  bad = static_cast<std::uint32_t>(_mm_movemask_epi8(large) | _mm_movemask_ps(_mm_castsi128_ps(signs)));
#endif
  for (; i < n; ++i) bad |= score_bits(v[i]) >= kFirstInvalidBits ? 1u : 0u;
  return bad == 0;
}

// dst[i] += values[i] unless tiers[i] is T3 (then += +0: a T3 entry stays 0). +0 + -0 is +0, so
// a -0 value never makes an entry -0. The masked +0 is what the select `t != kT3 ? v : 0.0f`
// gives too.
inline void add_unless_dropped(float* __restrict dst, const Tier* __restrict tiers,
                               const float* __restrict values, std::size_t n) noexcept {
  std::size_t i = 0;
#if defined(__SSE2__)
  const __m128i dropped = _mm_set1_epi32(static_cast<int>(Tier::kT3));
  const __m128i zero = _mm_setzero_si128();
  for (; i + 4 <= n; i += 4) {
    std::int32_t four;
    std::memcpy(&four, tiers + i, sizeof four);
    const __m128i t = _mm_unpacklo_epi16(_mm_unpacklo_epi8(_mm_cvtsi32_si128(four), zero), zero);
    const __m128 drop = _mm_castsi128_ps(_mm_cmpeq_epi32(t, dropped));
    const __m128 add = _mm_andnot_ps(drop, _mm_loadu_ps(values + i));
    _mm_storeu_ps(dst + i, _mm_add_ps(_mm_loadu_ps(dst + i), add));
  }
#endif
  for (; i < n; ++i) {
    const std::uint32_t keep = 0u - static_cast<std::uint32_t>(tiers[i] != Tier::kT3);
    dst[i] += std::bit_cast<float>(std::bit_cast<std::uint32_t>(values[i]) & keep);
  }
}

}  // namespace kvtier::tier::detail
