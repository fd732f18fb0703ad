// gather_rows: equal to a plain memcpy loop, for scattered slots, runs and strided halves.
// copy_rows: every head's rows land at their destination rows, dense or strided; bad indices
// copy nothing.
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

// Two heads of 4-byte rows: a dense [heads, 8, 4] source and a token-major [rows, heads, 4] one
// (a staged layer viewed per head), into a dense [heads, 10, 4] destination.
TEST(CopyRows, PutsEveryHeadsRowsAtTheirDestinationsFromDenseAndStridedSources) {
  constexpr std::size_t kRow = 4, kHeads = 2;
  const auto dense = random_bytes(kHeads * 8 * kRow);
  const auto token_major = random_bytes(3 * kHeads * kRow);
  std::vector<std::byte> dst(kHeads * 10 * kRow, std::byte{0});
  const HeadRows out{dst.data(), 10, kRow, 10 * kRow};
  // Rows 2, 3, 4 -> 0, 1, 2 are one run per head; 7 -> 9 is not.
  const std::vector<std::int64_t> from{2, 3, 4, 7}, to{0, 1, 2, 9};
  ASSERT_TRUE(copy_rows(out, {const_cast<std::byte*>(dense.data()), 8, kRow, 8 * kRow}, kHeads, kRow, from, to));
  const std::vector<std::int64_t> staged{0, 1, 2}, at{3, 5, 8};
  ASSERT_TRUE(copy_rows(out, {const_cast<std::byte*>(token_major.data()), 3, kHeads * kRow, kRow}, kHeads, kRow,
                        staged, at));
  std::vector<std::byte> want(dst.size(), std::byte{0});
  for (std::size_t h = 0; h < kHeads; ++h) {
    for (std::size_t i = 0; i < from.size(); ++i) {
      std::memcpy(want.data() + (h * 10 + to[i]) * kRow, dense.data() + (h * 8 + from[i]) * kRow, kRow);
    }
    for (std::size_t i = 0; i < staged.size(); ++i) {
      std::memcpy(want.data() + (h * 10 + at[i]) * kRow, token_major.data() + (staged[i] * kHeads + h) * kRow, kRow);
    }
  }
  EXPECT_EQ(dst, want);
}

TEST(CopyRows, AnIndexOutOfRangeOrListsOfDifferentLengthsCopyNothing) {
  constexpr std::size_t kRow = 8;
  auto src = random_bytes(4 * kRow);
  std::vector<std::byte> dst(4 * kRow, std::byte{0});
  const HeadRows out{dst.data(), 4, kRow, 4 * kRow}, in{src.data(), 4, kRow, 4 * kRow};
  const std::vector<std::int64_t> ok{0, 1}, past{0, 4}, negative{-1, 0}, one{2};
  for (const auto& [from, to] : {std::pair{ok, past}, std::pair{past, ok}, std::pair{negative, ok}, std::pair{ok, one}}) {
    const Status done = copy_rows(out, in, 1, kRow, from, to);
    ASSERT_FALSE(done);
    EXPECT_EQ(done.error().code, Errc::kInvalidArgument);
  }
  EXPECT_EQ(dst, std::vector<std::byte>(4 * kRow, std::byte{0}));
}

}  // namespace
}  // namespace kvtier::kernels
