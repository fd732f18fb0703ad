// SequenceTiers::decide() in a steady state over thousands of tokens: scores shipped per interval,
// most tokens keeping their tier decision after decision (the case where the classify pass skips
// whole blocks), long runs of equal scores at the cuts, T2 on and off. Every decision must match
// the sort-based reference.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kvtier/tier/sequence_tiers.hpp"
#include "tier_test_support.hpp"

namespace kvtier::tier {
namespace {

using testing::apply_moves;
using testing::reference_decision;
using testing::snapshot;

TierParams steady_params(std::mt19937_64& rng, int trial) {
  TierParams p;
  p.interval = 8;
  p.sink_tokens = 4;
  p.window_tokens = 32;
  const EvictionMode modes[] = {EvictionMode::kCumulative, EvictionMode::kPaperAlgorithm,
                                EvictionMode::kPaperPrototype};
  p.mode = modes[trial % 3];
  const double hbm[] = {1.0, 0.9, 0.5, 0.0};
  p.hbm_ratio = hbm[rng() % 4];
  p.evict_ratio = p.mode == EvictionMode::kCumulative ? 0.2 : 0.01;
  if (trial % 2 == 1 && p.mode != EvictionMode::kPaperPrototype) p.int8_ratio = 0.5;
  return p;
}

TEST(SequenceSteady, DecisionsOverLongSequencesWithStableScoresMatchTheReference) {
  std::mt19937_64 rng(31);
  for (int trial = 0; trial < 24; ++trial) {
    const TierParams p = steady_params(rng, trial);
    const std::uint32_t start = 2000 + static_cast<std::uint32_t>(rng() % 3000);
    auto seq = *SequenceTiers::create(16, p, start + 200);
    // Each position's per-interval sum: a few distinct levels (long runs of ties) or, in odd
    // trials, a small jitter on top, so most tokens keep their rank between decisions.
    std::vector<float> level(start + 200);
    std::uniform_int_distribution<int> levels(1, 4);
    for (float& x : level) x = static_cast<float>(levels(rng)) / 1024.0f;
    std::uniform_real_distribution<float> jitter(0.0f, trial % 4 < 2 ? 0.0f : 1e-5f);
    std::uint32_t length = start;
    std::vector<float> sums;
    for (int step = 0; step < 6 * static_cast<int>(p.interval); ++step, ++length) {
      if (seq.completes_interval()) {
        sums.assign(level.begin(), level.begin() + length);
        for (float& x : sums) x += jitter(rng);
        ASSERT_TRUE(seq.add_score_sums(0, sums).has_value());
      }
      ASSERT_TRUE(seq.grow_to(length).has_value());
      seq.end_step();
      if (!seq.due()) continue;
      SCOPED_TRACE(::testing::Message() << "trial " << trial << " step " << seq.step() << " mode "
                                        << eviction_mode_name(p.mode) << " hbm " << p.hbm_ratio
                                        << " int8 " << p.int8_ratio);
      const std::vector<Tier> before = snapshot(seq);
      const std::vector<Tier> expected = reference_decision(seq);
      const Decision& d = seq.decide();
      ASSERT_EQ(apply_moves(before, d.moves), expected);
      seq.commit();
    }
  }
}

}  // namespace
}  // namespace kvtier::tier
