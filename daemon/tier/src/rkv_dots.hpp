// Internal to r_kv (policy_rkv.cpp): pass A of its decision, the one pass that reads every
// candidate's key digest. For each candidate c (range index i, in position order) it writes
// a[c] = recent attention and m[c] = Σ_{i'≠i} S_i'i = k̂_i·Σ − |k̂_i|², the column sum of
// policy.hpp's r_kv definition before its sparing corrections.
//
// The dot k̂_i·Σ is exact: Σ (a fixed-point sum) is split as Σ >> shift = hi·2^15 + lo with
// int16 halves, so q·(Σ >> shift) = (q·hi)·2^15 + q·lo with both halves int32 sums of int8 ×
// int16 products; m is then inv·(dot·unit) − [inv > 0] in double, rounded once to float.
//
// The loop exists per instruction set, the widest this CPU runs chosen once per process (as
// race_keys.hpp does for vase). Every table writes column_sum()'s float bit for bit: the integer
// dot is exact in any order, and the double steps are the same operations in the same order.
#pragma once

#include <cstdint>
#include <span>

#include "kvtier/tier/policy.hpp"
#include "kvtier/tier/token_features.hpp"

namespace kvtier::tier::detail {

struct SplitSum {
  std::int16_t hi[TokenFeatures::kMaxDigestDim];
  std::int16_t lo[TokenFeatures::kMaxDigestDim];
  double unit = 0.0;  // value of one unit of the recombined dot
};

// sum in units of 2^-sum_shift, shifted right (the same floor for every row) until every
// component is below 2^30 in magnitude: then |q·hi| <= 256·127·2^15 < 2^31.
SplitSum split_sum(std::span<const std::int64_t> sum, int sum_shift);

// The definition, for one row of dim int8 codes q with inverse norm inv.
inline float column_sum(const std::int8_t* q, float inv, const SplitSum& s, std::uint32_t dim) noexcept {
  std::int32_t hi = 0;
  std::int32_t lo = 0;
  for (std::uint32_t d = 0; d < dim; ++d) {
    hi += std::int32_t{q[d]} * s.hi[d];
    lo += std::int32_t{q[d]} * s.lo[d];
  }
  const double dot = static_cast<double>(std::int64_t{hi} * 32768 + lo);
  const double w = inv;
  return static_cast<float>(w * (dot * s.unit) - (w > 0.0 ? 1.0 : 0.0));
}

struct RkvDotLoops {
  const char* isa;
  // a[c] = ctx.recent[i] and m[c] = column_sum(row i) for the c-th candidate i of ctx (range
  // order); returns the number of candidates. Precondition: ctx.digests.dim > 0.
  std::uint32_t (*compact)(const RankingContext& ctx, const SplitSum& sigma, float* a, float* m);
};

const RkvDotLoops& scalar_rkv_dot_loops() noexcept;
const RkvDotLoops* avx2_rkv_dot_loops() noexcept;  // null: not built for or not run by this CPU
const RkvDotLoops& default_rkv_dot_loops() noexcept;

}  // namespace kvtier::tier::detail
