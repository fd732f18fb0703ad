// Cross-process futex wait/wake on a 32-bit word inside a MAP_SHARED mapping, and a CPU pause
// for spin loops. Private to kvtier_shm. Thread-safety: free functions, any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace kvtier::shm::detail {

// Sleeps while *word == expected, at most `timeout` (may return early: spuriously, on a wake,
// on a signal, or at once if the value already differs). Callers re-check their condition.
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                std::chrono::nanoseconds timeout) noexcept;

// Wakes every waiter on `word` in any process that maps the same memory.
void futex_wake_all(std::atomic<std::uint32_t>& word) noexcept;

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace kvtier::shm::detail
