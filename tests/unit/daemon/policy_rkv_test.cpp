// r_kv beyond the hand-computed cases: the digest sum a sequence maintains across ingest, tier
// moves and evictions ranks exactly like one built from scratch, keys follow the definition of
// policy.hpp (computed here in double, every row searched), and above 2048 candidates the sampled
// sparing stays within its documented bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "kvtier/tier/policy.hpp"
#include "kvtier/tier/sequence_tiers.hpp"

namespace kvtier::tier {
namespace {

constexpr std::uint32_t kDim = 8;

std::vector<float> random_keys(std::mt19937_64& rng, std::size_t rows) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> keys(rows * kDim);
  for (float& k : keys) k = dist(rng);
  return keys;
}

std::vector<TierMove> decision_moves(SequenceTiers& seq) {
  const Decision& d = seq.decide();
  std::vector<TierMove> moves(d.moves.begin(), d.moves.end());
  seq.rollback();
  return moves;
}

// The same current state built from nothing: restored tiers, recent attention as one add, the
// latest digest of every live token, the same step.
SequenceTiers rebuild(const SequenceTiers& seq, const TierParams& p, const std::vector<float>& keys) {
  std::vector<std::pair<std::uint32_t, Tier>> placed;
  std::vector<float> recent(seq.length());
  for (std::uint32_t pos = 0; pos < seq.length(); ++pos) {
    if (seq.tier_of(pos) != Tier::kT0) placed.emplace_back(pos, seq.tier_of(pos));
    recent[pos] = seq.recent_of(pos);
  }
  auto fresh = *SequenceTiers::restore(seq.prompt_length(), p, seq.max_tokens(), seq.length(), placed);
  EXPECT_TRUE(fresh.add_scores(0, recent).has_value());
  for (std::uint32_t pos = 0; pos < seq.length(); ++pos) {
    if (seq.tier_of(pos) == Tier::kT3) continue;
    const std::span<const float> row(keys.data() + std::size_t{pos} * kDim, kDim);
    EXPECT_TRUE(fresh.add_key_digests(pos, row, kDim).has_value());
  }
  while (fresh.step() < seq.step()) fresh.end_step();
  return fresh;
}

void check_maintained_sum(EvictionMode mode) {
  std::mt19937_64 rng(7);
  TierParams p;
  p.policy = PolicyKind::kRKv;
  p.mode = mode;
  p.protect_prompt = true;  // the sum starts after the prompt and the sinks
  p.window_tokens = 16;
  p.interval = 8;
  p.evict_ratio = 0.05;
  p.redundancy_horizon = 24;
  p.rkv_threshold = 0.3;
  constexpr std::uint32_t kMax = 600;
  auto seq = *SequenceTiers::create(6, p, kMax);
  std::vector<float> keys = random_keys(rng, kMax);  // the latest digest sent per position
  std::uniform_real_distribution<float> score(0.0f, 1.0f);
  std::uniform_int_distribution<std::uint32_t> pick(0, kMax - 1);
  for (std::uint32_t round = 0; round < 40; ++round) {
    const std::uint32_t first = seq.length();
    const std::uint32_t grow = std::min(kMax - first, 12u);
    std::vector<float> scores(first + grow);
    for (float& s : scores) s = score(rng);
    ASSERT_TRUE(seq.add_scores(0, scores).has_value());
    ASSERT_TRUE(seq.add_key_digests(first, {keys.data() + std::size_t{first} * kDim, grow * kDim}, kDim)
                    .has_value());
    // Rewrite two older digests (live or not): the sum must drop the rows they replace.
    for (int k = 0; k < 2; ++k) {
      const std::uint32_t pos = pick(rng) % seq.length();
      const std::vector<float> row = random_keys(rng, 1);
      std::copy(row.begin(), row.end(), keys.begin() + std::size_t{pos} * kDim);
      ASSERT_TRUE(seq.add_key_digests(pos, row, kDim).has_value());
    }
    seq.end_step();
    SequenceTiers fresh = rebuild(seq, p, keys);
    ASSERT_EQ(decision_moves(seq), decision_moves(fresh)) << "round " << round;
    seq.decide();
    seq.commit();
  }
  EXPECT_GT(seq.destroyed(), 0u);
}

TEST(PolicyRKvState, MaintainedDigestSumRanksLikeOneRebuiltFromTheDigests) {
  check_maintained_sum(EvictionMode::kCumulative);
}

TEST(PolicyRKvState, PrototypeSumFollowsTokensLeavingT0) {
  check_maintained_sum(EvictionMode::kPaperPrototype);
}

// Digests clustered around a few directions, so near-duplicates are common and sparing matters.
struct Chain {
  std::vector<std::int8_t> codes;
  std::vector<float> inv;
  std::vector<float> recent;
};

Chain clustered_chain(std::uint32_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.35f);
  std::uniform_int_distribution<int> cluster(0, 5);
  std::uniform_real_distribution<float> attention(0.0f, 1.0f);
  std::vector<float> centers = random_keys(rng, 6);
  Chain c;
  c.codes.resize(std::size_t{n} * kDim);
  c.inv.resize(n);
  c.recent.resize(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    const int k = cluster(rng);
    float x[kDim];
    float peak = 0.0f;
    for (std::uint32_t d = 0; d < kDim; ++d) {
      x[d] = centers[k * kDim + d] + noise(rng);
      peak = std::max(peak, std::fabs(x[d]));
    }
    double norm2 = 0.0;
    for (std::uint32_t d = 0; d < kDim; ++d) {
      const auto q = static_cast<std::int8_t>(std::lround(x[d] * 127.0f / peak));
      c.codes[i * kDim + d] = q;
      norm2 += static_cast<double>(q) * q;
    }
    c.inv[i] = static_cast<float>(1.0 / std::sqrt(norm2));
    c.recent[i] = attention(rng);
  }
  return c;
}

// policy.hpp's r_kv keys in double, every row searching the horizon; *max_r = max_j R_j.
std::vector<double> reference_keys(const Chain& c, const TierParams& p, double* max_r = nullptr) {
  const auto n = static_cast<std::uint32_t>(c.inv.size());
  auto cosine = [&](std::uint32_t i, std::uint32_t j) {
    double dot = 0.0;
    for (std::uint32_t d = 0; d < kDim; ++d) dot += static_cast<double>(c.codes[i * kDim + d]) * c.codes[j * kDim + d];
    return dot * c.inv[i] * c.inv[j];
  };
  std::vector<double> m(n, 0.0);
  std::vector<double> sum(kDim, 0.0);
  for (std::uint32_t i = 0; i < n; ++i) {
    for (std::uint32_t d = 0; d < kDim; ++d) sum[d] += double{c.inv[i]} * c.codes[i * kDim + d];
  }
  for (std::uint32_t j = 0; j < n; ++j) {
    double s = 0.0;
    for (std::uint32_t d = 0; d < kDim; ++d) s += static_cast<double>(c.codes[j * kDim + d]) * sum[d];
    m[j] = c.inv[j] * s - 1.0;
  }
  const std::uint32_t horizon = std::min(p.redundancy_horizon, n);
  for (std::uint32_t i = 0; i < n; ++i) {
    for (std::uint32_t k = 0; k < horizon; ++k) {
      const std::uint32_t j = n - 1 - k;
      const double s = cosine(i, j);
      if (j != i && s > p.rkv_threshold) {
        m[j] -= s;
        break;
      }
    }
  }
  std::vector<double> pooled(n);
  double total = 0.0;
  for (std::uint32_t i = 0; i < n; ++i) {
    float best = 0.0f;
    for (std::uint32_t k = i >= 3 ? i - 3 : 0; k <= std::min(n - 1, i + 3); ++k) best = std::max(best, c.recent[k]);
    total += pooled[i] = best;
  }
  double z = 0.0;
  for (double& x : m) z += (x = std::exp(x / n));
  if (max_r != nullptr) *max_r = *std::max_element(m.begin(), m.end()) / z;
  std::vector<double> key(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    key[i] = p.rkv_lambda * pooled[i] / total - (1.0 - p.rkv_lambda) * m[i] / z;
  }
  const double lowest = *std::min_element(key.begin(), key.end());
  for (double& k : key) k -= lowest;
  return key;
}

std::vector<float> policy_keys(const Chain& c, const TierParams& p, std::uint64_t step) {
  const auto n = static_cast<std::uint32_t>(c.inv.size());
  const std::vector<Tier> tiers(n, Tier::kT1);
  RankingContext ctx;
  ctx.scores = c.recent;
  ctx.tiers = tiers;
  ctx.recent = c.recent;
  ctx.digests = {c.codes, c.inv, kDim};
  ctx.candidate_mask = 0b0111;
  ctx.candidates = n;
  ctx.step = step;
  ctx.params = &p;
  std::vector<float> scratch;
  const std::span<const float> keys = make_policy(PolicyKind::kRKv)->rank(ctx, scratch);
  return {keys.begin(), keys.end()};
}

TierParams sparing_params() {
  TierParams p;
  p.policy = PolicyKind::kRKv;
  p.redundancy_horizon = 128;
  return p;
}

TEST(PolicyRKvKeys, FollowTheDefinitionWhenEveryRowIsSearched) {
  const Chain c = clustered_chain(1500, 3);  // at most 2048 candidates: no sampling
  const TierParams p = sparing_params();
  const std::vector<double> ref = reference_keys(c, p);
  const std::vector<float> keys = policy_keys(c, p, 0);
  const double spread = *std::max_element(ref.begin(), ref.end());
  for (std::size_t i = 0; i < ref.size(); ++i) {
    EXPECT_NEAR(keys[i], ref[i], 1e-5 * spread) << "position " << i;
  }
}

TEST(PolicyRKvKeys, SampledSparingStaysWithinTheDocumentedBound) {
  // policy.hpp: with every horizon column within ε = w·sqrt(ln(2/δ)/4096) (δ = 1e-6, w = 1 at
  // threshold 0.5), |Ẑ_j − Z_j| <= (1 − λ)·R_j·(e^2ε − 1), and the shift by min Z moves every key
  // by at most the largest such change: |key error| <= 2·(1 − λ)·max R·(e^2ε − 1).
  constexpr std::uint32_t kN = 8000;
  const Chain c = clustered_chain(kN, 5);
  const TierParams p = sparing_params();
  double max_r = 0.0;
  const std::vector<double> ref = reference_keys(c, p, &max_r);
  const double epsilon = std::sqrt(std::log(2.0 / 1e-6) / 4096.0);
  const double bound = 2.0 * (1.0 - p.rkv_lambda) * max_r * (std::exp(2.0 * epsilon) - 1.0);
  for (std::uint64_t step : {64u, 128u, 192u}) {
    const std::vector<float> keys = policy_keys(c, p, step);
    double worst = 0.0;
    for (std::uint32_t i = 0; i < kN; ++i) worst = std::max(worst, std::fabs(keys[i] - ref[i]));
    EXPECT_LE(worst, bound) << "step " << step;
  }
}

TEST(PolicyRKvKeys, SampledSparingCapturesMostOfTheSparingEffect) {
  // The bound above is a worst case; in fact the sample lands far closer to the reference than
  // keys computed with no sparing at all (horizon 0), on the horizon where sparing acts.
  constexpr std::uint32_t kN = 8000;
  const Chain c = clustered_chain(kN, 5);
  TierParams p = sparing_params();
  const std::vector<double> ref = reference_keys(c, p);
  auto horizon_error = [&](const std::vector<float>& keys) {
    double sum = 0.0;
    for (std::uint32_t i = kN - 128; i < kN; ++i) sum += std::fabs(keys[i] - ref[i]);
    return sum;
  };
  const double sampled = horizon_error(policy_keys(c, p, 64));
  p.redundancy_horizon = 0;
  const double unspared = horizon_error(policy_keys(c, p, 64));
  EXPECT_LT(sampled, 0.25 * unspared);
}

}  // namespace
}  // namespace kvtier::tier
