// WorkerPool (kernels/cpu, white-box): every task of a run is called exactly once, and run returns
// only after all of them have returned, run after run; a pool without workers runs them inline.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <vector>

#include "worker_pool.hpp"

namespace kvtier::kernels::detail {
namespace {

void expect_each_task_once(WorkerPool& pool, std::size_t count) {
  std::vector<std::atomic<int>> calls(count);
  const std::function<void(std::size_t)> task = [&](std::size_t i) { calls[i].fetch_add(1); };
  pool.run(count, task);
  for (std::size_t i = 0; i < count; ++i) EXPECT_EQ(calls[i].load(), 1) << i;
}

TEST(WorkerPool, EveryTaskRunsOnceAndRunWaitsForAll) {
  WorkerPool pool(3);
  for (int round = 0; round < 200; ++round) expect_each_task_once(pool, 1 + round % 17);
  expect_each_task_once(pool, 0);
}

TEST(WorkerPool, ThePoolOfTheProcessAndOneWithoutWorkersServeToo) {
  expect_each_task_once(WorkerPool::shared(), 9);
  WorkerPool none(0);
  expect_each_task_once(none, 5);
}

}  // namespace
}  // namespace kvtier::kernels::detail
