// The AVX-512 table of int8 loops (quantize_loops.hpp): quantize_simd.hpp over 16-lane AVX-512F
// vectors (one register holds the 16 range lanes of a value head). Compiled in a target region,
// not with a file-wide -mavx512f, for the reason given in quantize_avx2.cpp; the table is used
// only where the CPU and OS support AVX-512F.
#include "quantize_loops.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

// GCC 12's avx512fintrin.h makes its "undefined" vectors by self-initialisation (`__m512 __Y =
// __Y;`), which -Wmaybe-uninitialized reports once inlined (GCC bug 105593, fixed in 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "quantize_blocks.hpp"

// Vectors are passed by value only between inline functions of this file (internal linkage).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f")
#endif

namespace kvtier::kernels::detail {
namespace {

struct Avx512 {
  static constexpr std::size_t kLanes = 16;
  using F = __m512;
  using I = __m512i;
  using M = __mmask16;

  static F load(const float* p) noexcept { return _mm512_loadu_ps(p); }
  static void store(float* p, F v) noexcept { _mm512_storeu_ps(p, v); }
  static F set1(float x) noexcept { return _mm512_set1_ps(x); }
  static F add(F a, F b) noexcept { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) noexcept { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) noexcept { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) noexcept { return _mm512_div_ps(a, b); }
  static F min(F a, F b) noexcept { return _mm512_min_ps(a, b); }  // a < b ? a : b
  static F max(F a, F b) noexcept { return _mm512_max_ps(a, b); }  // a > b ? a : b
  static F positive_or_zero(F c, F x) noexcept {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(c, _mm512_setzero_ps(), _CMP_GT_OQ), x);
  }
  static bool any_not_finite(F x) noexcept {
    const I exponent = seti(0x7F800000u);
    return _mm512_cmpeq_epi32_mask(andi(bits(x), exponent), exponent) != 0;
  }
  static float reduce_min(F v) noexcept { return _mm512_reduce_min_ps(v); }
  static float reduce_max(F v) noexcept { return _mm512_reduce_max_ps(v); }
  static float reduce_add(F v) noexcept { return _mm512_reduce_add_ps(v); }

  static I seti(std::uint32_t x) noexcept { return _mm512_set1_epi32(static_cast<int>(x)); }
  static I andi(I a, I b) noexcept { return _mm512_and_si512(a, b); }
  static I ori(I a, I b) noexcept { return _mm512_or_si512(a, b); }
  static I addi(I a, I b) noexcept { return _mm512_add_epi32(a, b); }
  static I subi(I a, I b) noexcept { return _mm512_sub_epi32(a, b); }
  template <int kBits>
  static I shli(I a) noexcept { return _mm512_slli_epi32(a, kBits); }
  template <int kBits>
  static I shri(I a) noexcept { return _mm512_srli_epi32(a, kBits); }
  static M gti(I a, I b) noexcept { return _mm512_cmpgt_epi32_mask(a, b); }
  static I select(M m, I a, I b) noexcept { return _mm512_mask_blend_epi32(m, b, a); }
  static I bits(F x) noexcept { return _mm512_castps_si512(x); }
  static F floats(I x) noexcept { return _mm512_castsi512_ps(x); }

  static I load_u16(const std::byte* p) noexcept {
    return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static void store_u16(std::byte* p, I x) noexcept {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(x));
  }
  static F load_codes(const std::uint8_t* p) noexcept {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(bytes));
  }
  // t in [0, 256): the truncated codes 0..255, narrowed by truncation.
  static void store_codes(std::uint8_t* p, F t) noexcept {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(t)));
  }
};

}  // namespace
}  // namespace kvtier::kernels::detail

#include "quantize_simd.hpp"

namespace kvtier::kernels::detail {
namespace {
constexpr Int8Loops kAvx512Loops = simd_loops<Avx512>(Int8Isa::kAvx512);
}  // namespace
}  // namespace kvtier::kernels::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace kvtier::kernels::detail {

const Int8Loops* avx512_int8_loops() noexcept {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") ? &kAvx512Loops : nullptr;
}

}  // namespace kvtier::kernels::detail

#else  // not x86-64

namespace kvtier::kernels::detail {
const Int8Loops* avx512_int8_loops() noexcept { return nullptr; }
}  // namespace kvtier::kernels::detail

#endif
