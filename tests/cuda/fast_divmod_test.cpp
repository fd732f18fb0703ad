// FastDivmod (the copy kernels' index splitting) computes exact quotients and remainders for
// every dividend below 2^31; the host build shares the device arithmetic, so it is checked here.
#include "fast_divmod.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace kvtier::kernels::cuda {
namespace {

void expect_exact(std::uint32_t divisor, std::uint32_t n) {
  const FastDivmod fast(divisor);
  std::uint32_t remainder = 0;
  const std::uint32_t q = fast.divmod(n, remainder);
  ASSERT_EQ(q, n / divisor) << n << " / " << divisor;
  ASSERT_EQ(remainder, n % divisor) << n << " % " << divisor;
}

TEST(FastDivmod, MatchesIntegerDivisionOnEdgesAndRandomValues) {
  std::vector<std::uint32_t> divisors{1,
                                      2,
                                      3,
                                      5,
                                      7,
                                      8,
                                      16,
                                      24,
                                      32,
                                      48,
                                      63,
                                      64,
                                      100,
                                      127,
                                      128,
                                      255,
                                      256,
                                      1000,
                                      4096,
                                      65535,
                                      65536,
                                      1000003,
                                      kFastDivmodLimit - 1};
  std::mt19937 rng(42);
  std::uniform_int_distribution<std::uint32_t> any_divisor(1, kFastDivmodLimit - 1);
  for (int i = 0; i < 200; ++i) divisors.push_back(any_divisor(rng));
  std::uniform_int_distribution<std::uint32_t> any_dividend(0, kFastDivmodLimit - 1);
  for (const std::uint32_t d : divisors) {
    for (const std::uint32_t n :
         {0u, 1u, d - 1, d, d + 1, 2 * d - 1, kFastDivmodLimit - 1, kFastDivmodLimit - d}) {
      if (n < kFastDivmodLimit) expect_exact(d, n);
    }
    for (int i = 0; i < 2000; ++i) expect_exact(d, any_dividend(rng));
  }
}

}  // namespace
}  // namespace kvtier::kernels::cuda
