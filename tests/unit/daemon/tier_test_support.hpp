// Test helpers for kvtier_tier: a sort-based reference of the tier decision,
// written independently of the radix path, and snapshot/apply utilities.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "kvtier/tier/sequence_tiers.hpp"

namespace kvtier::tier::testing {

inline std::vector<Tier> snapshot(const SequenceTiers& seq) {
  std::vector<Tier> tiers(seq.length());
  for (std::uint32_t p = 0; p < seq.length(); ++p) tiers[p] = seq.tier_of(p);
  return tiers;
}

inline std::vector<Tier> apply_moves(std::vector<Tier> tiers, std::span<const TierMove> moves) {
  for (const TierMove& m : moves) {
    EXPECT_EQ(tiers.at(m.position), m.from) << "position " << m.position;
    tiers.at(m.position) = m.to;
  }
  return tiers;
}

inline std::uint32_t ref_floor(double ratio, std::uint64_t n) {
  return static_cast<std::uint32_t>(
      std::min<double>(static_cast<double>(n), std::floor(ratio * static_cast<double>(n) + 1e-9)));
}

// Expected assignment after one decision, hysteresis and the T2 rules included, ranking candidates by
// keys[position] (the policy's ranking key; the scores for paper and h2o).
inline std::vector<Tier> reference_decision(const SequenceTiers& seq, std::span<const float> keys) {
  const TierParams& p = seq.params();
  std::vector<Tier> tiers = snapshot(seq);
  const std::uint64_t len = seq.length();
  const std::uint64_t prompt = protects_prompt(p) ? seq.prompt_length() : 0;
  const std::uint64_t first = std::min<std::uint64_t>(prompt + p.sink_tokens, len);
  const std::uint64_t last = std::max<std::uint64_t>(len > p.window_tokens ? len - p.window_tokens : 0, first);
  const bool prototype = p.mode == EvictionMode::kPaperPrototype;

  std::vector<std::pair<float, std::uint32_t>> u;
  for (std::uint64_t pos = first; pos < last; ++pos) {
    const Tier t = tiers[pos];
    const bool candidate = prototype ? t == Tier::kT0 : t != Tier::kT3;
    if (candidate) u.emplace_back(keys[pos], static_cast<std::uint32_t>(pos));
  }
  std::sort(u.begin(), u.end());
  const auto n = static_cast<std::uint32_t>(u.size());
  if (prototype && n < SequenceTiers::kPrototypeMinCandidates) return tiers;

  std::uint32_t evict = 0;
  std::uint32_t hbm = 0;
  const std::uint32_t managed = static_cast<std::uint32_t>(last - first);
  switch (p.mode) {
    case EvictionMode::kCumulative: {
      const std::uint32_t allowed = p.evict_tokens ? p.evict_tokens : ref_floor(p.evict_ratio, managed);
      evict = allowed > seq.destroyed() ? std::min(n, allowed - seq.destroyed()) : 0;
      hbm = p.hbm_tokens ? std::min(p.hbm_tokens, n - evict) : ref_floor(p.hbm_ratio, n - evict);
      break;
    }
    case EvictionMode::kPaperAlgorithm:
      evict = p.evict_tokens ? std::min(p.evict_tokens, n) : ref_floor(p.evict_ratio, n);
      hbm = p.hbm_tokens ? std::min(p.hbm_tokens, n - evict) : ref_floor(p.hbm_ratio, n - evict);
      break;
    case EvictionMode::kPaperPrototype:
      evict = p.evict_tokens ? std::min(p.evict_tokens, n) : ref_floor(p.evict_ratio, n);
      hbm = std::min(p.hbm_tokens ? std::min(p.hbm_tokens, n) : ref_floor(p.hbm_ratio, n), n - evict);
      break;
  }
  // int8 (T2) budget: the lowest of the survivors not kept in T0.
  const std::uint32_t below_t0 = n - evict - hbm;
  const std::uint32_t t2 = p.int8_tokens ? std::min(p.int8_tokens, below_t0) : ref_floor(p.int8_ratio, below_t0);
  const std::vector<Tier> before = tiers;
  for (std::uint32_t j = 0; j < n; ++j) {
    Tier& t = tiers[u[j].second];
    t = j < evict ? Tier::kT3 : j < evict + t2 ? Tier::kT2 : j < n - hbm ? Tier::kT1 : Tier::kT0;
    // T2 only from T1; T2 never back to T1.
    if (before[u[j].second] == Tier::kT0 && t == Tier::kT2) t = Tier::kT1;
    if (before[u[j].second] == Tier::kT2 && t == Tier::kT1) t = Tier::kT2;
  }
  const std::uint32_t survivors = n - evict;
  if (!prototype && p.hysteresis > 0 && policy_traits(p.policy).supports_hysteresis && hbm > 0 &&
      hbm < survivors) {
    const auto c_hi = static_cast<double>(u[n - hbm].first);
    const auto c_lo = static_cast<double>(u[n - hbm - 1].first);
    for (std::uint32_t j = evict; j < n; ++j) {
      const auto s = static_cast<double>(u[j].first);
      const std::uint32_t pos = u[j].second;
      if (before[pos] == Tier::kT0) {
        tiers[pos] = s < c_hi * (1.0 - p.hysteresis) ? Tier::kT1 : Tier::kT0;
      } else {
        // Outside T0 a token takes its place from the split above (T1 or T2), T2 stays T2.
        const Tier off_t0 = before[pos] == Tier::kT2 || j < evict + t2 ? Tier::kT2 : Tier::kT1;
        tiers[pos] = s > c_lo * (1.0 + p.hysteresis) ? Tier::kT0 : off_t0;
      }
    }
  }
  return tiers;
}

// reference_decision ranking by the cumulative scores (paper, h2o).
inline std::vector<Tier> reference_decision(const SequenceTiers& seq) {
  std::vector<float> scores(seq.length());
  for (std::uint32_t p = 0; p < seq.length(); ++p) scores[p] = seq.score_of(p);
  return reference_decision(seq, scores);
}

// The int8 example used by the T2 and pressure tests. Managed positions 0..8 (prompt 0, no sinks)
// with scores {.5, .1, .9, .3, .7, .2, .8, .4, .6}, then p.window_tokens protected tokens of
// score 2; β = 0.4, int8_ratio = 0.5 unless p says otherwise (the caller's p is used as given).
// With those, n_hbm = ⌊0.4·9⌋ = 3 (2, 6, 4) and n_t2 = ⌊0.5·6⌋ = 3 (1, 5, 3). Two decisions
// are committed: the first sends 0, 1, 3, 5, 7, 8 from T0 to T1 (T0 never goes straight to T2),
// the second demotes 1, 3, 5 to T2. Result: T0 {2, 4, 6}, T1 {0, 7, 8}, T2 {1, 3, 5}.
inline constexpr float kInt8ExampleScores[9] = {0.5f, 0.1f, 0.9f, 0.3f, 0.7f, 0.2f, 0.8f, 0.4f, 0.6f};

inline TierParams int8_example_params() {
  TierParams p;
  p.sink_tokens = 0;
  p.window_tokens = 0;
  p.interval = 1;
  p.hbm_ratio = 0.4;
  p.int8_ratio = 0.5;
  return p;
}

inline SequenceTiers int8_example(const TierParams& p, std::uint32_t max_tokens = 64) {
  auto seq = *SequenceTiers::create(0, p, max_tokens);
  std::vector<float> scores(kInt8ExampleScores, kInt8ExampleScores + 9);
  scores.resize(9 + p.window_tokens, 2.0f);
  EXPECT_TRUE(seq.add_scores(0, scores).has_value());
  seq.decide();
  seq.commit();
  seq.decide();
  seq.commit();
  return seq;
}

}  // namespace kvtier::tier::testing
