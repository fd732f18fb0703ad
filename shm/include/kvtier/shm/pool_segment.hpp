// Pool segment: [SegmentHeader][PoolBlock][padding to 4096][rows per layer] (pool_geometry.hpp
// has the row diagram). The daemon creates it; the client maps the fd and writes demoted rows
// into slots the daemon gave it; the daemon reads and writes rows of committed slots.
//
// The rows region starts at kPoolRowsOffset (4096, so page aligned); every row is 64-byte
// aligned whenever row_bytes() is a multiple of 64, which holds for every real model
// (head_dim * dtype_bytes a multiple of 32). Thread-safety: PoolView is a non-owning value;
// who may touch which row at what time is decided by plans and acks, not by this type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "kvtier/base/error.hpp"
#include "kvtier/shm/layout.hpp"
#include "kvtier/shm/pool_geometry.hpp"
#include "kvtier/shm/segment.hpp"

namespace kvtier::shm {

// Payload bytes (after the SegmentHeader) of a pool segment of `geometry`.
constexpr std::uint64_t pool_payload_bytes(const PoolGeometry& geometry) noexcept {
  return kPoolRowsOffset - sizeof(SegmentHeader) + geometry.total_bytes();
}

// Segment::create(kPool) with the PoolBlock written before `ready`. `geometry` must come from
// make_pool_geometry (asserted).
Result<Segment> create_pool_segment(std::string name, const PoolGeometry& geometry,
                                    std::uint64_t epoch, std::uint32_t client_id,
                                    SegmentOwner owner = {});

class PoolView {
 public:
  // Client (or adopting daemon): copies the PoolBlock out of `segment`, re-validates the
  // geometry with make_pool_geometry and bounds-checks the rows region. kProtocol naming the
  // offending field otherwise.
  static Result<PoolView> validate(std::span<std::byte> segment);
  // Daemon over a segment it created with `geometry`. Precondition (asserted): it fits.
  static PoolView trusted(std::span<std::byte> segment, const PoolGeometry& geometry) noexcept;

  const PoolGeometry& geometry() const noexcept { return geometry_; }
  std::span<std::byte> rows() const noexcept { return rows_; }
  // One layer's rows. Precondition: layer < num_layers.
  std::span<std::byte> layer(std::uint32_t layer) const noexcept;
  // One row (K then V). Preconditions: layer < num_layers, slot < slots.
  std::span<std::byte> row(std::uint32_t layer, std::uint32_t slot) const noexcept;

 private:
  PoolView(std::span<std::byte> rows, const PoolGeometry& geometry) noexcept
      : rows_(rows), geometry_(geometry) {}
  std::span<std::byte> rows_;
  PoolGeometry geometry_;
};

}  // namespace kvtier::shm
