// Counter rules shared by the score ring and the plan ring (index diagram: ring_layout.hpp).
// Private to shm/. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvtier/protocol/error.hpp"

namespace kvtier::shm::detail {

// A consumer's check of the peer-written write counter, after copying it out: it may only grow
// (`last_write` is the value seen before) and may never run more than `capacity` ahead of
// `read`. kProtocol naming the ring otherwise: the peer broke the ring.
inline Status check_write_counter(std::string_view ring, std::uint64_t write, std::uint64_t last_write,
                                  std::uint64_t read, std::uint32_t capacity) {
  if (write < last_write) {
    return make_error(Errc::kProtocol, std::string(ring) + " ring write counter jumped backwards from " +
                                           std::to_string(last_write) + " to " + std::to_string(write));
  }
  if (write - read > capacity) {
    return make_error(Errc::kProtocol, std::string(ring) + " ring write counter " + std::to_string(write) +
                                           " is beyond capacity: read " + std::to_string(read) +
                                           ", capacity " + std::to_string(capacity));
  }
  return {};
}

// Slots a producer may still fill.
constexpr std::uint64_t free_slots(std::uint64_t write, std::uint64_t read, std::uint32_t capacity) noexcept {
  const std::uint64_t used = write - read;
  return used >= capacity ? 0 : capacity - used;
}

}  // namespace kvtier::shm::detail
