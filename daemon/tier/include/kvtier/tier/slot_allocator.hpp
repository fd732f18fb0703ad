// Pool-slot allocator of one client's host tier. A slot index addresses the same row position in
// every layer's pool region, so one slot holds one token's K and V for all layers.
//
// Free slots form a stack: a fresh allocator hands out 0, 1, 2, ... and a released slot is the
// next one reused (its rows are the most likely to be cache-warm). Releasing a slot that is not
// allocated (double release, or out of range) returns an error and changes nothing: it can only
// come from a daemon bug, and the daemon would rather end the offending session than abort while
// other clients' plans are in flight.
//
// Memory: 4 bytes + 1 bit per slot. Thread-safety: none; owned by the client's session.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kvtier/base/error.hpp"

namespace kvtier::tier {

class SlotAllocator {
 public:
  explicit SlotAllocator(std::uint32_t capacity);

  // A free slot, or nullopt when all capacity() slots are in use.
  std::optional<std::uint32_t> allocate();

  // kInvalidArgument if slot >= capacity(); kBadState if it is not allocated.
  Status release(std::uint32_t slot);
  // Marks `slots` allocated (adoption after a daemon restart: rows a client already holds).
  // kInvalidArgument for a slot >= capacity(), kBadState for one allocated or listed twice;
  // nothing changes then. One pass over the capacity.
  Status claim(std::span<const std::uint32_t> slots);

  bool is_allocated(std::uint32_t slot) const noexcept {
    return slot < capacity_ && allocated_[slot];
  }
  std::uint32_t used() const noexcept { return capacity_ - static_cast<std::uint32_t>(free_.size()); }
  std::uint32_t available() const noexcept { return static_cast<std::uint32_t>(free_.size()); }
  std::uint32_t capacity() const noexcept { return capacity_; }

 private:
  std::uint32_t capacity_;
  std::vector<std::uint32_t> free_;  // stack; back() is handed out next
  std::vector<bool> allocated_;
};

}  // namespace kvtier::tier
