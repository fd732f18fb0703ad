// KVTIER_CHECK stays on where assert() is compiled out: this file is built with NDEBUG
// (RelWithDebInfo/Release), and the check still reports file:line and its message, then aborts.
#include "kvtier/base/check.hpp"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

int checked_half(int even) {
  KVTIER_CHECK(even % 2 == 0, "checked_half: odd input");
  return even / 2;
}

TEST(Check, PassesWithoutSideEffectsWhenTheConditionHolds) { EXPECT_EQ(checked_half(8), 4); }

TEST(CheckDeathTest, AbortsNamingFileLineConditionAndMessageWhenItFails) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH((void)checked_half(7),
               "check_test\\.cpp:[0-9]+: check failed: even % 2 == 0: checked_half: odd input");
}

TEST(CheckDeathTest, StaysOnInABuildWhereAssertIsCompiledOut) {
#ifndef NDEBUG
  GTEST_SKIP() << "built without NDEBUG; scripts/test builds RelWithDebInfo, which defines it";
#endif
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(KVTIER_CHECK(false, "on under NDEBUG"), "on under NDEBUG");
}

}  // namespace
}  // namespace kvtier
