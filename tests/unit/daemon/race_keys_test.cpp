// vase's race-key loops (daemon/tier/src/race_keys.hpp): every table this CPU runs writes the
// definition's float (race_key) for every token, reservation included.
#include "race_keys.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace kvtier::tier::detail {
namespace {

std::vector<const RaceLoops*> tables() {
  std::vector<const RaceLoops*> out{&scalar_race_loops()};
  if (const RaceLoops* t = avx2_race_loops()) out.push_back(t);
  if (const RaceLoops* t = avx512_race_loops()) out.push_back(t);
  return out;
}

// Attention-like weights plus the edge cases: zeros, a negative, tiny and huge values, +inf.
std::vector<float> weights(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<float> dist(-4.0f, 3.0f);
  std::vector<float> a(n);
  for (float& x : a) x = dist(rng);
  const float specials[] = {0.0f, -1.0f, 1e-38f, 1e-45f, 3e38f, std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::infinity(), 1.0f};
  for (std::size_t i = 0; i < n; i += 97) a[i] = specials[(i / 97) % std::size(specials)];
  return a;
}

bool same_bits(float x, float y) {
  return std::bit_cast<std::uint32_t>(x) == std::bit_cast<std::uint32_t>(y);
}

TEST(RaceKeys, EveryTableWritesTheDefinitionsKeyBitForBit) {
  constexpr std::size_t kTokens = (1u << 20) + 5;  // enough draws to hit the recheck path; a tail
  const std::vector<float> a = weights(kTokens, 7);
  for (const RaceLoops* table : tables()) {
    for (const std::uint32_t first : {0u, 4'294'967'000u}) {  // the second wraps positions
      const std::uint64_t prefix = draw_prefix(42, 64 + first);
      std::vector<float> keys(kTokens);
      table->keys(prefix, first, a.data(), nullptr, CutPoint{}, keys.data(), kTokens);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < kTokens; ++i) {
        const float want = race_key(prefix, static_cast<std::uint32_t>(first + i), a[i]);
        if (!same_bits(keys[i], want)) ++wrong;
      }
      EXPECT_EQ(wrong, 0u) << table->isa << " first=" << first;
    }
  }
}

TEST(RaceKeys, EveryTableReservesExactlyTheTokensNotBelowTheCut) {
  constexpr std::size_t kTokens = 1003;
  const std::vector<float> a = weights(kTokens, 9);
  std::vector<float> ranges(kTokens);
  for (std::size_t i = 0; i < kTokens; ++i) ranges[i] = static_cast<float>((i * 37) % 11);  // ties
  const CutPoint cut{score_key(7.0f), 500};  // range 7 at index >= 500, and every range above 7
  const std::uint64_t prefix = draw_prefix(3, 5);
  for (const RaceLoops* table : tables()) {
    std::vector<float> keys(kTokens);
    table->keys(prefix, 10, a.data(), ranges.data(), cut, keys.data(), kTokens);
    for (std::size_t i = 0; i < kTokens; ++i) {
      const bool reserved = !cut.below(score_key(ranges[i]), static_cast<std::uint32_t>(i));
      const float want = reserved ? std::numeric_limits<float>::infinity()
                                  : race_key(prefix, static_cast<std::uint32_t>(10 + i), a[i]);
      ASSERT_TRUE(same_bits(keys[i], want)) << table->isa << " i=" << i;
    }
  }
}

TEST(RaceKeys, DefaultTableIsTheWidestAvailable) {
  const RaceLoops* widest = avx512_race_loops() ? avx512_race_loops()
                            : avx2_race_loops() ? avx2_race_loops()
                                                : &scalar_race_loops();
  EXPECT_EQ(&default_race_loops(), widest);
}

}  // namespace
}  // namespace kvtier::tier::detail
