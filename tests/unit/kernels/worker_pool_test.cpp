// WorkerPool (kernels/cpu, white-box): every task of a run is called exactly once, and run returns
// only after all of them have returned, run after run; a pool without workers runs them inline;
// $KVTIER_KERNEL_THREADS sets the shared pool's size.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <thread>
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

TEST(WorkerPool, KernelThreadsFromTheEnvironmentSizeTheSharedPool) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const unsigned fallback = std::min(7u, cores - 1);
  for (const auto& [value, workers] : {std::pair{"1", 0u}, {"3", 2u}, {"8", 7u}, {"9", 7u}, {"0", fallback},
                                       {"two", fallback}, {"", fallback}}) {
    ::setenv("KVTIER_KERNEL_THREADS", value, 1);
    EXPECT_EQ(WorkerPool::shared_workers(), workers) << value;
  }
  ::unsetenv("KVTIER_KERNEL_THREADS");
  EXPECT_EQ(WorkerPool::shared_workers(), fallback);
}

}  // namespace
}  // namespace kvtier::kernels::detail
