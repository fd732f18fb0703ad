// Internal to vase (policy_vase.cpp): the exponential-race keys of policy.hpp's vase definition,
// key_i = a_i / E_i with E_i = −ln u(seed, step, position) (a_i <= 0: key 0), evaluated in double
// and rounded once to float, clamped to the largest finite float.
//
// The loops exist per instruction set, the widest this CPU runs chosen once per process (a
// function-local static, as kernels/cpu/quantize_dispatch.cpp does). Every table writes exactly
// race_key()'s float for every token: the scalar one calls it; the AVX2 and AVX-512 ones evaluates ln by its
// own polynomial (relative error below 2^-46, far inside the 2^-40 margin it checks), proves that
// every value within 2^-40 of its quotient rounds to the same float — then so does the exact
// quotient, as rounding to float is monotone — and calls race_key() for the few tokens (about
// 2^-15 of them) where it cannot.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "kvtier/tier/cut_selector.hpp"
#include "random_draw.hpp"

namespace kvtier::tier::detail {

// The definition, for one token: prefix = draw_prefix(seed, step).
inline float race_key(std::uint64_t prefix, std::uint32_t position, float recent) noexcept {
  const double a = recent;
  if (!(a > 0.0)) return 0.0f;  // a = 0 never wins
  const double e = -std::log(draw_at(prefix, position));
  return static_cast<float>(std::min(a / e, double{std::numeric_limits<float>::max()}));
}

struct RaceLoops {
  const char* isa;
  // keys[i] = +inf where ranges is not null and (score_key(ranges[i]), i) is not below
  // `reserve` (the reserved tokens), else race_key(prefix, first_position + i (mod 2^32),
  // recent[i]), for i < n. Precondition: n < 2^32.
  void (*keys)(std::uint64_t prefix, std::uint32_t first_position, const float* recent,
               const float* ranges, CutPoint reserve, float* keys, std::size_t n);
};

const RaceLoops& scalar_race_loops() noexcept;
const RaceLoops* avx2_race_loops() noexcept;    // null: not built for or not run by this CPU
const RaceLoops* avx512_race_loops() noexcept;  // AVX-512F + DQ + VL; null likewise
const RaceLoops& default_race_loops() noexcept;

}  // namespace kvtier::tier::detail
