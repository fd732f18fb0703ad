// A ring's bytes on the heap, for tests that run both ends of a ring in one process: a zeroed
// std::vector<std::byte> (a fresh ring is all zeros) with the span starting on the 64-byte
// boundary the ring views require, and the ring header constructed there.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <span>
#include <vector>

#include "kvtier/shm/ring_layout.hpp"

namespace kvtier::daemon::testing {

template <class Header>
class HeapRing {
 public:
  explicit HeapRing(std::size_t bytes) : storage_(bytes + shm::kCacheLine) {
    void* start = storage_.data();
    std::size_t space = storage_.size();
    std::align(shm::kCacheLine, bytes, start, space);
    ring_ = {static_cast<std::byte*>(start), bytes};
    header_ = new (start) Header{};
  }
  HeapRing(const HeapRing&) = delete;
  HeapRing& operator=(const HeapRing&) = delete;

  std::span<std::byte> span() const noexcept { return ring_; }
  Header& header() const noexcept { return *header_; }

 private:
  std::vector<std::byte> storage_;
  std::span<std::byte> ring_;
  Header* header_ = nullptr;
};

}  // namespace kvtier::daemon::testing
