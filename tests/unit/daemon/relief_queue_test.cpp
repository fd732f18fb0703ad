// ReliefQueue (daemon/src/relief_queue.hpp): relief the NodeBudget asked for, one sequence at a
// time.
#include "relief_queue.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace kvtier::daemon {
namespace {

ReliefCandidate token(std::uint32_t sequence, std::uint32_t position) { return {0.0f, 1, sequence, position}; }

TEST(ReliefQueue, TakesTheSequenceAskedForFirstWithAllItsTokensInTheOrderAsked) {
  ReliefQueue queue;
  const std::vector<ReliefCandidate> first{token(2, 9), token(1, 4), token(2, 3)};
  const std::vector<ReliefCandidate> second{token(1, 7), token(2, 1)};
  queue.add(first);
  queue.add(second);
  ReliefQueue::Batch batch = queue.take_sequence();
  EXPECT_EQ(batch.sequence, 2u);
  EXPECT_EQ(batch.positions, (std::vector<std::uint32_t>{9, 3, 1}));
  ASSERT_FALSE(queue.empty());
  batch = queue.take_sequence();
  EXPECT_EQ(batch.sequence, 1u);
  EXPECT_EQ(batch.positions, (std::vector<std::uint32_t>{4, 7}));
  EXPECT_TRUE(queue.empty());
}

TEST(ReliefQueue, StartsEmpty) { EXPECT_TRUE(ReliefQueue().empty()); }

}  // namespace
}  // namespace kvtier::daemon
