// Mapping: a client-side MAP_SHARED read-write mapping of a segment fd received from the daemon,
// validated before anything else reads it; munmap on destruction.
//
// Clients never use Boost.Interprocess or named objects: the daemon sends the fd over
// SCM_RIGHTS and the client maps it with plain mmap. The fd is not owned; it may be closed
// once the mapping exists. Thread-safety: the object is a value (move-only); the mapped bytes
// are shared with other processes, see the ring views for their rules.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "kvtier/base/error.hpp"
#include "kvtier/shm/layout.hpp"

namespace kvtier::shm {

// Checks the SegmentHeader at the start of `segment` (whose size is the object's true size):
// size, magic, layout version, ready (acquire), header size, fingerprint, kind (unless
// nullopt), segment size, epoch (unless expected_epoch == 0). Each mismatch has its own
// message naming both values. kVersionMismatch for layout version and fingerprint;
// kBadState for not-ready and a wrong epoch (a segment of another daemon start); kProtocol
// for everything else.
Status validate_segment_header(std::span<const std::byte> segment,
                               std::optional<SegmentKind> expected_kind,
                               std::uint64_t expected_epoch);

class Mapping {
 public:
  // fstat for the size, mmap the whole object, validate_segment_header(expected_kind,
  // expected_epoch; 0 = any epoch). kOsError when fstat/mmap fail.
  static Result<Mapping> map_segment(int fd, SegmentKind expected_kind,
                                     std::uint64_t expected_epoch);

  Mapping(Mapping&& other) noexcept;
  Mapping& operator=(Mapping&& other) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping();

  std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::span<std::byte> bytes() const noexcept { return {data_, size_}; }
  // The daemon-written header; validated at map time (the daemon never rewrites it).
  const SegmentHeader& header() const noexcept {
    return *reinterpret_cast<const SegmentHeader*>(data_);
  }

 private:
  Mapping(std::byte* data, std::size_t size) noexcept : data_(data), size_(size) {}
  void unmap() noexcept;

  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace kvtier::shm
