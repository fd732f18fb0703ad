// The AVX2 table of int8 loops (quantize_loops.hpp): quantize_simd.hpp over 8-lane AVX2 vectors.
// Every function of the target region below is compiled for AVX2 (a pragma, not a file-wide
// -mavx2: then inline functions of shared headers could be emitted with AVX2 instructions and
// picked by the linker for callers on any CPU); the table is used only where the CPU has AVX2.
#include "quantize_loops.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#include <cstring>

#include "quantize_blocks.hpp"

// Vectors are passed by value only between inline functions of this file (internal linkage),
// so the ABI note that GCC gives for them is moot.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2")
#endif

namespace kvtier::kernels::detail {
namespace {

struct Avx2 {
  static constexpr std::size_t kLanes = 8;
  using F = __m256;
  using I = __m256i;
  using M = __m256i;  // all-ones lanes where true

  static F load(const float* p) noexcept { return _mm256_loadu_ps(p); }
  static void store(float* p, F v) noexcept { _mm256_storeu_ps(p, v); }
  static F set1(float x) noexcept { return _mm256_set1_ps(x); }
  static F add(F a, F b) noexcept { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) noexcept { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) noexcept { return _mm256_mul_ps(a, b); }
  static F div(F a, F b) noexcept { return _mm256_div_ps(a, b); }
  static F min(F a, F b) noexcept { return _mm256_min_ps(a, b); }  // a < b ? a : b
  static F max(F a, F b) noexcept { return _mm256_max_ps(a, b); }  // a > b ? a : b
  static F positive_or_zero(F c, F x) noexcept {
    return _mm256_and_ps(_mm256_cmp_ps(c, _mm256_setzero_ps(), _CMP_GT_OQ), x);
  }
  static bool any_not_finite(F x) noexcept {
    const I exponent = seti(0x7F800000u);
    return _mm256_movemask_epi8(_mm256_cmpeq_epi32(andi(bits(x), exponent), exponent)) != 0;
  }
  static float reduce_min(F v) noexcept {
    __m128 m = _mm_min_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    m = _mm_min_ps(_mm_movehl_ps(m, m), m);
    return _mm_cvtss_f32(_mm_min_ss(_mm_shuffle_ps(m, m, 1), m));
  }
  static float reduce_max(F v) noexcept {
    __m128 m = _mm_max_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    m = _mm_max_ps(_mm_movehl_ps(m, m), m);
    return _mm_cvtss_f32(_mm_max_ss(_mm_shuffle_ps(m, m, 1), m));
  }
  static float reduce_add(F v) noexcept {
    __m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    s = _mm_add_ps(_mm_movehl_ps(s, s), s);
    return _mm_cvtss_f32(_mm_add_ss(_mm_shuffle_ps(s, s, 1), s));
  }

  static I seti(std::uint32_t x) noexcept { return _mm256_set1_epi32(static_cast<int>(x)); }
  static I andi(I a, I b) noexcept { return _mm256_and_si256(a, b); }
  static I ori(I a, I b) noexcept { return _mm256_or_si256(a, b); }
  static I addi(I a, I b) noexcept { return _mm256_add_epi32(a, b); }
  static I subi(I a, I b) noexcept { return _mm256_sub_epi32(a, b); }
  template <int kBits>
  static I shli(I a) noexcept { return _mm256_slli_epi32(a, kBits); }
  template <int kBits>
  static I shri(I a) noexcept { return _mm256_srli_epi32(a, kBits); }
  static M gti(I a, I b) noexcept { return _mm256_cmpgt_epi32(a, b); }
  static I select(M m, I a, I b) noexcept { return _mm256_blendv_epi8(b, a, m); }
  static I bits(F x) noexcept { return _mm256_castps_si256(x); }
  static F floats(I x) noexcept { return _mm256_castsi256_ps(x); }

  static I load_u16(const std::byte* p) noexcept {
    return _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  // Values below 2^16, so the unsigned saturation of packus never bites.
  static void store_u16(std::byte* p, I x) noexcept {
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
  }
  static F load_codes(const std::uint8_t* p) noexcept {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
  }
  // t in [0, 256): the truncated codes 0..255, which the saturating packs keep as they are.
  static void store_codes(std::uint8_t* p, F t) noexcept {
    const I codes = _mm256_cvttps_epi32(t);
    const __m128i words = _mm_packus_epi32(_mm256_castsi256_si128(codes), _mm256_extracti128_si256(codes, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packus_epi16(words, words));
  }
};

}  // namespace
}  // namespace kvtier::kernels::detail

#include "quantize_simd.hpp"

namespace kvtier::kernels::detail {
namespace {
constexpr Int8Loops kAvx2Loops = simd_loops<Avx2>(Int8Isa::kAvx2);
}  // namespace
}  // namespace kvtier::kernels::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace kvtier::kernels::detail {

const Int8Loops* avx2_int8_loops() noexcept {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") ? &kAvx2Loops : nullptr;
}

}  // namespace kvtier::kernels::detail

#else  // not x86-64

namespace kvtier::kernels::detail {
const Int8Loops* avx2_int8_loops() noexcept { return nullptr; }
}  // namespace kvtier::kernels::detail

#endif
