// r_kv: λ·(max-pooled recent attention) − (1 − λ)·softmax(column-mean key cosine similarity with
// the newest near-duplicate spared) (policy.hpp documents the definition, its cost and the
// sampling bound; rkv_sparing.cpp holds the sparing search).
//
// Passes, with candidates compacted in position order (index c): (A) dense recent attention
// a_c and raw column sums k̂_c·Σ − |k̂_c|² from the sequence's digest sum Σ; the horizon's
// corrections; (B) e_c = exp(m_c) and the sums Σ e, Σ p; (C) Z_c and its minimum; (D) keys
// scattered back to range indices. Every pass streams; only (A) reads the digests.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "kvtier/base/check.hpp"
#include "kvtier/tier/token_features.hpp"

#include "policies.hpp"
#include "rkv_dots.hpp"
#include "rkv_sparing.hpp"

namespace kvtier::tier::detail {
namespace {

constexpr std::uint32_t kPoolRadius = 3;  // width-7 max pool (R-KV kernel_size = 7)

// Σ_c k̂_c over the candidates as fixed point: the sequence's exact sum when the context
// carries it, else summed from the rows (a context built by hand) in units of 2^-40.
SplitSum digest_sum(const RankingContext& ctx) {
  const KeyDigestView& dg = ctx.digests;
  if (!dg.sum.empty()) {
    KVTIER_CHECK(dg.sum.size() == dg.dim, "r_kv: digest sum of the wrong dimension");
    return split_sum(dg.sum, dg.sum_shift);
  }
  constexpr int kShift = 40;
  std::vector<std::int64_t> sum(dg.dim, 0);
  for (std::size_t i = 0; i < ctx.tiers.size(); ++i) {
    if (!ctx.is_candidate(i)) continue;
    const std::int8_t* q = dg.codes.data() + i * dg.dim;
    const std::int64_t w = std::llround(std::ldexp(static_cast<double>(dg.inv_norms[i]), kShift));
    for (std::uint32_t d = 0; d < dg.dim; ++d) sum[d] += w * q[d];
  }
  return split_sum(sum, kShift);
}

// The horizon: range indices of the `count` newest candidates, newest first.
std::vector<std::uint32_t> newest_candidates(const RankingContext& ctx, std::size_t count) {
  std::vector<std::uint32_t> out;
  out.reserve(count);
  for (std::size_t i = ctx.tiers.size(); i > 0 && out.size() < count; --i) {
    if (ctx.is_candidate(i - 1)) out.push_back(static_cast<std::uint32_t>(i - 1));
  }
  return out;
}

// a[c] := max(a[c−3..c+3]) (width-7 max pool in candidate order, clipped at both ends), in place:
// the three originals to the left ride along in registers. a >= 0, so 0 pads the ends.
void max_pool(float* a, std::uint32_t n) noexcept {
  float l3 = 0.0f;
  float l2 = 0.0f;
  float l1 = 0.0f;
  auto step = [&](std::uint32_t c, float right) {
    const float x = a[c];
    a[c] = std::max(std::max(std::max(l3, l2), std::max(l1, x)), right);
    l3 = l2;
    l2 = l1;
    l1 = x;
  };
  std::uint32_t c = 0;
  for (; c + kPoolRadius < n; ++c) step(c, std::max(std::max(a[c + 1], a[c + 2]), a[c + 3]));
  for (; c < n; ++c) {
    float right = 0.0f;
    for (std::uint32_t k = c + 1; k < n; ++k) right = std::max(right, a[k]);
    step(c, right);
  }
}

// e^x in float for |x| <= 80 (the caller passes column means, |x| <= 3): x = k·ln 2 + r with
// |r| <= ln 2 / 2, e^r by its degree-6 Taylor polynomial (truncation < 2^-23 relative), 2^k from
// the exponent bits. Within a few ulp of std::exp, and plain arithmetic without a branch (a clamp
// would be one: float compares may trap), so loops over it vectorize.
inline float exp_small(float x) noexcept {
  constexpr float kLog2e = 1.44269504f;
  constexpr float kLn2Hi = 0.693145751953125f;  // ln 2 = hi + lo, hi with a short mantissa
  constexpr float kLn2Lo = 1.428606765330187e-06f;
  constexpr float kRound = 12582912.0f;  // 1.5·2^23: adding it rounds to an integer
  const float k = (x * kLog2e + kRound) - kRound;
  const float r = (x - k * kLn2Hi) - k * kLn2Lo;
  const float p =
      1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
  const auto bits = static_cast<std::uint32_t>(static_cast<std::int32_t>(k) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}

}  // namespace

std::span<const float> RKvPolicy::rank(const RankingContext& ctx,
                                       std::vector<float>& scratch) const {
  const std::size_t size = ctx.tiers.size();
  KVTIER_CHECK(ctx.recent.size() == size, "r_kv: recent attention missing from the ranking context");
  scratch.resize(size);
  const std::uint32_t n = ctx.candidates;
  if (n == 0) {
    std::fill(scratch.begin(), scratch.end(), 0.0f);
    return scratch;
  }
  std::vector<float> local;
  std::vector<float>& aux = ctx.workspace != nullptr ? *ctx.workspace : local;
  aux.resize(n);
  float* a = aux.data();      // recent attention per candidate
  float* m = scratch.data();  // [0, n): m, then e, then Z; scattered to range indices at the end

  // (A) Column sums over every row (diagonal excluded), then the sparing corrections of the
  // horizon columns.
  const KeyDigestView& dg = ctx.digests;
  std::uint32_t counted = 0;
  if (dg.dim != 0) {
    counted = default_rkv_dot_loops().compact(ctx, digest_sum(ctx), a, m);
    const std::vector<std::uint32_t> horizon =
        newest_candidates(ctx, std::min<std::size_t>(ctx.params->redundancy_horizon, n));
    const std::vector<double> spared = sparing_corrections(ctx, horizon);
    for (std::size_t k = 0; k < horizon.size(); ++k) {
      m[n - 1 - k] = static_cast<float>(static_cast<double>(m[n - 1 - k]) - spared[k]);
    }
  } else {
    for (std::size_t i = 0; i < size; ++i) {
      if (ctx.is_candidate(i)) a[counted++] = ctx.recent[i];
    }
    std::fill_n(m, n, 0.0f);  // no digests: similar to nothing, R uniform
  }
  KVTIER_CHECK(counted == n, "r_kv: candidate count mismatch");

  max_pool(a, n);  // a is now p

  // (B) Softmax numerators. m_c = column sum / n lies in [-1, 1] (a mean of cosines; a sampled
  // correction can reach -2), so exp needs no shift for stability. Sums in kLanes partial sums
  // (added in a fixed order) so no single dependency chain sets the pace.
  constexpr std::uint32_t kLanes = 4;
  const double inv_n = 1.0 / static_cast<double>(n);
  double pooled_lanes[kLanes] = {};
  double exp_lanes[kLanes] = {};
  const auto inv_nf = static_cast<float>(inv_n);
  for (std::uint32_t c = 0; c < n; ++c) m[c] = exp_small(m[c] * inv_nf);
  for (std::uint32_t c = 0; c < n; ++c) {
    exp_lanes[c % kLanes] += m[c];
    pooled_lanes[c % kLanes] += a[c];
  }
  const double pooled_total = (pooled_lanes[0] + pooled_lanes[1]) + (pooled_lanes[2] + pooled_lanes[3]);
  const double exp_total = (exp_lanes[0] + exp_lanes[1]) + (exp_lanes[2] + exp_lanes[3]);

  // (C) Z_c = λ·I_c − (1 − λ)·R_c with I = p / Σp (0 if Σp = 0) and R = e / Σe.
  const double lambda = ctx.params->rkv_lambda;
  const auto wi = static_cast<float>(pooled_total > 0.0 ? lambda / pooled_total : 0.0);
  const auto wr = static_cast<float>((1.0 - lambda) / exp_total);
  float lowest_lanes[kLanes];
  std::fill_n(lowest_lanes, kLanes, std::numeric_limits<float>::infinity());
  for (std::uint32_t c = 0; c < n; ++c) {
    m[c] = wi * a[c] - wr * m[c];
    lowest_lanes[c % kLanes] = std::min(lowest_lanes[c % kLanes], m[c]);
  }
  const float lowest = std::min(std::min(lowest_lanes[0], lowest_lanes[1]),
                                std::min(lowest_lanes[2], lowest_lanes[3]));

  // (D) key = Z − min Z at the candidate's range index. Backwards: range index i >= candidate
  // index c, so m[c] is read before anything at or below it is overwritten.
  std::uint32_t c = n;
  for (std::size_t i = size; i > 0; --i) {
    if (ctx.is_candidate(i - 1)) {
      scratch[i - 1] = m[--c] - lowest;
    } else {
      scratch[i - 1] = 0.0f;
    }
  }
  return scratch;
}

}  // namespace kvtier::tier::detail
