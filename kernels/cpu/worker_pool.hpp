// WorkerPool: a few threads that run the chunks of one kernel call with the calling thread
// (host attention over thousands of rows, host_attention.cpp). Private to kvtier_kernels.
//
// run(count, task) calls task(i) once for every i in [0, count), on the workers and the caller,
// and returns when all have returned; tasks must not depend on which thread runs them. Callers
// are served one at a time. Workers sleep on a condition variable between runs (no spinning:
// they would take the cores an engine's own threads need). In a process forked after the pool
// started, the caller runs every task itself. $KVTIER_KERNEL_THREADS = 1 leaves the shared pool
// without workers, for an engine whose own threads hold every core (vLLM's OpenMP threads).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvtier::kernels::detail {

class WorkerPool {
 public:
  explicit WorkerPool(unsigned workers);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void run(std::size_t count, const std::function<void(std::size_t)>& task);

  // The process's pool: shared_workers() workers, started on first use, stopped at exit.
  static WorkerPool& shared();
  // One per hardware thread beyond the caller's, at most 7, or $KVTIER_KERNEL_THREADS − 1 (an
  // integer 1..8; anything else is ignored).
  static unsigned shared_workers();

 private:
  void work();
  // Claims and runs tasks of the current run until none is left.
  void drain();

  std::mutex run_mu_;  // one run at a time
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(std::size_t)>* task_ = nullptr;
  std::size_t count_ = 0, next_ = 0, busy_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
  int owner_;  // the pid whose threads these are
  std::vector<std::thread> threads_;
};

}  // namespace kvtier::kernels::detail
