#include "futex.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>

namespace kvtier::shm::detail {
namespace {

// std::atomic<uint32_t> is a plain 32-bit word (static_assert in ring_layout.hpp); the kernel
// only needs its address. No FUTEX_PRIVATE_FLAG: the waker is another process.
std::uint32_t* word_address(std::atomic<std::uint32_t>& word) noexcept {
  return reinterpret_cast<std::uint32_t*>(&word);
}

}  // namespace

void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                std::chrono::nanoseconds timeout) noexcept {
  if (timeout <= std::chrono::nanoseconds::zero()) return;
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  timespec relative{};
  relative.tv_sec = static_cast<time_t>(secs.count());
  relative.tv_nsec = static_cast<long>((timeout - secs).count());
  // EAGAIN (value changed), EINTR, ETIMEDOUT: all mean "re-check", so the result is ignored.
  ::syscall(SYS_futex, word_address(word), FUTEX_WAIT, expected, &relative, nullptr, 0);
}

void futex_wake_all(std::atomic<std::uint32_t>& word) noexcept {
  ::syscall(SYS_futex, word_address(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace kvtier::shm::detail
