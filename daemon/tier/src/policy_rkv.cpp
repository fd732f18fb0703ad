// r_kv: λ·(max-pooled recent attention) − (1 − λ)·softmax(column-mean key cosine similarity with
// the newest near-duplicate spared) (policy.hpp documents the definition and its cost).
#include <algorithm>
#include <cmath>
#include <limits>

#include "kvtier/protocol/check.hpp"

#include "policies.hpp"

namespace kvtier::tier::detail {
namespace {

constexpr std::uint32_t kPoolRadius = 3;  // width-7 max pool (R-KV kernel_size = 7)

// The sparing search compares a row against the horizon's digests in segments of columns stored
// transposed ([d][column], int16), so the inner loop has a fixed trip count and the compiler
// vectorizes it at -O2. The first segment is narrow (real keys share a direction, so a row's
// newest near-duplicate is usually among the very newest candidates and the search stops
// there); the rest are wide (fewer, longer loops when near-duplicates are rare).
constexpr std::size_t kFirstWidth = 16;
constexpr std::size_t kWidth = 64;

struct Segment {
  std::size_t first = 0;   // horizon column of its first column (0 = newest candidate)
  std::size_t width = 0;   // kFirstWidth or kWidth (the last one padded with zero columns)
  std::size_t offset = 0;  // into codes / inv_norms: dim·width codes, width norms
};

struct Horizon {
  std::vector<Segment> segments;
  std::vector<std::int16_t> codes;
  std::vector<float> inv_norms;     // 0 for padding columns
  std::vector<std::size_t> column;  // candidate index per horizon column, newest first
  std::size_t size = 0;
};

Horizon build_horizon(const KeyDigestView& dg, const std::vector<std::uint32_t>& cand,
                      std::size_t size) {
  Horizon hz;
  hz.size = size;
  std::size_t codes = 0;
  std::size_t norms = 0;
  for (std::size_t first = 0; first < size;) {
    const std::size_t width = first == 0 ? kFirstWidth : kWidth;
    hz.segments.push_back({first, width, norms});
    codes += dg.dim * width;
    norms += width;
    first += width;
  }
  hz.codes.assign(codes, 0);
  hz.inv_norms.assign(norms, 0.0f);
  hz.column.resize(size);
  for (const Segment& seg : hz.segments) {
    for (std::size_t k = 0; k < seg.width && seg.first + k < size; ++k) {
      const std::size_t c = cand.size() - 1 - (seg.first + k);
      hz.column[seg.first + k] = c;
      hz.inv_norms[seg.offset + k] = dg.inv_norms[cand[c]];
      const std::int8_t* q = dg.codes.data() + std::size_t{cand[c]} * dg.dim;
      std::int16_t* block = hz.codes.data() + seg.offset * dg.dim;
      for (std::uint32_t d = 0; d < dg.dim; ++d) block[d * seg.width + k] = q[d];
    }
  }
  return hz;
}

// cosine[k] = row_inv · inv_norms[k] · (q · column k) for the kWidthT columns of one segment.
template <std::size_t kWidthT>
void segment_cosines(const std::int16_t* block, const float* inv_norms, std::uint32_t dim,
                     const std::int8_t* q, float row_inv, float* cosine) noexcept {
  std::int32_t acc[kWidthT] = {};
  for (std::uint32_t d = 0; d < dim; ++d) {
    const std::int16_t qd = q[d];  // int16 × int16 → int32: a widening multiply (pmullw/pmulhw)
    const std::int16_t* col = block + d * kWidthT;
    for (std::size_t k = 0; k < kWidthT; ++k) acc[k] += std::int32_t{qd} * std::int32_t{col[k]};
  }
  for (std::size_t k = 0; k < kWidthT; ++k) {
    cosine[k] = static_cast<float>(acc[k]) * inv_norms[k] * row_inv;
  }
}

// I over the candidates (index c into `cand`): max pool of width 7 in candidate order, then
// normalized to sum 1 (all 0 if every a is 0).
std::vector<double> importance(const RankingContext& ctx, const std::vector<std::uint32_t>& cand) {
  const std::size_t n = cand.size();
  std::vector<double> pooled(n);
  double total = 0.0;
  for (std::size_t c = 0; c < n; ++c) {
    const std::size_t lo = c >= kPoolRadius ? c - kPoolRadius : 0;
    const std::size_t hi = std::min(n - 1, c + kPoolRadius);
    float best = 0.0f;
    for (std::size_t k = lo; k <= hi; ++k) best = std::max(best, ctx.recent[cand[k]]);
    pooled[c] = best;
    total += best;
  }
  for (double& p : pooled) p = total > 0.0 ? p / total : 0.0;
  return pooled;
}

// Column means m_c = (1/n)·Σ_i S'_ic, S' = cosine similarity with a zero diagonal and each row's
// newest near-duplicate (within the horizon) zeroed.
std::vector<double> column_means(const RankingContext& ctx,
                                 const std::vector<std::uint32_t>& cand) {
  const std::size_t n = cand.size();
  std::vector<double> m(n, 0.0);
  const KeyDigestView& dg = ctx.digests;
  if (dg.dim == 0 || n == 0) return m;
  const std::uint32_t dim = dg.dim;
  auto row = [&](std::size_t c) { return dg.codes.data() + std::size_t{cand[c]} * dim; };
  auto inv = [&](std::size_t c) { return static_cast<double>(dg.inv_norms[cand[c]]); };

  // Σ_i S_ic over all i (diagonal included) = k̂_c · Σ_i k̂_i; the diagonal adds |k̂_c|² = 1
  // (0 for a zero digest).
  std::vector<double> sum(dim, 0.0);
  for (std::size_t c = 0; c < n; ++c) {
    const std::int8_t* q = row(c);
    const double w = inv(c);
    for (std::uint32_t d = 0; d < dim; ++d) sum[d] += w * q[d];
  }
  for (std::size_t c = 0; c < n; ++c) {
    const std::int8_t* q = row(c);
    double s = 0.0;
    for (std::uint32_t d = 0; d < dim; ++d) s += static_cast<double>(q[d]) * sum[d];
    m[c] = inv(c) * s - (inv(c) > 0.0 ? 1.0 : 0.0);
  }

  // Sparing: row i's newest near-duplicate j (searched newest first among the horizon newest
  // candidates) loses S_ij from its column.
  const std::size_t horizon = std::min<std::size_t>(ctx.params->redundancy_horizon, n);
  const double threshold = ctx.params->rkv_threshold;
  const Horizon hz = build_horizon(dg, cand, horizon);
  float cosine[kWidth];
  for (std::size_t i = 0; i < n; ++i) {
    const double wi = inv(i);
    if (wi == 0.0) continue;  // a zero digest is similar to nothing
    const std::int8_t* qi = row(i);
    bool found = false;
    for (std::size_t s = 0; !found && s < hz.segments.size(); ++s) {
      const Segment& seg = hz.segments[s];
      const std::int16_t* block = hz.codes.data() + seg.offset * dim;
      const float* norms = hz.inv_norms.data() + seg.offset;
      if (seg.width == kFirstWidth) {
        segment_cosines<kFirstWidth>(block, norms, dim, qi, static_cast<float>(wi), cosine);
      } else {
        segment_cosines<kWidth>(block, norms, dim, qi, static_cast<float>(wi), cosine);
      }
      const std::size_t end = std::min(seg.width, horizon - seg.first);
      for (std::size_t k = 0; k < end; ++k) {
        const std::size_t j = hz.column[seg.first + k];
        if (static_cast<double>(cosine[k]) > threshold && j != i) {
          m[j] -= static_cast<double>(cosine[k]);
          found = true;
          break;
        }
      }
    }
  }
  const double scale = 1.0 / static_cast<double>(n);
  for (double& x : m) x *= scale;
  return m;
}

}  // namespace

std::span<const float> RKvPolicy::rank(const RankingContext& ctx,
                                       std::vector<float>& scratch) const {
  const std::size_t size = ctx.tiers.size();
  KVTIER_CHECK(ctx.recent.size() == size, "r_kv: recent attention missing from the ranking context");
  scratch.assign(size, 0.0f);
  std::vector<std::uint32_t> cand;
  cand.reserve(ctx.candidates);
  for (std::size_t i = 0; i < size; ++i) {
    if (ctx.is_candidate(i)) cand.push_back(static_cast<std::uint32_t>(i));
  }
  KVTIER_CHECK(cand.size() == ctx.candidates, "r_kv: candidate count mismatch");
  const std::size_t n = cand.size();
  if (n == 0) return scratch;

  const std::vector<double> imp = importance(ctx, cand);
  std::vector<double> red = column_means(ctx, cand);
  // Softmax over U, shifted by the maximum for stability.
  const double peak = *std::max_element(red.begin(), red.end());
  double z = 0.0;
  for (double& r : red) z += (r = std::exp(r - peak));
  const double lambda = ctx.params->rkv_lambda;
  double lowest = std::numeric_limits<double>::infinity();
  for (std::size_t c = 0; c < n; ++c) {
    red[c] = lambda * imp[c] - (1.0 - lambda) * (red[c] / z);  // red now holds Z
    lowest = std::min(lowest, red[c]);
  }
  for (std::size_t c = 0; c < n; ++c) scratch[cand[c]] = static_cast<float>(red[c] - lowest);
  return scratch;
}

}  // namespace kvtier::tier::detail
