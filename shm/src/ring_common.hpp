// What the score ring and the plan ring share: the counter rules and the consumer's copy-out
// (index diagram and memory orders: ring_layout.hpp). Private to shm/. Thread-safety: as the
// calling view (one consumer thread per ring).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "kvtier/base/error.hpp"

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

// The consumer half of pop(): validates the peer-written write counter, copies up to out.size()
// records out of the slots, runs `check(copy, index)` on each copy (the peer may still scribble
// on the slot, so only the copy is looked at), then releases the slots by publishing the new
// read counter. `read` and `last_write` are the view's private cursors.
template <class Header, class Record, class Check>
Result<std::size_t> pop_records(std::string_view ring, Header* header, const Record* slots, std::uint32_t capacity,
                                std::uint64_t& read, std::uint64_t& last_write, std::span<Record> out,
                                const Check& check) {
  const std::uint64_t write = header->producer.write.load(std::memory_order_acquire);
  if (auto ok = check_write_counter(ring, write, last_write, read, capacity); !ok) return tl::unexpected(ok.error());
  last_write = write;
  const std::uint64_t mask = capacity - 1u;
  const auto count = static_cast<std::size_t>(std::min<std::uint64_t>(write - read, out.size()));
  // At most two contiguous runs of slots (to the ring's end, then from slot 0), one memcpy each.
  const auto start = static_cast<std::size_t>(read & mask);
  const std::size_t first_run = std::min<std::size_t>(count, capacity - start);
  std::memcpy(out.data(), &slots[start], first_run * sizeof(Record));
  std::memcpy(out.data() + first_run, &slots[0], (count - first_run) * sizeof(Record));
  for (std::size_t i = 0; i < count; ++i) {
    if (auto ok = check(out[i], read + i); !ok) return tl::unexpected(ok.error());
  }
  read += count;
  header->consumer.read.store(read, std::memory_order_release);
  return count;
}

}  // namespace kvtier::shm::detail
