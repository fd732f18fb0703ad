// gather_rows: equal to a plain memcpy loop, for scattered slots, runs and strided halves.
#include "kvtier/kernels/gather.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace kvtier::kernels {
namespace {

std::vector<std::byte> random_bytes(std::size_t n) {
  std::mt19937 rng(11);
  std::vector<std::byte> out(n);
  for (std::byte& b : out) b = static_cast<std::byte>(rng() % 255 + 1);
  return out;
}

TEST(GatherRows, EqualsAMemcpyLoopForScatteredSlotsAndRuns) {
  constexpr std::size_t kRow = 512;
  const auto src = random_bytes(64 * kRow);
  const std::vector<std::uint32_t> slots{5, 6, 7, 8, 40, 2, 3, 63, 0, 1, 9};
  std::vector<std::byte> got(slots.size() * kRow), want(got.size());
  gather_rows(got.data(), src.data(), kRow, slots);
  for (std::size_t i = 0; i < slots.size(); ++i) {
    std::memcpy(want.data() + i * kRow, src.data() + slots[i] * kRow, kRow);
  }
  EXPECT_EQ(got, want);
}

TEST(GatherRows, StridedCopiesPartOfEachRow) {
  const auto src = random_bytes(16 * 64);
  const std::vector<std::uint32_t> slots{3, 4, 1};
  std::vector<std::byte> got(3 * 24, std::byte{0});
  gather_rows(got.data(), 24, src.data() + 32, 64, 16, slots);
  for (std::size_t i = 0; i < slots.size(); ++i) {
    EXPECT_EQ(std::memcmp(got.data() + i * 24, src.data() + slots[i] * 64 + 32, 16), 0);
    for (std::size_t b = 16; b < 24; ++b) EXPECT_EQ(got[i * 24 + b], std::byte{0});
  }
}

}  // namespace
}  // namespace kvtier::kernels
