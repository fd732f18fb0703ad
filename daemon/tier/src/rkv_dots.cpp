// r_kv's digest pass: the Σ split, the scalar loop and the per-process choice of table
// (rkv_dots.hpp).
#include "rkv_dots.hpp"

#include <algorithm>
#include <cmath>

namespace kvtier::tier::detail {
namespace {

template <std::uint32_t kDim>
std::uint32_t scalar_compact(const RankingContext& ctx, const SplitSum& sigma, float* a, float* m) {
  const KeyDigestView& dg = ctx.digests;
  const std::uint32_t dim = kDim != 0 ? kDim : dg.dim;
  const auto size = static_cast<std::uint32_t>(ctx.tiers.size());
  std::uint32_t c = 0;
  for (std::uint32_t i = 0; i < size; ++i) {
    if (!ctx.is_candidate(i)) continue;
    a[c] = ctx.recent[i];
    m[c] = column_sum(dg.codes.data() + std::size_t{i} * dim, dg.inv_norms[i], sigma, dim);
    ++c;
  }
  return c;
}

// The common digest sizes get a fixed trip count, which the compiler unrolls and vectorizes.
std::uint32_t scalar_compact_any(const RankingContext& ctx, const SplitSum& sigma, float* a, float* m) {
  switch (ctx.digests.dim) {
    case 16: return scalar_compact<16>(ctx, sigma, a, m);
    case 32: return scalar_compact<32>(ctx, sigma, a, m);
    case 64: return scalar_compact<64>(ctx, sigma, a, m);
    case 128: return scalar_compact<128>(ctx, sigma, a, m);
    default: return scalar_compact<0>(ctx, sigma, a, m);
  }
}

constexpr RkvDotLoops kScalarLoops{"scalar", &scalar_compact_any};

}  // namespace

SplitSum split_sum(std::span<const std::int64_t> sum, int sum_shift) {
  SplitSum out{};
  std::int64_t peak = 0;
  for (std::int64_t v : sum) peak = std::max(peak, v < 0 ? -v : v);
  int shift = 0;
  while ((peak >> shift) >= (std::int64_t{1} << 30)) ++shift;
  for (std::size_t d = 0; d < sum.size(); ++d) {
    const std::int64_t v = sum[d] >> shift;  // floor: the same for every row
    const std::int64_t hi = v >> 15;
    out.hi[d] = static_cast<std::int16_t>(hi);
    out.lo[d] = static_cast<std::int16_t>(v - hi * 32768);
  }
  out.unit = std::ldexp(1.0, shift - sum_shift);
  return out;
}

const RkvDotLoops& scalar_rkv_dot_loops() noexcept { return kScalarLoops; }

const RkvDotLoops& default_rkv_dot_loops() noexcept {
  static const RkvDotLoops& chosen = []() -> const RkvDotLoops& {
    if (const RkvDotLoops* loops = avx2_rkv_dot_loops()) return *loops;
    return scalar_rkv_dot_loops();
  }();
  return chosen;
}

}  // namespace kvtier::tier::detail
