// Property test over random chains, for every policy: the protected set stays T0, budgets are
// met exactly, moves are differential and applying them to the old assignment gives the new one;
// for every policy but r_kv the decision also equals a sort-based reference built from the
// policy's documented key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kvtier/tier/policy.hpp"
#include "kvtier/tier/sequence_tiers.hpp"
#include "tier_test_support.hpp"

namespace kvtier::tier {
namespace {

using testing::apply_moves;
using testing::ref_floor;
using testing::reference_decision;
using testing::snapshot;

TierParams random_params(PolicyKind policy, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> pick(0, 2);
  std::uniform_int_distribution<std::uint32_t> small(0, 12);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::bernoulli_distribution coin(0.5);
  TierParams p;
  p.policy = policy;
  p.mode = static_cast<EvictionMode>(pick(rng));
  p.sink_tokens = small(rng) % 7;
  p.window_tokens = small(rng);
  p.interval = 1 + small(rng) % 4;
  p.hbm_ratio = unit(rng);
  p.evict_ratio = 0.5 * unit(rng);
  if (coin(rng) && coin(rng)) p.hbm_tokens = small(rng);
  if (coin(rng) && coin(rng)) p.evict_tokens = small(rng) % 5;
  const int prompt = pick(rng);
  if (prompt != 0) p.protect_prompt = prompt == 1;
  p.seed = rng();
  p.recent_window = small(rng) % 10;
  p.value_protect_ratio = unit(rng);
  if (coin(rng) && coin(rng)) p.value_protect_tokens = small(rng);
  p.redundancy_horizon = small(rng) * 2;
  p.rkv_threshold = unit(rng) * 1.4 - 0.5;
  if (policy_traits(policy).supports_hysteresis && coin(rng)) p.hysteresis = 0.5 * unit(rng);
  return p;
}

struct Budgets {
  std::uint32_t candidates = 0;
  std::uint32_t evict = 0;
  std::uint32_t hbm = 0;
  bool skipped = false;
};

// The budget formulas of tier_params.hpp, from an independent count of the candidates.
Budgets expected_budgets(const SequenceTiers& seq) {
  const TierParams& p = seq.params();
  const bool prototype = p.mode == EvictionMode::kPaperPrototype;
  Budgets b;
  std::uint32_t managed = 0;
  for (std::uint32_t pos = 0; pos < seq.length(); ++pos) {
    if (seq.is_protected(pos)) continue;
    ++managed;
    const Tier t = seq.tier_of(pos);
    b.candidates += prototype ? t == Tier::kT0 : t != Tier::kT3;
  }
  const std::uint32_t n = b.candidates;
  if (prototype && n < SequenceTiers::kPrototypeMinCandidates) {
    b.skipped = true;
    return b;
  }
  auto hbm_of = [&](std::uint32_t base) {
    return p.hbm_tokens ? std::min(p.hbm_tokens, base) : ref_floor(p.hbm_ratio, base);
  };
  if (p.mode == EvictionMode::kCumulative) {
    const std::uint32_t allowed = p.evict_tokens ? p.evict_tokens : ref_floor(p.evict_ratio, managed);
    b.evict = allowed > seq.destroyed() ? std::min(n, allowed - seq.destroyed()) : 0;
    b.hbm = hbm_of(n - b.evict);
  } else {
    b.evict = p.evict_tokens ? std::min(p.evict_tokens, n) : ref_floor(p.evict_ratio, n);
    b.hbm = prototype ? std::min(hbm_of(n), n - b.evict) : hbm_of(n - b.evict);
  }
  return b;
}

// The documented ranking key of every position (policy.hpp); r_kv is not covered.
std::vector<float> reference_keys(const SequenceTiers& seq, const std::vector<float>& ranges,
                                  const Budgets& b) {
  const TierParams& p = seq.params();
  std::vector<float> keys(seq.length(), 0.0f);
  for (std::uint32_t pos = 0; pos < seq.length(); ++pos) {
    switch (p.policy) {
      case PolicyKind::kPaper:
      case PolicyKind::kH2o: keys[pos] = seq.score_of(pos); break;
      case PolicyKind::kStreamingLlm: keys[pos] = static_cast<float>(pos); break;
      case PolicyKind::kRandom:
        keys[pos] = static_cast<float>(random_draw(p.seed, seq.step(), pos));
        break;
      case PolicyKind::kVase: {
        const double a = seq.recent_of(pos);
        const double e = -std::log(random_draw(p.seed, seq.step(), pos));
        keys[pos] = a > 0.0 ? static_cast<float>(std::min(a / e, double{std::numeric_limits<float>::max()}))
                            : 0.0f;
        break;
      }
      case PolicyKind::kRKv: break;
    }
  }
  if (p.policy == PolicyKind::kVase) {
    const std::uint32_t wanted =
        p.value_protect_tokens ? p.value_protect_tokens : ref_floor(p.value_protect_ratio, b.hbm);
    const std::uint32_t reserved = std::min(wanted, b.hbm);
    std::vector<std::pair<float, std::uint32_t>> by_range;
    const bool prototype = p.mode == EvictionMode::kPaperPrototype;
    for (std::uint32_t pos = 0; pos < seq.length(); ++pos) {
      const Tier t = seq.tier_of(pos);
      if (!seq.is_protected(pos) && (prototype ? t == Tier::kT0 : t != Tier::kT3)) {
        by_range.emplace_back(ranges[pos], pos);
      }
    }
    std::sort(by_range.rbegin(), by_range.rend());  // largest (range, position) first
    for (std::uint32_t r = 0; r < reserved; ++r) {
      keys[by_range[r].second] = std::numeric_limits<float>::infinity();
    }
  }
  return keys;
}

void check_decision(SequenceTiers& seq, const std::vector<float>& ranges, std::mt19937_64& rng) {
  const TierParams& p = seq.params();
  const std::vector<Tier> before = snapshot(seq);
  const Budgets b = expected_budgets(seq);
  const bool exact = p.policy != PolicyKind::kRKv;
  const std::vector<Tier> reference =
      exact ? reference_decision(seq, reference_keys(seq, ranges, b)) : before;

  const Decision& d = seq.decide();
  ASSERT_EQ(d.skipped, b.skipped);
  ASSERT_EQ(d.candidates, b.candidates);
  std::vector<TierMove> moves(d.moves.begin(), d.moves.end());
  if (!b.skipped) {
    EXPECT_EQ(d.evict_count, b.evict);
    EXPECT_EQ(d.hbm_budget, b.hbm);
  }
  std::int64_t previous = -1;
  std::uint32_t to_t3 = 0;
  for (const TierMove& m : moves) {
    ASSERT_GT(std::int64_t{m.position}, previous);
    previous = m.position;
    ASSERT_FALSE(seq.is_protected(m.position)) << m.position;
    ASSERT_EQ(m.from, before[m.position]);
    ASSERT_NE(m.from, m.to);
    ASSERT_NE(m.from, Tier::kT3);
    if (p.mode == EvictionMode::kPaperPrototype) {
      ASSERT_EQ(m.from, Tier::kT0);
    }
    to_t3 += m.to == Tier::kT3;
  }
  EXPECT_EQ(to_t3, d.evict_count);
  if (exact) {
    EXPECT_EQ(apply_moves(before, moves), reference) << policy_name(p.policy);
  }

  // Mostly commit everything; sometimes drop moves into T1 (no pool slot) or roll back.
  std::vector<TierMove> accepted;
  const int choice = std::uniform_int_distribution<int>(0, 9)(rng);
  if (choice == 0) {
    seq.rollback();
  } else if (choice == 1) {
    for (const TierMove& m : moves) {
      if (m.to != Tier::kT1 || (rng() & 1) != 0) accepted.push_back(m);
    }
    seq.commit(accepted);
  } else {
    accepted = moves;
    seq.commit();
  }
  const std::vector<Tier> after = snapshot(seq);
  EXPECT_EQ(after, apply_moves(before, accepted));
  for (std::uint32_t pos = 0; pos < seq.length(); ++pos) {
    if (seq.is_protected(pos)) {
      ASSERT_EQ(after[pos], Tier::kT0) << "protected " << pos;
    }
  }
  if (choice >= 2 && !b.skipped && p.hysteresis == 0.0) {
    std::uint32_t t0 = 0;
    for (std::uint32_t pos = 0; pos < seq.length(); ++pos) {
      const bool was_candidate = p.mode == EvictionMode::kPaperPrototype
                                     ? before[pos] == Tier::kT0
                                     : before[pos] != Tier::kT3;
      t0 += !seq.is_protected(pos) && was_candidate && after[pos] == Tier::kT0;
    }
    EXPECT_EQ(t0, b.hbm) << policy_name(p.policy);
  }
}

void run_chain(PolicyKind policy, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const TierParams p = random_params(policy, rng);
  const std::uint32_t prompt = static_cast<std::uint32_t>(rng() % 12);
  const std::uint32_t generated = 20 + static_cast<std::uint32_t>(rng() % 60);
  auto created = SequenceTiers::create(prompt, p, prompt + generated);
  ASSERT_TRUE(created.has_value()) << created.error().message;
  SequenceTiers& seq = *created;
  const PolicyTraits traits = policy_traits(policy);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::normal_distribution<float> noise(0.0f, 0.2f);
  std::vector<float> bases(3 * 4);
  for (float& x : bases) x = unit(rng) * 2.0f - 1.0f;
  std::vector<float> ranges;

  auto add_features = [&](std::uint32_t first, std::uint32_t count) {
    if (traits.uses_value_ranges) {
      std::vector<float> r(count);
      for (float& x : r) x = (rng() % 4 == 0) ? 5.0f : unit(rng);  // ties and large ranges
      ASSERT_TRUE(seq.add_value_ranges(first, r).has_value());
      ranges.resize(first + count);
      std::copy(r.begin(), r.end(), ranges.begin() + first);
    }
    if (traits.uses_key_digests && rng() % 8 != 0) {  // some tokens never get a digest
      std::vector<float> k(count * 4);
      for (std::uint32_t t = 0; t < count; ++t) {
        const std::size_t base = rng() % 3;
        for (std::size_t d = 0; d < 4; ++d) k[t * 4 + d] = bases[base * 4 + d] + noise(rng);
      }
      ASSERT_TRUE(seq.add_key_digests(first, k, 4).has_value());
    }
  };
  std::vector<float> row;
  auto fill_row = [&](std::uint32_t length) {
    row.resize(length);
    for (float& x : row) x = (rng() % 5 == 0) ? 0.0f : unit(rng) / static_cast<float>(length);
  };
  if (prompt > 0) {
    add_features(0, prompt);
    fill_row(prompt);
    ASSERT_TRUE(seq.add_scores(0, row).has_value());
  }
  for (std::uint32_t t = 0; t < generated; ++t) {
    add_features(prompt + t, 1);
    fill_row(prompt + t + 1);
    ASSERT_TRUE(seq.add_scores(0, row).has_value());
    seq.end_step();
    if (seq.due()) check_decision(seq, ranges, rng);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

class PolicyProperty : public ::testing::TestWithParam<PolicyKind> {};

TEST_P(PolicyProperty, ProtectedSetBudgetsAndMovesHoldOnRandomChains) {
  for (std::uint64_t seed = 0; seed < 60; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    run_chain(GetParam(), seed * 7919 + static_cast<std::uint64_t>(GetParam()));
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, PolicyProperty, ::testing::ValuesIn(kAllPolicies),
                         [](const ::testing::TestParamInfo<PolicyKind>& param_info) {
                           return std::string(policy_name(param_info.param));
                         });

}  // namespace
}  // namespace kvtier::tier
