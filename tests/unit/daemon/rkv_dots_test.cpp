// r_kv's digest pass (daemon/tier/src/rkv_dots.hpp): every table this CPU runs writes
// column_sum()'s float bit for bit and the candidates' recent attention, in range order, for
// every digest size (multiples of 16 and not), candidate pattern and range length.
#include "rkv_dots.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <random>
#include <vector>

namespace kvtier::tier::detail {
namespace {

std::vector<const RkvDotLoops*> tables() {
  std::vector<const RkvDotLoops*> out{&scalar_rkv_dot_loops()};
  if (const RkvDotLoops* t = avx2_rkv_dot_loops()) out.push_back(t);
  return out;
}

bool same_bits(float x, float y) {
  return std::bit_cast<std::uint32_t>(x) == std::bit_cast<std::uint32_t>(y);
}

struct Range {
  std::vector<std::int8_t> codes;
  std::vector<float> inv_norms;
  std::vector<float> recent;
  std::vector<Tier> tiers;
  std::vector<std::int64_t> sum;
};

// Random codes at full int8 range, a zero row every 37th, T0 with T1 and T3 runs mixed in where
// `holes` (T3 is not a candidate below), and a sum at the largest magnitudes a sequence reaches.
Range random_range(std::uint32_t size, std::uint32_t dim, bool holes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Range r;
  r.codes.resize(std::size_t{size} * dim);
  for (std::int8_t& c : r.codes) c = static_cast<std::int8_t>(static_cast<int>(rng() % 255) - 127);
  r.inv_norms.resize(size);
  r.recent.resize(size);
  r.tiers.assign(size, Tier::kT0);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (std::uint32_t i = 0; i < size; ++i) {
    r.inv_norms[i] = i % 37 == 0 ? 0.0f : 1.0f / (200.0f + 500.0f * unit(rng));
    r.recent[i] = unit(rng);
    if (holes && rng() % 5 == 0) r.tiers[i] = rng() % 2 == 0 ? Tier::kT1 : Tier::kT3;
  }
  r.sum.resize(dim);
  for (std::int64_t& v : r.sum) v = static_cast<std::int64_t>(rng() >> 2) - (std::int64_t{1} << 61);
  return r;
}

TEST(RkvDots, EveryTableWritesTheDefinitionsColumnSumsBitForBit) {
  constexpr std::uint8_t kT0AndT1 = 0b011;  // T3 rows are not candidates
  for (const std::uint32_t dim : {16u, 24u, 32u, 64u, 128u}) {
    for (const std::uint32_t size : {1u, 7u, 255u, 256u, 1000u, 4099u}) {
      for (const bool holes : {false, true}) {
        const Range r = random_range(size, dim, holes, 11 * dim + size);
        RankingContext ctx;
        ctx.tiers = r.tiers;
        ctx.recent = r.recent;
        ctx.digests = KeyDigestView(r.codes, r.inv_norms, dim);
        ctx.candidate_mask = kT0AndT1;
        const SplitSum sigma = split_sum(r.sum, 40);
        std::vector<float> want_a;
        std::vector<float> want_m;
        for (std::uint32_t i = 0; i < size; ++i) {
          if (!ctx.is_candidate(i)) continue;
          want_a.push_back(r.recent[i]);
          want_m.push_back(column_sum(r.codes.data() + std::size_t{i} * dim, r.inv_norms[i], sigma, dim));
        }
        for (const RkvDotLoops* table : tables()) {
          std::vector<float> a(size, -1.0f);
          std::vector<float> m(size, -1.0f);
          const std::uint32_t n = table->compact(ctx, sigma, a.data(), m.data());
          ASSERT_EQ(n, want_m.size()) << table->isa << " dim " << dim << " size " << size;
          std::size_t wrong = 0;
          for (std::uint32_t c = 0; c < n; ++c) {
            wrong += !same_bits(a[c], want_a[c]) || !same_bits(m[c], want_m[c]);
          }
          EXPECT_EQ(wrong, 0u) << table->isa << " dim " << dim << " size " << size << " holes " << holes;
        }
      }
    }
  }
}

// The split is exact: hi·2^15 + lo recombines to Σ >> shift, and the shift is the smallest that
// keeps every component below 2^30.
TEST(RkvDots, SplitSumRecombinesExactly) {
  const std::vector<std::int64_t> sum = {0, 1, -1, (std::int64_t{1} << 40) + 12345, -(std::int64_t{1} << 40) - 7,
                                         (std::int64_t{1} << 30) - 1};
  const SplitSum s = split_sum(sum, 40);
  EXPECT_EQ(s.unit, std::ldexp(1.0, 11 - 40));  // peak >> 10 >= 2^30 > peak >> 11: shift 11
  for (std::size_t d = 0; d < sum.size(); ++d) {
    EXPECT_EQ(std::int64_t{s.hi[d]} * 32768 + s.lo[d], sum[d] >> 11) << d;
  }
}

}  // namespace
}  // namespace kvtier::tier::detail
