// Test helpers for kvtier_tier: a sort-based reference of the tier decision (no hysteresis),
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

// Expected assignment after one decision, hysteresis included, ranking candidates by
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
  const std::vector<Tier> before = tiers;
  for (std::uint32_t j = 0; j < n; ++j) {
    tiers[u[j].second] = j < evict ? Tier::kT3 : j < n - hbm ? Tier::kT1 : Tier::kT0;
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
        tiers[pos] = s > c_lo * (1.0 + p.hysteresis) ? Tier::kT0 : Tier::kT1;
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

}  // namespace kvtier::tier::testing
