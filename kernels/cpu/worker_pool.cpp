// WorkerPool (worker_pool.hpp).
#include "worker_pool.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace kvtier::kernels::detail {

WorkerPool::WorkerPool(unsigned workers) : owner_(::getpid()) {
  threads_.reserve(workers);
  for (unsigned i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

WorkerPool& WorkerPool::shared() {
  static WorkerPool pool(shared_workers());
  return pool;
}

unsigned WorkerPool::shared_workers() {
  unsigned threads = std::min(8u, std::max(1u, std::thread::hardware_concurrency()));
  if (const char* env = std::getenv("KVTIER_KERNEL_THREADS"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const unsigned long n = std::strtoul(env, &end, 10);
    if (*end == '\0' && n >= 1) threads = static_cast<unsigned>(std::min(8ul, n));
  }
  return threads - 1;  // the caller is one of them
}

void WorkerPool::run(std::size_t count, const std::function<void(std::size_t)>& task) {
  if (count == 0) return;
  if (count == 1 || threads_.empty() || ::getpid() != owner_) {  // a forked child has no workers
    for (std::size_t i = 0; i < count; ++i) task(i);
    return;
  }
  std::lock_guard serial(run_mu_);
  {
    std::lock_guard lock(mu_);
    task_ = &task;
    count_ = count;
    next_ = 0;
    ++generation_;
  }
  wake_.notify_all();
  drain();
  std::unique_lock lock(mu_);
  done_.wait(lock, [this] { return next_ >= count_ && busy_ == 0; });
  task_ = nullptr;
}

void WorkerPool::drain() {
  std::unique_lock lock(mu_);
  while (next_ < count_) {
    const std::size_t i = next_++;
    ++busy_;
    const auto* task = task_;
    lock.unlock();
    (*task)(i);
    lock.lock();
    --busy_;
  }
  if (busy_ == 0) done_.notify_all();
}

void WorkerPool::work() {
  std::uint64_t seen = 0;
  std::unique_lock lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    lock.unlock();
    drain();
    lock.lock();
  }
}

}  // namespace kvtier::kernels::detail
