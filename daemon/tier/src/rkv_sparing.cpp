// r_kv's sparing search (rkv_sparing.hpp): rows against the horizon's digests.
#include "rkv_sparing.hpp"

#include <algorithm>

namespace kvtier::tier::detail {
namespace {

// The search compares a row against the horizon's digests in segments of columns stored
// transposed ([d][column], int16), so the inner loop has a fixed trip count and the compiler
// vectorizes it at -O2. The first segment is narrow (real keys share a direction, so a row's
// newest near-duplicate is usually among the very newest candidates and the search stops
// there); the rest are wide (fewer, longer loops when near-duplicates are rare).
constexpr std::size_t kFirstWidth = 16;
constexpr std::size_t kWidth = 64;

// Keeps the sample's draws apart from random's and vase's, which hash the same seed and step.
constexpr std::uint64_t kSampleSalt = 0x52B1F0D3A4C56E97ull;

struct Segment {
  std::size_t first = 0;   // horizon column of its first column (0 = newest candidate)
  std::size_t width = 0;   // kFirstWidth or kWidth (the last one padded with zero columns)
  std::size_t offset = 0;  // into codes / inv_norms: dim·width codes, width norms
};

struct Horizon {
  std::vector<Segment> segments;
  std::vector<std::int16_t> codes;
  std::vector<float> inv_norms;  // 0 for padding columns
};

Horizon build_horizon(const KeyDigestView& dg, std::span<const std::uint32_t> columns) {
  Horizon hz;
  std::size_t codes = 0;
  std::size_t norms = 0;
  for (std::size_t first = 0; first < columns.size();) {
    const std::size_t width = first == 0 ? kFirstWidth : kWidth;
    hz.segments.push_back({first, width, norms});
    codes += dg.dim * width;
    norms += width;
    first += width;
  }
  hz.codes.assign(codes, 0);
  hz.inv_norms.assign(norms, 0.0f);
  for (const Segment& seg : hz.segments) {
    for (std::size_t k = 0; k < seg.width && seg.first + k < columns.size(); ++k) {
      const std::uint32_t column = columns[seg.first + k];
      hz.inv_norms[seg.offset + k] = dg.inv_norms[column];
      const std::int8_t* q = dg.codes.data() + std::size_t{column} * dg.dim;
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

// Row i (a range index) finds its newest near-duplicate in the horizon and adds weight·S_ij to
// that column's correction.
void search_row(const KeyDigestView& dg, const Horizon& hz, std::span<const std::uint32_t> columns,
                double threshold, std::uint32_t i, double weight, std::vector<double>& out) {
  const float wi = dg.inv_norms[i];
  if (wi == 0.0f) return;  // a zero digest is similar to nothing
  const std::int8_t* qi = dg.codes.data() + std::size_t{i} * dg.dim;
  float cosine[kWidth];
  for (const Segment& seg : hz.segments) {
    const std::int16_t* block = hz.codes.data() + seg.offset * dg.dim;
    const float* norms = hz.inv_norms.data() + seg.offset;
    if (seg.width == kFirstWidth) {
      segment_cosines<kFirstWidth>(block, norms, dg.dim, qi, wi, cosine);
    } else {
      segment_cosines<kWidth>(block, norms, dg.dim, qi, wi, cosine);
    }
    const std::size_t end = std::min(seg.width, columns.size() - seg.first);
    for (std::size_t k = 0; k < end; ++k) {
      if (static_cast<double>(cosine[k]) > threshold && columns[seg.first + k] != i) {
        out[seg.first + k] += weight * static_cast<double>(cosine[k]);
        return;
      }
    }
  }
}

}  // namespace

std::vector<double> sparing_corrections(const RankingContext& ctx,
                                        std::span<const std::uint32_t> horizon) {
  std::vector<double> out(horizon.size(), 0.0);
  if (horizon.empty()) return out;
  const KeyDigestView& dg = ctx.digests;
  const Horizon hz = build_horizon(dg, horizon);
  const double threshold = ctx.params->rkv_threshold;
  const auto size = static_cast<std::uint32_t>(ctx.tiers.size());
  if (ctx.candidates <= kSparingSampleRows) {
    for (std::uint32_t i = 0; i < size; ++i) {
      if (ctx.is_candidate(i)) search_row(dg, hz, horizon, threshold, i, 1.0, out);
    }
    return out;
  }
  // Uniform over the candidates: uniform range indices, non-candidates redrawn. At least
  // kSparingSampleRows of the range are candidates here, so the expected number of draws is at
  // most size (and usually close to kSparingSampleRows).
  const double weight = static_cast<double>(ctx.candidates) / kSparingSampleRows;
  const std::uint64_t seed = ctx.params->seed ^ kSampleSalt;
  std::uint32_t draw = 0;
  for (std::uint32_t taken = 0; taken < kSparingSampleRows; ++draw) {
    const auto i = static_cast<std::uint32_t>(random_draw(seed, ctx.step, draw) * size);
    if (i >= size || !ctx.is_candidate(i)) continue;
    search_row(dg, hz, horizon, threshold, i, weight, out);
    ++taken;
  }
  return out;
}

}  // namespace kvtier::tier::detail
