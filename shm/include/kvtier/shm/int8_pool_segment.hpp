// Int8 (T2) pool segment: [SegmentHeader][Int8PoolBlock][padding to 4096][blocks per layer]
// (int8_pool_geometry.hpp has the block diagram). The daemon creates it and is its only writer:
// it quantizes T1 rows into fresh blocks before the plan that moves those tokens to T2. The
// client maps it read-only in effect and dequantizes rows of committed T2 slots.
//
// Thread-safety: Int8PoolView is a non-owning value; which block may be read when is decided by
// plans and acks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "kvtier/base/error.hpp"
#include "kvtier/shm/int8_pool_geometry.hpp"
#include "kvtier/shm/layout.hpp"
#include "kvtier/shm/segment.hpp"

namespace kvtier::shm {

constexpr std::uint64_t int8_pool_payload_bytes(const Int8PoolGeometry& geometry) noexcept {
  return kPoolRowsOffset - sizeof(SegmentHeader) + geometry.total_bytes();
}

// Segment::create(kInt8Pool) with the Int8PoolBlock written before `ready`. `geometry` must come
// from make_int8_pool_geometry (asserted).
Result<Segment> create_int8_pool_segment(std::string name, const Int8PoolGeometry& geometry,
                                         std::uint64_t epoch, std::uint32_t client_id,
                                    SegmentOwner owner = {});

class Int8PoolView {
 public:
  // Client: copies the Int8PoolBlock out, re-validates the geometry and bounds-checks the blocks
  // region against the segment. kProtocol naming the offending field otherwise.
  static Result<Int8PoolView> validate(std::span<std::byte> segment);
  // Daemon over a segment it created with `geometry`. Precondition (asserted): it fits.
  static Int8PoolView trusted(std::span<std::byte> segment, const Int8PoolGeometry& geometry) noexcept;

  const Int8PoolGeometry& geometry() const noexcept { return geometry_; }
  std::span<std::byte> rows() const noexcept { return rows_; }
  // One block of one layer (block_bytes). Preconditions: layer < num_layers, block < blocks.
  std::span<std::byte> block(std::uint32_t layer, std::uint32_t block) const noexcept;

 private:
  Int8PoolView(std::span<std::byte> rows, const Int8PoolGeometry& geometry) noexcept
      : rows_(rows), geometry_(geometry) {}
  std::span<std::byte> rows_;
  Int8PoolGeometry geometry_;
};

}  // namespace kvtier::shm
