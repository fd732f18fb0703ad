// CutSelector agrees with a sort over (score, index) on random inputs, including ties, zeros,
// infinities and tier masks.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "kvtier/tier/cut_selector.hpp"

namespace kvtier::tier {
namespace {

// The reference: sort included (key, index) pairs; the cut for rank k is element k.
CutPoint reference_cut(const std::vector<float>& scores, const std::vector<std::uint8_t>& tiers,
                       std::uint8_t mask, std::uint32_t rank) {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> items;
  for (std::uint32_t i = 0; i < scores.size(); ++i) {
    if (tiers.empty() || ((mask >> tiers[i]) & 1u)) items.emplace_back(score_key(scores[i]), i);
  }
  std::sort(items.begin(), items.end());
  if (rank == items.size()) return CutPoint{kAboveAll, kAboveAll};
  return CutPoint{items[rank].first, items[rank].second};
}

// The set a CutPoint marks below must be exactly the first `rank` elements of the sorted order.
void expect_partition(const std::vector<float>& scores, const std::vector<std::uint8_t>& tiers,
                      std::uint8_t mask, std::uint32_t rank, CutPoint cut) {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> items;
  for (std::uint32_t i = 0; i < scores.size(); ++i) {
    if (tiers.empty() || ((mask >> tiers[i]) & 1u)) items.emplace_back(score_key(scores[i]), i);
  }
  std::sort(items.begin(), items.end());
  std::vector<bool> expected_below(scores.size(), false);
  for (std::uint32_t j = 0; j < rank; ++j) expected_below[items[j].second] = true;
  for (std::uint32_t i = 0; i < scores.size(); ++i) {
    if (!tiers.empty() && !((mask >> tiers[i]) & 1u)) continue;
    ASSERT_EQ(cut.below(score_key(scores[i]), i), expected_below[i]) << "index " << i;
  }
}

enum class Shape { kUniform, kFewDistinct, kMostlyZero, kLognormal, kWithInfinity, kAllEqual };

std::vector<float> make_scores(Shape shape, std::uint32_t n, std::mt19937_64& rng) {
  std::vector<float> s(n);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::lognormal_distribution<float> ln(0.0f, 3.0f);
  std::uniform_int_distribution<int> small(0, 4);
  for (float& x : s) {
    switch (shape) {
      case Shape::kUniform: x = u(rng); break;
      case Shape::kFewDistinct: x = static_cast<float>(small(rng)) * 0.25f; break;
      case Shape::kMostlyZero: x = u(rng) < 0.9f ? 0.0f : u(rng); break;
      case Shape::kLognormal: x = ln(rng); break;
      case Shape::kWithInfinity:
        x = u(rng) < 0.1f ? std::numeric_limits<float>::infinity() : u(rng) * 1e30f;
        break;
      case Shape::kAllEqual: x = 0.125f; break;
    }
  }
  return s;
}

TEST(CutSelector, AgreesWithSortOnRandomInputsIncludingTiesAndZeros) {
  std::mt19937_64 rng(7);
  for (Shape shape : {Shape::kUniform, Shape::kFewDistinct, Shape::kMostlyZero, Shape::kLognormal,
                      Shape::kWithInfinity, Shape::kAllEqual}) {
    for (std::uint32_t n : {0u, 1u, 2u, 17u, 1000u, 20000u}) {
      const std::vector<float> scores = make_scores(shape, n, rng);
      std::vector<std::uint8_t> tiers(n);
      std::uniform_int_distribution<int> tier(0, 3);
      for (auto& t : tiers) t = static_cast<std::uint8_t>(tier(rng));
      for (const bool masked : {false, true}) {
        const std::vector<std::uint8_t> used_tiers = masked ? tiers : std::vector<std::uint8_t>{};
        const std::uint8_t mask = 0b0111;  // T0, T1, T2
        CutSelector selector;
        const std::uint32_t count = selector.count(scores, used_tiers, mask);
        std::uniform_int_distribution<std::uint32_t> pick(0, count);
        const std::uint32_t ranks[5] = {0, count, pick(rng), pick(rng), count / 2};
        CutPoint cuts[5];
        selector.cuts(ranks, cuts);
        for (int j = 0; j < 5; ++j) {
          SCOPED_TRACE(testing::Message() << "shape " << static_cast<int>(shape) << " n " << n
                                          << " masked " << masked << " rank " << ranks[j]);
          EXPECT_EQ(cuts[j], reference_cut(scores, used_tiers, mask, ranks[j]));
          expect_partition(scores, used_tiers, mask, ranks[j], cuts[j]);
        }
      }
    }
  }
}

TEST(CutSelector, KthKeyEqualsNthElement) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    const std::vector<float> scores = make_scores(Shape::kLognormal, 5000, rng);
    std::uniform_int_distribution<std::uint32_t> pick(0, 4999);
    const std::uint32_t rank = pick(rng);
    CutSelector selector;
    ASSERT_EQ(selector.count(scores, {}, 0), 5000u);
    CutPoint cut;
    selector.cuts({&rank, 1}, {&cut, 1});
    std::vector<float> copy = scores;
    std::nth_element(copy.begin(), copy.begin() + rank, copy.end());
    EXPECT_EQ(cut.key, score_key(copy[rank]));
  }
}

TEST(CutSelector, CountsOnlyMaskedTiers) {
  const std::vector<float> scores = {1, 2, 3, 4, 5, 6};
  const std::vector<std::uint8_t> tiers = {0, 1, 3, 0, 3, 1};
  CutSelector selector;
  EXPECT_EQ(selector.count(scores, tiers, 0b0001), 2u);
  EXPECT_EQ(selector.count(scores, tiers, 0b0011), 4u);
  EXPECT_EQ(selector.count(scores, tiers, 0b1000), 2u);
  const std::uint32_t rank = 1;
  CutPoint cut;
  selector.cuts({&rank, 1}, {&cut, 1});
  EXPECT_EQ(cut.key, score_key(5.0f));  // T3 elements are 3 and 5
}

TEST(CutSelector, EqualScoresRankLowerIndexFirst) {
  const std::vector<float> scores(10, 0.0f);
  CutSelector selector;
  selector.count(scores, {}, 0);
  const std::uint32_t rank = 4;
  CutPoint cut;
  selector.cuts({&rank, 1}, {&cut, 1});
  EXPECT_EQ(cut, (CutPoint{0, 4}));
  for (std::uint32_t i = 0; i < 10; ++i) EXPECT_EQ(cut.below(0, i), i < 4) << i;
}

// Keys that share a top-level bucket and differ only in their low 8 bits, only in their middle
// bits, or not at all: every shortcut the refinement takes must give the sorted order's cut.
TEST(CutSelector, BoundaryBucketsSharingDigitsCutLikeTheSort) {
  std::mt19937_64 rng(13);
  const std::uint32_t base = score_key(0.75f) & ~0x7FFFFu;  // bits 30..19 fixed: one bucket
  const std::uint32_t varied_bits[] = {0x0u, 0xFFu, 0x7FF00u, 0x7FFFFu, 0x100u, 0x1u};
  for (const std::uint32_t varied : varied_bits) {
    std::vector<float> scores(3000);
    std::uniform_int_distribution<std::uint32_t> bits;
    for (float& x : scores) x = std::bit_cast<float>(base | (bits(rng) & varied));
    std::vector<std::uint8_t> tiers(scores.size());
    std::uniform_int_distribution<int> tier(0, 3);
    for (auto& t : tiers) t = static_cast<std::uint8_t>(tier(rng));
    CutSelector selector;
    const std::uint32_t count = selector.count(scores, tiers, 0b0111);
    std::uniform_int_distribution<std::uint32_t> pick(0, count - 1);
    const std::uint32_t ranks[4] = {0, count - 1, pick(rng), pick(rng)};
    CutPoint cuts[4];
    selector.cuts(ranks, cuts);
    for (int j = 0; j < 4; ++j) {
      SCOPED_TRACE(testing::Message() << "varied bits " << varied << " rank " << ranks[j]);
      EXPECT_EQ(cuts[j], reference_cut(scores, tiers, 0b0111, ranks[j]));
    }
  }
}

TEST(CutSelector, RepeatedRanksGetTheSameCut) {
  std::mt19937_64 rng(17);
  const std::vector<float> scores = make_scores(Shape::kFewDistinct, 4000, rng);
  CutSelector selector;
  ASSERT_EQ(selector.count(scores, {}, 0), 4000u);
  const std::uint32_t ranks[5] = {1234, 4000, 1234, 4000, 7};
  CutPoint cuts[5];
  selector.cuts(ranks, cuts);
  for (int j = 0; j < 5; ++j) EXPECT_EQ(cuts[j], reference_cut(scores, {}, 0, ranks[j])) << "rank " << ranks[j];
}

}  // namespace
}  // namespace kvtier::tier
